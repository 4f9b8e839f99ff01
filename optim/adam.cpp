// Adam and AdamW: validation and one fused update kernel for both. A single pass over each
// parameter reads p, g, m, v (and v_max) and writes p, m, v in place; chunks of all
// parameters run in parallel.
#include "optim/adam.hpp"

// NOTE: GCC 12 reports false "may be used uninitialized" warnings inside its own AVX-512
// intrinsic headers when xsimd is inlined (as in softmax.cpp); silenced for this header.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop

#include <cmath>
#include <functional>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "optim/detail/parallel.hpp"

namespace xg::optim {

namespace {

// One parameter's update: raw pointers into its tensors and its step's scalars.
struct AdamJob {
  Dtype dtype;
  void* p;
  const void* g;
  void* m;
  void* v;
  void* vmax;  // amsgrad only
  bool l2, amsgrad;
  double sign, wd, decay, beta1, beta2, bc2_sqrt, eps, neg_step_size;
};

template <class T>
using Batch = xsimd::batch<T>;

// sqrt and max for a scalar or an xsimd batch, so that one body serves both.
// NOTE: std::sqrt in a plain loop does not vectorise here (errno keeps a branch in the loop).
template <class T>
T vsqrt(T x) {
  return std::sqrt(x);
}
template <class T, class A>
xsimd::batch<T, A> vsqrt(const xsimd::batch<T, A>& x) {
  return xsimd::sqrt(x);
}
template <class T>
T vmax(T a, T b) {
  return a > b ? a : b;
}
template <class T, class A>
xsimd::batch<T, A> vmax(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  return xsimd::select(a > b, a, b);
}

// The scalars of one step, in the kernel's type (V = T or Batch<T>).
template <class V>
struct AdamScalars {
  V sign, wd, decay, b1, c1, b2, c2, bc2_sqrt, eps, neg_step;
  template <class T>
  explicit AdamScalars(const AdamJob& s, T)
      : sign(static_cast<T>(s.sign)),
        wd(static_cast<T>(s.wd)),
        decay(static_cast<T>(s.decay)),
        b1(static_cast<T>(s.beta1)),
        c1(static_cast<T>(1 - s.beta1)),
        b2(static_cast<T>(s.beta2)),
        c2(static_cast<T>(1 - s.beta2)),
        bc2_sqrt(static_cast<T>(s.bc2_sqrt)),
        eps(static_cast<T>(s.eps)),
        neg_step(static_cast<T>(s.neg_step_size)) {}
};

// One element (or one batch of elements): the formula in adam.hpp, with torch's order of
// operations (mul_ then add_, addcmul_, sqrt / bc2 + eps, addcdiv_).
template <bool kL2, bool kAmsgrad, class V>
void adam_body(V& p, V g, V& m, V& v, V& vm, const AdamScalars<V>& s) {
  const V pi = p * s.decay;  // AdamW's decoupled decay; decay == 1 for Adam
  V gi = s.sign * g;
  if constexpr (kL2) gi = gi + s.wd * pi;
  m = m * s.b1 + s.c1 * gi;
  v = v * s.b2 + s.c2 * gi * gi;
  V vd = v;
  if constexpr (kAmsgrad) {
    vd = vmax(vm, v);
    vm = vd;
  }
  const V denom = vsqrt(vd) / s.bc2_sqrt + s.eps;
  p = pi + s.neg_step * (m / denom);
}

// p, g, m, v, vmax: [n] contiguous, one dtype T (vmax only with amsgrad).
template <class T, bool kL2, bool kAmsgrad>
void adam_kernel(T* p, const T* g, T* m, T* v, T* vm, int64_t n, const AdamJob& job) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  const AdamScalars<Batch<T>> sb(job, T{});
  const AdamScalars<T> ss(job, T{});
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    Batch<T> bp = Batch<T>::load_unaligned(p + i), bm = Batch<T>::load_unaligned(m + i);
    Batch<T> bv = Batch<T>::load_unaligned(v + i);
    Batch<T> bx = kAmsgrad ? Batch<T>::load_unaligned(vm + i) : Batch<T>(T(0));
    adam_body<kL2, kAmsgrad>(bp, Batch<T>::load_unaligned(g + i), bm, bv, bx, sb);
    bp.store_unaligned(p + i);
    bm.store_unaligned(m + i);
    bv.store_unaligned(v + i);
    if constexpr (kAmsgrad) bx.store_unaligned(vm + i);
  }
  for (; i < n; ++i) {
    T x = kAmsgrad ? vm[i] : T(0);
    adam_body<kL2, kAmsgrad>(p[i], g[i], m[i], v[i], x, ss);
    if constexpr (kAmsgrad) vm[i] = x;
  }
}

void run(const AdamJob& job, int64_t begin, int64_t end) {
  dispatch_float(job.dtype, "Adam.step", [&](auto tag) {
    using T = decltype(tag);
    T* vmax = job.amsgrad ? static_cast<T*>(job.vmax) + begin : nullptr;
    detail::dispatch_bool(job.l2, [&](auto l2) {
      detail::dispatch_bool(job.amsgrad, [&](auto ams) {
        adam_kernel<T, decltype(l2)::value, decltype(ams)::value>(
            static_cast<T*>(job.p) + begin, static_cast<const T*>(job.g) + begin, static_cast<T*>(job.m) + begin,
            static_cast<T*>(job.v) + begin, vmax, end - begin, job);
      });
    });
  });
}

// A state buffer of p's shape and dtype (flat, of the owned slice's size when sharded), made
// (zeroed) on first use.
Tensor& buffer(ParamState& st, const char* name, const Tensor& p, bool sharded, int64_t owned, const std::string& opt,
               std::size_t index) {
  const Shape shape = sharded ? Shape{owned} : p.shape();
  Tensor& b = st.buffers[name];
  if (!b.defined()) b = zeros(shape, p.dtype());
  if (b.dtype() != p.dtype()) b = b.to(p.dtype());  // the parameter was converted (Module::to)
  check(b.shape() == shape, opt, ".step: state '", name, "' ", shape_str(b.shape()), " does not match parameter ",
        index, " of shape ", shape_str(p.shape()), sharded ? str_cat(" (its shard: ", owned, " elements)") : "");
  return b;
}

// Adam and AdamW differ only in how weight decay enters (`decoupled`).
// With ZeRO (`shards` not empty) only parameter i's slice shards[i] is read and written: the
// kernel runs on [begin, end) of p and g against the flat state, in chunks that start where
// one process's would (the slice starts at a chunk boundary), so each element is the same.
// `grad_of(i, p)`: parameter i's gradient and where its slice starts in it (Optimizer::owned_grad).
using GradOf = std::function<std::pair<Tensor, int64_t>(std::size_t, const Tensor&)>;
template <class Options>
void adam_step(std::vector<ParamGroup<Options>>& groups, std::vector<ParamState>& state, const std::vector<Shard>& shards,
               const GradOf& grad_of, bool decoupled, const std::string& name) {
  NoGradGuard no_grad;
  std::vector<AdamJob> jobs;
  std::vector<int64_t> sizes;
  std::size_t index = 0;
  for (const auto& group : groups) {
    const Options& o = group.options;
    for (const Tensor& p : group.params) {
      ParamState& st = state[index++];
      const auto [g, g_begin] = grad_of(index - 1, p);
      if (!g.defined()) continue;  // as torch: a parameter without a gradient is skipped
      const bool sharded = !shards.empty();
      const Shard own = sharded ? shards[index - 1] : Shard{0, p.numel()};
      Tensor& m = buffer(st, "exp_avg", p, sharded, own.size(), name, index - 1);
      Tensor& v = buffer(st, "exp_avg_sq", p, sharded, own.size(), name, index - 1);
      Tensor* vmax = o.amsgrad ? &buffer(st, "max_exp_avg_sq", p, sharded, own.size(), name, index - 1) : nullptr;
      const double t = static_cast<double>(++st.step);
      const double bc1 = 1 - std::pow(o.betas.first, t);
      const double bc2 = 1 - std::pow(o.betas.second, t);
      AdamJob job;
      job.dtype = p.dtype();
      const std::size_t skip = static_cast<std::size_t>(own.begin) * itemsize(p.dtype());
      job.p = static_cast<char*>(p.raw_data()) + skip;
      job.g = static_cast<const char*>(g.raw_data()) + static_cast<std::size_t>(g_begin) * itemsize(p.dtype());
      job.m = m.raw_data();
      job.v = v.raw_data();
      job.vmax = vmax ? vmax->raw_data() : nullptr;
      job.l2 = !decoupled && o.weight_decay != 0;
      job.amsgrad = o.amsgrad;
      job.sign = o.maximize ? -1.0 : 1.0;
      job.wd = o.weight_decay;
      job.decay = decoupled ? 1 - o.lr * o.weight_decay : 1.0;
      job.beta1 = o.betas.first;
      job.beta2 = o.betas.second;
      job.bc2_sqrt = std::sqrt(bc2);
      job.eps = o.eps;
      job.neg_step_size = -(o.lr / bc1);
      jobs.push_back(job);
      sizes.push_back(own.size());
    }
  }
  detail::for_each_chunk(sizes, [&](int64_t j, int64_t begin, int64_t end) { run(jobs[j], begin, end); });
}

std::vector<std::string> adam_buffers() { return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }

template <class Options>
void validate_adam(const Options& o, const std::string& name) {
  detail::check_option(o.lr >= 0, name, "lr", o.lr, "must be >= 0");
  detail::check_option(o.betas.first >= 0 && o.betas.first < 1, name, "betas[0]", o.betas.first, "must be in [0, 1)");
  detail::check_option(o.betas.second >= 0 && o.betas.second < 1, name, "betas[1]", o.betas.second,
                       "must be in [0, 1)");
  detail::check_option(o.eps > 0, name, "eps", o.eps, "must be > 0");
  detail::check_option(o.weight_decay >= 0, name, "weight_decay", o.weight_decay, "must be >= 0");
}

template <class Options>
OptionValues adam_values(const Options& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

template <class Options>
Options adam_from_values(const std::map<std::string, double>& v, const std::string& name) {
  auto get = [&](const char* key) {
    auto it = v.find(key);
    check(it != v.end(), name, ": option '", key, "' missing");
    return it->second;
  };
  Options o;
  o.lr = get("lr");
  o.betas = {get("beta1"), get("beta2")};
  o.eps = get("eps");
  o.weight_decay = get("weight_decay");
  o.amsgrad = get("amsgrad") != 0;
  o.maximize = get("maximize") != 0;
  return o;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : OptimizerBase("Adam", adam_buffers()) {
  init({{std::move(params), options}});
}
Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups) : OptimizerBase("Adam", adam_buffers()) {
  init(std::move(groups));
}
void Adam::validate(const AdamOptions& o) const { validate_adam(o, name_); }
OptionValues Adam::to_values(const AdamOptions& o) const { return adam_values(o); }
AdamOptions Adam::from_values(const std::map<std::string, double>& v) const {
  return adam_from_values<AdamOptions>(v, name_);
}
void Adam::step() {
  for (const auto& g : groups_) validate(g.options);
  adam_step(groups_, state_, shards_, [this](std::size_t i, const Tensor& p) { return owned_grad(i, p); }, false, name_);
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options) : OptimizerBase("AdamW", adam_buffers()) {
  init({{std::move(params), options}});
}
AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups) : OptimizerBase("AdamW", adam_buffers()) {
  init(std::move(groups));
}
void AdamW::validate(const AdamWOptions& o) const { validate_adam(o, name_); }
OptionValues AdamW::to_values(const AdamWOptions& o) const { return adam_values(o); }
AdamWOptions AdamW::from_values(const std::map<std::string, double>& v) const {
  return adam_from_values<AdamWOptions>(v, name_);
}
void AdamW::step() {
  for (const auto& g : groups_) validate(g.options);
  adam_step(groups_, state_, shards_, [this](std::size_t i, const Tensor& p) { return owned_grad(i, p); }, true, name_);
}

}  // namespace xg::optim

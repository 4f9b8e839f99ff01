// SGD's validation and its fused update: one pass over each parameter reads p, g and the
// momentum buffer and writes p and the buffer; chunks of all parameters run in parallel.
#include "optim/sgd.hpp"

#include <cmath>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "optim/detail/parallel.hpp"

namespace xg::optim {

namespace {

// One parameter's update: its tensors and its group's scalars.
struct SGDJob {
  Tensor p, g, buf;  // buf undefined without momentum
  bool first;        // no momentum buffer yet: buf = d
  const SGDOptions* o;
};

// p, g, buf: [n] contiguous, one dtype T. See sgd.hpp for the formula.
template <class T, bool kDecay, bool kMomentum, bool kNesterov, bool kFirst>
void sgd_kernel(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const SGDOptions& o) {
  const T sign = o.maximize ? T(-1) : T(1);
  const T wd = static_cast<T>(o.weight_decay);
  const T mom = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1 - o.dampening);
  const T neg_lr = static_cast<T>(-o.lr);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T d = sign * g[i];
    if constexpr (kDecay) d = d + wd * p[i];
    if constexpr (kMomentum) {
      const T b = kFirst ? d : buf[i] * mom + keep * d;
      buf[i] = b;
      d = kNesterov ? d + mom * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

void run(const SGDJob& job, int64_t begin, int64_t end) {
  const SGDOptions& o = *job.o;
  dispatch_float(job.p.dtype(), "SGD.step", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(job.p.raw_data()) + begin;
    const T* g = static_cast<const T*>(job.g.raw_data()) + begin;
    T* buf = job.buf.defined() ? static_cast<T*>(job.buf.raw_data()) + begin : nullptr;
    detail::dispatch_bool(o.weight_decay != 0, [&](auto decay) {
      detail::dispatch_bool(o.momentum != 0, [&](auto momentum) {
        detail::dispatch_bool(o.nesterov, [&](auto nesterov) {
          detail::dispatch_bool(job.first, [&](auto first) {
            sgd_kernel<T, decltype(decay)::value, decltype(momentum)::value, decltype(nesterov)::value,
                       decltype(first)::value>(p, g, buf, end - begin, o);
          });
        });
      });
    });
  });
}

double get(const std::map<std::string, double>& v, const char* key) {
  auto it = v.find(key);
  check(it != v.end(), "SGD: option '", key, "' missing");
  return it->second;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : OptimizerBase("SGD", {"momentum_buffer"}) {
  init({{std::move(params), options}});
}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) : OptimizerBase("SGD", {"momentum_buffer"}) {
  init(std::move(groups));
}

void SGD::validate(const SGDOptions& o) const {
  check(!std::isnan(o.lr), "SGD: lr is required (torch.optim.SGD has no default learning rate)");
  detail::check_option(o.lr >= 0, name_, "lr", o.lr, "must be >= 0");
  detail::check_option(o.momentum >= 0, name_, "momentum", o.momentum, "must be >= 0");
  detail::check_option(o.dampening >= 0 && o.dampening <= 1, name_, "dampening", o.dampening, "must be in [0, 1]");
  detail::check_option(o.weight_decay >= 0, name_, "weight_decay", o.weight_decay, "must be >= 0");
  check(!o.nesterov || (o.momentum > 0 && o.dampening == 0), name_,
        ": invalid nesterov = true (Nesterov momentum requires momentum > 0 and dampening = 0, got momentum = ",
        o.momentum, ", dampening = ", o.dampening, ")");
}

OptionValues SGD::to_values(const SGDOptions& o) const {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

SGDOptions SGD::from_values(const std::map<std::string, double>& v) const {
  SGDOptions o;
  o.lr = get(v, "lr");
  o.momentum = get(v, "momentum");
  o.dampening = get(v, "dampening");
  o.weight_decay = get(v, "weight_decay");
  o.nesterov = get(v, "nesterov") != 0;
  o.maximize = get(v, "maximize") != 0;
  return o;
}

void SGD::step() {
  NoGradGuard no_grad;
  std::vector<SGDJob> jobs;
  std::vector<int64_t> sizes;
  std::size_t index = 0;
  for (const auto& group : groups_) {
    const SGDOptions& o = group.options;
    validate(o);
    for (const Tensor& p : group.params) {
      ParamState& st = state_[index++];
      Tensor g = p.grad();
      if (!g.defined()) continue;  // as torch: a parameter without a gradient is skipped
      SGDJob job{p, g, Tensor(), false, &o};
      if (o.momentum != 0) {
        Tensor& buf = st.buffers["momentum_buffer"];
        if (buf.defined() && buf.dtype() != p.dtype()) buf = buf.to(p.dtype());  // after Module::to
        job.first = !buf.defined();
        if (job.first) buf = empty(p.shape(), p.dtype());
        check(buf.shape() == p.shape(), "SGD.step: momentum buffer ", shape_str(buf.shape()),
              " does not match parameter ", index - 1, " of shape ", shape_str(p.shape()));
        job.buf = buf;
      }
      ++st.step;
      jobs.push_back(job);
      sizes.push_back(p.numel());
    }
  }
  detail::for_each_chunk(sizes, [&](int64_t j, int64_t begin, int64_t end) { run(jobs[j], begin, end); });
}

}  // namespace xg::optim

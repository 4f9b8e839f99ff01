// Gradient clipping: one pass to measure the total norm (partial sums per chunk, added in a
// fixed order, so the result does not depend on the thread count) and one pass to scale.
#include "optim/clip.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "optim/detail/parallel.hpp"

namespace xg::optim {

namespace {

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    check(p.defined(), "clip_grad: a parameter is an undefined tensor");
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  return grads;
}

std::vector<int64_t> sizes_of(const std::vector<Tensor>& ts) {
  std::vector<int64_t> sizes;
  for (const Tensor& t : ts) sizes.push_back(t.numel());
  return sizes;
}

// Partial result of one chunk: sum |g|^p (or max |g| for the inf norm), in double.
template <class T>
double chunk_norm(const T* g, int64_t n, double p) {
  double acc = 0;
  if (std::isinf(p)) {
    for (int64_t i = 0; i < n; ++i) acc = std::max(acc, static_cast<double>(std::fabs(g[i])));
    // max drops NaN; keep it so that error_if_nonfinite sees it
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(g[i])) return g[i];
  } else if (p == 2) {
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  } else if (p == 1) {
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += std::fabs(static_cast<double>(g[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) acc += std::pow(std::fabs(static_cast<double>(g[i])), p);
  }
  return acc;
}

}  // namespace

namespace {

// The norm of the parts of each gradient this process holds: parameter k's owned[k] (all of it
// when owned is empty), read from .grad or, with `slices`, from slices[k], which holds that part
// alone. Per-chunk partial sums, numbered by the chunks of whole gradients as one process's are.
double clip_owned(const std::vector<Tensor>& params, const std::vector<Shard>& owned, const std::vector<Tensor>* slices,
                  const SumOverRanks& sum_over_ranks, double max_norm, double norm_type, bool error_if_nonfinite) {
  check(norm_type > 0, "clip_grad_norm_: invalid norm_type = ", norm_type, " (must be > 0, or inf)");
  check(max_norm >= 0, "clip_grad_norm_: invalid max_norm = ", max_norm, " (must be >= 0)");
  check(owned.empty() || owned.size() == params.size(), "clip_grad_norm_: ", owned.size(), " shards for ",
        params.size(), " parameters");
  check(!slices || slices->size() == params.size(), "clip_grad_norm_: ", slices ? slices->size() : 0,
        " gradient slices for ", params.size(), " parameters");
  NoGradGuard no_grad;
  // Per parameter with a gradient: the gradient, its whole size, the part this process
  // measures and scales, and where that part starts in the gradient's data.
  std::vector<Tensor> grads;
  std::vector<int64_t> sizes, mine_sizes, skip;
  std::vector<Shard> mine;
  for (std::size_t k = 0; k < params.size(); ++k) {
    check(params[k].defined(), "clip_grad_norm_: parameter ", k, " is an undefined tensor");
    const Tensor g = slices ? (*slices)[k] : params[k].grad();
    if (!g.defined()) continue;
    const Shard s = owned.empty() ? Shard{0, params[k].numel()} : owned[k];
    check(!slices || g.numel() == s.size(), "clip_grad_norm_: the gradient slice of parameter ", k, " holds ",
          g.numel(), " elements, its shard ", s.size());
    grads.push_back(g);
    sizes.push_back(params[k].numel());
    mine.push_back(s);
    mine_sizes.push_back(s.size());
    skip.push_back(slices ? 0 : s.begin);
  }
  if (grads.empty()) return 0.0;
  std::vector<int64_t> first_chunk(grads.size() + 1, 0);  // chunk index where each grad starts
  for (std::size_t k = 0; k < grads.size(); ++k)
    first_chunk[k + 1] = first_chunk[k] + (sizes[k] + detail::kChunk - 1) / detail::kChunk;
  std::vector<double> partial(static_cast<std::size_t>(first_chunk.back()), 0.0);
  const bool inf = std::isinf(norm_type);
  detail::for_each_chunk(mine_sizes, [&](int64_t k, int64_t begin, int64_t end) {
    const Tensor& g = grads[k];
    const int64_t at = mine[k].begin + begin;  // a chunk boundary of the whole gradient
    partial[first_chunk[k] + at / detail::kChunk] = dispatch_float(g.dtype(), "clip_grad_norm_", [&](auto tag) {
      using T = decltype(tag);
      return chunk_norm(static_cast<const T*>(g.raw_data()) + skip[k] + begin, end - begin, norm_type);
    });
  });
  if (sum_over_ranks) sum_over_ranks(partial);
  double total = 0;
  for (double x : partial) {
    if (inf) {
      total = std::isnan(x) || std::isnan(total) ? std::nan("") : std::max(total, x);
    } else {
      total += x;
    }
  }
  if (!inf) total = norm_type == 2 ? std::sqrt(total) : norm_type == 1 ? total : std::pow(total, 1.0 / norm_type);
  check(!error_if_nonfinite || std::isfinite(total), "clip_grad_norm_: the total norm of order ", norm_type,
        " of the gradients is non-finite (", total,
        "), so it cannot be clipped; pass error_if_nonfinite = false "
        "to clip anyway");
  const double coef = std::min(max_norm / (total + 1e-6), 1.0);  // NaN stays NaN, as torch's clamp
  if (coef == 1.0) return total;                                 // multiplying by 1 changes nothing
  detail::for_each_chunk(mine_sizes, [&](int64_t k, int64_t begin, int64_t end) {
    const Tensor& g = grads[k];
    dispatch_float(g.dtype(), "clip_grad_norm_", [&](auto tag) {
      using T = decltype(tag);
      T* d = static_cast<T*>(g.raw_data()) + skip[k] + begin;
      const T c = static_cast<T>(coef);
#pragma omp simd
      for (int64_t i = 0; i < end - begin; ++i) d[i] *= c;
    });
  });
  return total;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_owned(params, {}, nullptr, nullptr, max_norm, norm_type, error_if_nonfinite);
}

double clip_grad_norm_(const std::vector<Tensor>& params, const std::vector<Shard>& owned,
                       const SumOverRanks& sum_over_ranks, double max_norm, double norm_type, bool error_if_nonfinite) {
  return clip_owned(params, owned, nullptr, sum_over_ranks, max_norm, norm_type, error_if_nonfinite);
}

double clip_grad_norm_(const std::vector<Tensor>& params, const std::vector<Shard>& owned,
                       const std::vector<Tensor>& slices, const SumOverRanks& sum_over_ranks, double max_norm,
                       double norm_type, bool error_if_nonfinite) {
  return clip_owned(params, owned, &slices, sum_over_ranks, max_norm, norm_type, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  check(clip_value >= 0, "clip_grad_value_: invalid clip_value = ", clip_value, " (must be >= 0)");
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params);
  detail::for_each_chunk(sizes_of(grads), [&](int64_t k, int64_t begin, int64_t end) {
    const Tensor& g = grads[k];
    dispatch_float(g.dtype(), "clip_grad_value_", [&](auto tag) {
      using T = decltype(tag);
      T* d = static_cast<T*>(g.raw_data()) + begin;
      const T hi = static_cast<T>(clip_value), lo = -hi;
#pragma omp simd
      for (int64_t i = 0; i < end - begin; ++i) d[i] = d[i] < lo ? lo : (d[i] > hi ? hi : d[i]);
    });
  });
}

}  // namespace xg::optim

// Token and sequence log-probabilities (on the fused cross-entropy) and the entropy of the
// predicted distribution as one fused row op (x: [N, V], rows in parallel, SIMD exp).
#include "losses/logprobs.hpp"


#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/row_kernels.hpp"
#include "autograd/reduce.hpp"
#include "losses/cross_entropy.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

using Grads = std::vector<Tensor>;

Tensor shift_labels(const Tensor& labels, int64_t ignore_index) {
  check(labels.defined() && labels.dtype() == kInt64, "shift_labels: labels must be an int64 tensor");
  check(labels.dim() >= 1, "shift_labels: labels must have a sequence dim, got a 0-d tensor");
  Tensor out = empty(labels.shape(), kInt64);
  const int64_t T = labels.shape().back(), rows = T == 0 ? 0 : labels.numel() / T;
  const int64_t* l = labels.data<int64_t>();
  int64_t* o = out.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t + 1 < T; ++t) o[r * T + t] = l[r * T + t + 1];
    o[r * T + T - 1] = ignore_index;
  }
  return out;
}

// out = log_softmax(logits)[labels] = -cross_entropy(logits, labels, none)
//   =>   dlogits = g (onehot - softmax)   (0 on ignored positions)
Tensor token_logprobs(const Tensor& logits, const Tensor& labels, int64_t ignore_index) {
  return -detail::cross_entropy_as("token_logprobs", logits, labels, ignore_index, Reduction::None, 0.0);
}

Tensor sequence_logprobs(const Tensor& logits, const Tensor& labels, const Tensor& mask, bool average) {
  const char* op = "sequence_logprobs";
  check(logits.defined() && labels.defined(), op, ": logits and labels must be defined");
  check(labels.dim() >= 1, op, ": labels must have a sequence dim, got a 0-d tensor");
  check(logits.dim() == labels.dim() + 1 && Shape(logits.shape().begin(), logits.shape().end() - 1) == labels.shape(),
        op, ": logits ", shape_str(logits.shape()), " and labels ", shape_str(labels.shape()),
        " do not match (labels must have the logits' shape without the last, vocabulary dim)");
  constexpr int64_t kIgnore = -100;
  Tensor targets = labels;
  if (mask.defined()) {
    check(labels.dtype() == kInt64, op, ": labels must be int64 token ids, got ", dtype_name(labels.dtype()));
    // Masked-out positions never reach the gather (their labels may be padding or -100).
    targets = where(detail::bool_mask(mask, labels.shape(), op, "mask"), labels, full(labels.shape(), kIgnore, kInt64));
  }
  const Tensor tok = -detail::cross_entropy_as(op, logits, targets, kIgnore, Reduction::None, 0.0);
  Tensor total = sum(tok, {-1});
  if (!average) return total;
  const Tensor kept = ne(targets, full(targets.shape(), kIgnore, kInt64)).to(logits.dtype());
  return total / sum(kept, {-1});
}

namespace {

// Over a row: s = sum exp(x - m) and a = sum exp(x - m) (x - m), skipping zero terms
// (x = -inf); float partial sums flushed into doubles.
template <class T>
void entropy_sums(const T* x, T m, int64_t n, double& s, double& a) {
  constexpr int64_t B = static_cast<int64_t>(Batch<T>::size);
  const Batch<T> vm(m), zero(T(0));
  s = a = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t b1 = std::min(n, b0 + kSumBlock);
    Batch<T> vs(T(0)), va(T(0));
    int64_t i = b0;
    for (; i + B <= b1; i += B) {
      const Batch<T> d = Batch<T>::load_unaligned(x + i) - vm;
      const Batch<T> e = vexp(d);
      vs += e;
      va += xsimd::select(e > zero, e * d, zero);
    }
    T ps = xsimd::hadd(vs), pa = xsimd::hadd(va);
    for (; i < b1; ++i) {
      const T d = x[i] - m, e = std::exp(d);
      ps += e;
      if (e > T(0)) pa += e * d;
    }
    s += ps;
    a += pa;
  }
}

// x: [N, V] -> h: [N], stats: [N, 2] = (max, log sum exp(x - max));  H = log s - a / s
template <class T>
void entropy_forward(const T* x, int64_t N, int64_t V, T* h, T* stats) {
#pragma omp parallel for schedule(static) if (N > 1 && N * V >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* xr = x + i * V;
    const T m = row_max(xr, V);
    double s, a;
    entropy_sums(xr, m, V, s, a);
    const double logs = std::log(s);
    h[i] = static_cast<T>(logs - a / s);
    stats[2 * i] = m;
    stats[2 * i + 1] = static_cast<T>(logs);
  }
}

// dx_j = -g p_j (log p_j + H),  log p_j = (x_j - m) - log s;  0 where p_j == 0
template <class T>
void entropy_backward(const T* x, const T* g, const T* h, const T* stats, int64_t N, int64_t V, T* dx) {
  constexpr int64_t B = static_cast<int64_t>(Batch<T>::size);
#pragma omp parallel for schedule(static) if (N > 1 && N * V >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* xr = x + i * V;
    T* d = dx + i * V;
    const T m = stats[2 * i], logs = stats[2 * i + 1], gi = g[i], hi = h[i];
    const Batch<T> vm(m), vl(logs), vg(gi), vh(hi), zero(T(0));
    int64_t j = 0;
    for (; j + B <= V; j += B) {
      const Batch<T> lp = (Batch<T>::load_unaligned(xr + j) - vm) - vl;
      const Batch<T> p = vexp(lp);
      xsimd::select(p > zero, -vg * p * (lp + vh), zero).store_unaligned(d + j);
    }
    for (; j < V; ++j) {
      const T lp = (xr[j] - m) - logs, p = std::exp(lp);
      d[j] = p > T(0) ? -gi * p * (lp + hi) : T(0);
    }
  }
}

}  // namespace

// out = -sum_j p_j log p_j over the last dim   =>   dx_j = -g p_j (log p_j + out)
Tensor entropy_from_logits(const Tensor& logits) {
  const char* op = "entropy_from_logits";
  detail::check_float(logits, op, "logits");
  check(logits.dim() >= 1, op, ": logits must have a class dim, got a 0-d tensor");
  const Shape& ls = logits.shape();
  const Shape lead(ls.begin(), ls.end() - 1);
  const int64_t V = ls.back(), N = shape_numel(lead);
  check(V > 0 || N == 0, op, ": logits ", shape_str(ls), " have no classes");
  Tensor out = empty(lead, logits.dtype());
  Tensor stats = empty({N, 2}, logits.dtype());
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    entropy_forward(logits.data<T>(), N, V, out.data<T>(), stats.data<T>());
  });
  return record(out, {logits}, op, [stats, N, V](const Tensor& g, const Tensor& out, const Grads& in) {
    Tensor dx = empty(in[0].shape(), in[0].dtype());
    dispatch_float(g.dtype(), "entropy_from_logits backward", [&](auto tag) {
      using T = decltype(tag);
      entropy_backward(in[0].data<T>(), g.data<T>(), out.data<T>(), stats.data<T>(), N, V, dx.data<T>());
    });
    return Grads{dx};
  });
}

}  // namespace xg::losses

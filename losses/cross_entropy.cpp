// Cross-entropy as one fused op on logits viewed as rows x: [N, C]: per row, the max, the
// sum of exp(x - max) (SIMD, float partial sums flushed into a double) and the target's
// logit; backward writes softmax - (smoothed) onehot straight into dx. Rows run in parallel.
#include "losses/cross_entropy.hpp"


#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/row_kernels.hpp"
#include "autograd/detail/op_util.hpp"

namespace xg::losses {

using Grads = std::vector<Tensor>;

namespace {

// sum_i (m - x[i]) in double (the label-smoothing term needs sum_c -log_softmax(x)_c).
template <class T>
double sum_gap(const T* x, T m, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(m) - static_cast<double>(x[i]);
  return s;
}

// d[i] = s * exp((x[i] - m) - logs) - off over a contiguous row.
template <class T>
void scaled_softmax_minus(const T* x, T m, T logs, T s, T off, T* d, int64_t n) {
  constexpr int64_t B = static_cast<int64_t>(Batch<T>::size);
  const Batch<T> vm(m), vl(logs), vs(s), vo(off);
  int64_t i = 0;
  for (; i + B <= n; i += B) (vs * vexp((Batch<T>::load_unaligned(x + i) - vm) - vl) - vo).store_unaligned(d + i);
  for (; i < n; ++i) d[i] = s * std::exp((x[i] - m) - logs) - off;
}

// x: [N, C], t: [N] -> loss: [N] (double; 0 where ignored), stats: [N, 2] = (max, log sum exp(x - max))
template <class T>
void forward_rows(const T* x, const int64_t* t, int64_t N, int64_t C, int64_t ignore, double eps, T* stats,
                  double* loss) {
#pragma omp parallel for schedule(static) if (N > 1 && N * C >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t ti = t[i];
    if (ti == ignore) {
      loss[i] = 0;
      stats[2 * i] = stats[2 * i + 1] = T(0);
      continue;
    }
    const T* xr = x + i * C;
    const T m = row_max(xr, C);
    const double logs = std::log(sum_exp_shifted(xr, m, C));
    stats[2 * i] = m;
    stats[2 * i + 1] = static_cast<T>(logs);
    // -log_softmax(x)_c = (m - x_c) + logs
    const double nll = (static_cast<double>(m) - static_cast<double>(xr[ti])) + logs;
    if (eps > 0) {
      const double smooth = sum_gap(xr, m, C) + static_cast<double>(C) * logs;
      loss[i] = (1 - eps) * nll + eps / static_cast<double>(C) * smooth;
    } else {
      loss[i] = nll;
    }
  }
}

// dx[i, c] = s_i * (softmax(x_i)_c - eps/C - (1 - eps) [c == t_i]), 0 for ignored rows;
// s_i = g[i] * scale (reduction none) or g[0] * scale (sum: scale 1, mean: 1 / n_valid).
template <class T>
void backward_rows(const T* x, const int64_t* t, const T* stats, const T* g, bool per_row, double scale, int64_t N,
                   int64_t C, int64_t ignore, double eps, T* dx) {
#pragma omp parallel for schedule(static) if (N > 1 && N * C >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    T* d = dx + i * C;
    const int64_t ti = t[i];
    if (ti == ignore) {
      std::fill(d, d + C, T(0));
      continue;
    }
    const double s = static_cast<double>(per_row ? g[i] : g[0]) * scale;
    scaled_softmax_minus(x + i * C, stats[2 * i], stats[2 * i + 1], static_cast<T>(s),
                         static_cast<T>(s * eps / static_cast<double>(C)), d, C);
    d[ti] -= static_cast<T>(s * (1 - eps));
  }
}

// "3" for 1-d targets, "[1,2]" otherwise: where flat row i sits in the targets' shape.
std::string position(int64_t i, const Shape& shape) {
  if (shape.size() <= 1) return std::to_string(i);
  Shape idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return shape_str(idx);
}

// How many targets are not ignore_index; an error names the first out of range.
int64_t checked_valid_targets(const char* op, const Tensor& targets, int64_t C, int64_t ignore_index) {
  const int64_t* t = targets.data<int64_t>();
  int64_t n_valid = 0;
  for (int64_t i = 0, N = targets.numel(); i < N; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || t[i] >= C)  // not check(): its message arguments would be built for every row
      throw Error(str_cat(op, ": target ", t[i], " out of range for ", C, " classes (at position ",
                          position(i, targets.shape()), "; targets must be in [0, ", C, ") or ignore_index ",
                          ignore_index, ")"));
    ++n_valid;
  }
  return n_valid;
}

}  // namespace

namespace detail {

// out = reduce_i((1 - eps) (lse_i - x_i[t_i]) + eps/C sum_c (lse_i - x_ic))   over rows i not ignored
//   =>   dx_i = s_i (softmax(x_i) - (1 - eps) onehot(t_i) - eps/C),   s_i the reduction's scale of g
Tensor cross_entropy_as(const char* op, const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                        Reduction reduction, double label_smoothing) {
  check(logits.defined() && targets.defined(), op, ": logits and targets must be defined");
  check(is_floating(logits.dtype()), op, ": logits must be float32 or float64, got ", dtype_name(logits.dtype()), " ",
        shape_str(logits.shape()));
  check(targets.dtype() == kInt64, op, ": targets must be int64 class indices, got ", dtype_name(targets.dtype()), " ",
        shape_str(targets.shape()));
  check(logits.dim() >= 1, op, ": logits must have a class dim, got a 0-d tensor");
  const Shape& ls = logits.shape();
  const Shape lead(ls.begin(), ls.end() - 1);
  check(targets.shape() == lead, op, ": logits ", shape_str(ls), " and targets ", shape_str(targets.shape()),
        " do not match (targets must have the logits' shape without the last, class dim: ", shape_str(lead), ")");
  check(reduction != Reduction::BatchMean, op, ": reduction batchmean is only for kl_div (use mean, sum or none)");
  check(label_smoothing >= 0 && label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ", label_smoothing);
  const int64_t C = ls.back(), N = targets.numel();
  check(C > 0 || N == 0, op, ": logits ", shape_str(ls), " have no classes");

  const int64_t* t = targets.data<int64_t>();
  const int64_t n_valid = checked_valid_targets(op, targets, C, ignore_index);

  const double eps = label_smoothing;
  Tensor stats = empty({N, 2}, logits.dtype());
  Tensor out = dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    std::vector<double> loss(static_cast<std::size_t>(N));
    forward_rows(logits.data<T>(), t, N, C, ignore_index, eps, stats.data<T>(), loss.data());
    if (reduction == Reduction::None) {
      Tensor o = empty(lead, logits.dtype());
      T* po = o.data<T>();
      for (int64_t i = 0; i < N; ++i) po[i] = static_cast<T>(loss[static_cast<std::size_t>(i)]);
      return o;
    }
    double total = 0;
    for (double l : loss) total += l;
    // NOTE: mean with every target ignored is 0/0 = NaN, as in PyTorch.
    if (reduction == Reduction::Mean) total /= static_cast<double>(n_valid);
    return scalar_tensor(total, logits.dtype());
  });

  return record(out, {logits, targets}, "cross_entropy", saves({0, 1}),
                [stats, ignore_index, eps, reduction, n_valid, N, C](const Tensor& g, const Tensor&, const Grads& in) {
                  if (!wants(in, 0)) return Grads{Tensor(), Tensor()};
                  Tensor dx = reuse_if_last_reader(in[0]);  // the logits become their gradient in place
                  if (!dx.defined()) dx = empty(in[0].shape(), in[0].dtype());
                  const double scale =
                      reduction == Reduction::Mean && n_valid > 0 ? 1.0 / static_cast<double>(n_valid) : 1.0;
                  dispatch_float(g.dtype(), "cross_entropy backward", [&](auto tag) {
                    using T = decltype(tag);
                    backward_rows(in[0].data<T>(), in[1].data<int64_t>(), stats.data<T>(), g.data<T>(),
                                  reduction == Reduction::None, scale, N, C, ignore_index, eps, dx.data<T>());
                  });
                  return Grads{dx, Tensor()};
                });
}

void cross_entropy_rows_and_grad_(Tensor& logits, const Tensor& targets, int64_t ignore_index, const char* op,
                                  double* loss, bool grad, const Tensor& row_scale) {
  check(logits.dim() == 2 && targets.dim() == 1 && targets.shape()[0] == logits.shape()[0] &&
            targets.dtype() == kInt64 && is_floating(logits.dtype()),
        op, ": logits must be [N, C] float and targets [N] int64, got ", shape_str(logits.shape()), " and ",
        shape_str(targets.shape()));
  const int64_t N = logits.shape()[0], C = logits.shape()[1];
  check(!row_scale.defined() || (row_scale.dtype() == logits.dtype() && row_scale.numel() == N),
        op, ": row_scale must be [", N, "] in the logits' dtype");
  checked_valid_targets(op, targets, C, ignore_index);
  const int64_t* t = targets.data<int64_t>();
  dispatch_float(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> stats(static_cast<std::size_t>(2 * N));
    T* x = logits.data<T>();
    forward_rows(x, t, N, C, ignore_index, 0.0, stats.data(), loss);
    if (!grad) return;
    const T one(1);
    const bool per_row = row_scale.defined();
    // row by row: in place is safe
    backward_rows(x, t, stats.data(), per_row ? row_scale.data<T>() : &one, per_row, 1.0, N, C, ignore_index, 0.0, x);
  });
}

double cross_entropy_sum_and_grad_(Tensor& logits, const Tensor& targets, int64_t ignore_index, const char* op) {
  std::vector<double> loss(static_cast<std::size_t>(logits.dim() == 2 ? logits.shape()[0] : 0));
  cross_entropy_rows_and_grad_(logits, targets, ignore_index, op, loss.data(), true, Tensor());
  double total = 0;
  for (double l : loss) total += l;
  return total;
}

}  // namespace detail

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Reduction reduction,
                     double label_smoothing) {
  return detail::cross_entropy_as("cross_entropy", logits, targets, ignore_index, reduction, label_smoothing);
}

}  // namespace xg::losses

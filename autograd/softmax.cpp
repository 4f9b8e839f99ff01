// softmax and log_softmax over one dim: fused, numerically stable kernels (max subtracted
// before exp) on the layout x: [O, D, I], D the softmax dim; with a fused backward each.
// When dim is last (I == 1) every row is contiguous and rows run in parallel.
#include "autograd/softmax.hpp"


#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/row_kernels.hpp"
#include "autograd/detail/op_util.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

constexpr int64_t kBlock = 64;     // columns per task when dim is not last

struct Layout {
  int64_t O = 1, D = 1, I = 1;  // x viewed as [O, D, I]
};

Layout layout(const Shape& shape, int64_t dim) {
  Layout l;
  const int64_t nd = static_cast<int64_t>(shape.size());
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t n = shape[static_cast<std::size_t>(d)];
    if (d < dim) l.O *= n;
    else if (d == dim) l.D = n;
    else l.I *= n;
  }
  return l;
}

// y[i] = exp(x[i] - m[i]) elementwise over n columns.
template <class T>
void exp_sub(const T* x, const T* m, T* y, int64_t n) {
  constexpr int64_t B = static_cast<int64_t>(Batch<T>::size);
  int64_t i = 0;
  for (; i + B <= n; i += B)
    vexp(Batch<T>::load_unaligned(x + i) - Batch<T>::load_unaligned(m + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] = std::exp(x[i] - m[i]);
}

// y[i] = exp(x[i]) over n elements.
template <class T>
void exp_into(const T* x, T* y, int64_t n) {
  constexpr int64_t B = static_cast<int64_t>(Batch<T>::size);
  int64_t i = 0;
  for (; i + B <= n; i += B) vexp(Batch<T>::load_unaligned(x + i)).store_unaligned(y + i);
  for (; i < n; ++i) y[i] = std::exp(x[i]);
}

// softmax (kLog = false) or log_softmax (kLog = true) forward; x, y: [O, D, I]
template <class T, bool kLog>
void forward_kernel(const T* x, T* y, const Layout& l) {
  const int64_t O = l.O, D = l.D, I = l.I, work = O * D * I;
  if (work == 0) return;
  if (I == 1) {
#pragma omp parallel for schedule(static) if (O > 1 && work >= kParallelMin)
    for (int64_t o = 0; o < O; ++o) {
      const T* xr = x + o * D;
      T* yr = y + o * D;
      const T m = row_max(xr, D);
      const double s = exp_shifted(xr, m, yr, D);
      if constexpr (kLog) {
        const T lse = static_cast<T>(std::log(s));
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) yr[d] = (xr[d] - m) - lse;
      } else {
        const T inv = static_cast<T>(1 / s);
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) yr[d] *= inv;
      }
    }
    return;
  }
  // dim not last: each task owns a block of columns and walks the D rows of its o.
  const int64_t nb = (I + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (work >= kParallelMin)
  for (int64_t t = 0; t < O * nb; ++t) {
    const int64_t o = t / nb, c0 = (t % nb) * kBlock, n = std::min(kBlock, I - c0);
    const T* xb = x + o * D * I + c0;
    T* yb = y + o * D * I + c0;
    T m[kBlock];
    double s[kBlock];
    for (int64_t i = 0; i < n; ++i) {
      m[i] = -std::numeric_limits<T>::infinity();
      s[i] = 0;
    }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) m[i] = xb[d * I + i] > m[i] ? xb[d * I + i] : m[i];
    for (int64_t d = 0; d < D; ++d) {
      exp_sub(xb + d * I, m, yb + d * I, n);
      for (int64_t i = 0; i < n; ++i) s[i] += yb[d * I + i];
    }
    T f[kBlock];  // log(sum) for log_softmax, 1 / sum for softmax
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<T>(kLog ? std::log(s[i]) : 1 / s[i]);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i)
        yb[d * I + i] = kLog ? (xb[d * I + i] - m[i]) - f[i] : yb[d * I + i] * f[i];
  }
}

// softmax backward:     dx = y * (g - sum_d(g * y))
// log_softmax backward: dx = g - exp(y) * sum_d(g)
template <class T, bool kLog>
void backward_kernel(const T* g, const T* y, T* dx, const Layout& l) {
  const int64_t O = l.O, D = l.D, I = l.I, work = O * D * I;
  if (work == 0) return;
  if (I == 1) {
#pragma omp parallel for schedule(static) if (O > 1 && work >= kParallelMin)
    for (int64_t o = 0; o < O; ++o) {
      const T* gr = g + o * D;
      const T* yr = y + o * D;
      T* dr = dx + o * D;
      double acc = 0;
      if constexpr (kLog) {
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < D; ++d) acc += gr[d];
        const T sg = static_cast<T>(acc);
        exp_into(yr, dr, D);
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dr[d] = gr[d] - dr[d] * sg;
      } else {
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(gr[d]) * yr[d];
        const T dot = static_cast<T>(acc);
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dr[d] = yr[d] * (gr[d] - dot);
      }
    }
    return;
  }
  const int64_t nb = (I + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (work >= kParallelMin)
  for (int64_t t = 0; t < O * nb; ++t) {
    const int64_t o = t / nb, c0 = (t % nb) * kBlock, n = std::min(kBlock, I - c0);
    const int64_t base = o * D * I + c0;
    double acc[kBlock];
    for (int64_t i = 0; i < n; ++i) acc[i] = 0;
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i)
        acc[i] += kLog ? static_cast<double>(g[base + d * I + i])
                       : static_cast<double>(g[base + d * I + i]) * y[base + d * I + i];
    T a[kBlock];
    for (int64_t i = 0; i < n; ++i) a[i] = static_cast<T>(acc[i]);
    for (int64_t d = 0; d < D; ++d) {
      const int64_t r = base + d * I;
      if constexpr (kLog) {
        exp_into(y + r, dx + r, n);
        for (int64_t i = 0; i < n; ++i) dx[r + i] = g[r + i] - dx[r + i] * a[i];
      } else {
        for (int64_t i = 0; i < n; ++i) dx[r + i] = y[r + i] * (g[r + i] - a[i]);
      }
    }
  }
}

template <bool kLog>
Tensor softmax_impl(const Tensor& x, int64_t dim) {
  const char* op = kLog ? "log_softmax" : "softmax";
  check(is_floating(x.dtype()), op, ": expected a float32, float64 or bfloat16 tensor, got ", dtype_name(x.dtype()));
  const int64_t d = wrap_dim(dim, x.shape(), op);
  // bf16: read, computed in float32 and rounded once, as PyTorch's CPU kernels do (the
  // backward likewise: the gradient widened, dx rounded once).
  if (x.dtype() == kBFloat16) return softmax_impl<kLog>(x.to(kFloat32), d).to(kBFloat16);
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T, kLog>(x.data<T>(), out.data<T>(), layout(x.shape(), d));
  });
  return record(out, {x}, op, saves({}, true), [d](const Tensor& g, const Tensor& out, const Grads&) {
    Tensor dx = empty(out.shape(), out.dtype());
    dispatch_float(g.dtype(), "softmax backward", [&](auto tag) {
      using T = decltype(tag);
      backward_kernel<T, kLog>(g.data<T>(), out.data<T>(), dx.data<T>(), layout(out.shape(), d));
    });
    return Grads{dx};
  });
}

}  // namespace

// out = exp(x - max) / sum(exp(x - max)) along dim   =>   dx = out * (g - sum(g * out))
Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl<false>(x, dim); }

// out = x - max - log(sum(exp(x - max))) along dim   =>   dx = g - exp(out) * sum(g)
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl<true>(x, dim); }

}  // namespace xg

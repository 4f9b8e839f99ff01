// Internal to xgrad's .cpp files: vectorised kernels over one contiguous row that softmax,
// logsumexp, attention and the losses share: the row max, and exp(x - m) with its sum
// (xsimd's exp; float partial sums flushed into a double every kSumBlock elements, so a
// float32 row of any length sums as accurately as PyTorch's).
#pragma once

// NOTE: GCC 12 reports false "(may be) used uninitialized" warnings inside its own AVX-512
// intrinsic headers (the _mm512_undefined_* idiom) when xsimd's exp, min and max are
// inlined; silenced for this header only.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace xg {

template <class T>
using Batch = xsimd::batch<T>;

constexpr int64_t kSumBlock = 256;

// xsimd::exp, defined for every input. For double, xsimd rounds x * log2(e) and converts it
// to int64, with a scalar cast on targets that lack the vector instruction (AVX2), and that
// cast is undefined behaviour for -inf (a masked score), +inf and NaN (UBSan reports it). The
// argument is therefore clamped to [-1000, 1000], beyond which exp is already 0 or inf, and a
// NaN goes through exp as 0 and comes back out as NaN. The float path converts with an
// intrinsic whose out-of-range result is defined, and is left as xsimd has it.
template <class T>
Batch<T> vexp(const Batch<T>& x) {
  if constexpr (std::is_same<T, double>::value) {
    const auto nan = xsimd::isnan(x);
    const Batch<T> finite = xsimd::select(nan, Batch<T>(0.0), xsimd::clip(x, Batch<T>(-1000.0), Batch<T>(1000.0)));
    return xsimd::select(nan, x, xsimd::exp(finite));
  } else {
    return xsimd::exp(x);
  }
}

// max of x[0, n); -inf for an empty row. A vector of maxima, then its lanes: GCC's
// `omp simd reduction(max)` kept the running max in memory, and reading it back as a vector
// stalled on store forwarding (a fifth of a short-row attention forward's own time).
template <class T>
T row_max(const T* x, int64_t n) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  T m = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  if (n >= W) {
    Batch<T> vm = Batch<T>::load_unaligned(x);
    for (i = W; i + W <= n; i += W) vm = xsimd::max(vm, Batch<T>::load_unaligned(x + i));
    alignas(64) T lanes[W];
    vm.store_aligned(lanes);
    for (int64_t l = 0; l < W; ++l) m = lanes[l] > m ? lanes[l] : m;
  }
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

// y[i] = exp(x[i] - m) (y may be x, or null to only sum); returns the sum of the exponentials.
template <class T>
double exp_shifted(const T* x, T m, T* y, int64_t n) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  const Batch<T> vm(m);
  double total = 0;
  for (int64_t b0 = 0; b0 < n; b0 += kSumBlock) {
    const int64_t b1 = std::min(n, b0 + kSumBlock);
    Batch<T> acc(T(0));
    int64_t i = b0;
    for (; i + W <= b1; i += W) {
      const Batch<T> e = vexp(Batch<T>::load_unaligned(x + i) - vm);
      if (y) e.store_unaligned(y + i);
      acc += e;
    }
    T part = xsimd::hadd(acc);
    for (; i < b1; ++i) {
      const T e = std::exp(x[i] - m);
      if (y) y[i] = e;
      part += e;
    }
    total += part;
  }
  return total;
}

// sum_i exp(x[i] - m), without storing the exponentials.
template <class T>
double sum_exp_shifted(const T* x, T m, int64_t n) {
  return exp_shifted<T>(x, m, nullptr, n);
}

}  // namespace xg

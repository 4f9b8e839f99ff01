// Internal to xgrad's .cpp files: x @ w^T for one row of x (decoding one token: every linear
// layer's product is a matrix-vector product), as dot products of x with the rows of w.
// A model too large for the caches reads its weights from memory for every token, and this
// kernel streams them from memory faster than dnnl_sgemm's path for one row does; with w in
// the cache the two are level (BM_LinearOneRow). For two or more rows of x dnnl_sgemm is the
// faster from the cache, and those stay with it.
#pragma once

#include <cstdint>

#include "autograd/detail/row_kernels.hpp"

namespace xg::gemv {

// c[n] = dot(a, B[n, :]) (+ beta c[n] when beta != 0) for n0 <= n < n1: a [K], B [N, K] (row
// stride ldb), c [N]. One row of B at a time, so that B is read as one sequential stream
// (four rows side by side, four streams a row apart, read memory more slowly); two vector
// accumulators hide the FMA's latency; K past the last whole vector is summed in scalars.
template <class T>
void row_by_transposed(int64_t n0, int64_t n1, int64_t K, const T* a, const T* B, int64_t ldb, T beta, T* c) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  for (int64_t n = n0; n < n1; ++n) {
    const T* b = B + n * ldb;
    Batch<T> acc0(T(0)), acc1(T(0));
    int64_t k = 0;
    for (; k + 2 * W <= K; k += 2 * W) {
      acc0 = xsimd::fma(Batch<T>::load_unaligned(a + k), Batch<T>::load_unaligned(b + k), acc0);
      acc1 = xsimd::fma(Batch<T>::load_unaligned(a + k + W), Batch<T>::load_unaligned(b + k + W), acc1);
    }
    if (k + W <= K) {
      acc0 = xsimd::fma(Batch<T>::load_unaligned(a + k), Batch<T>::load_unaligned(b + k), acc0);
      k += W;
    }
    T sum = xsimd::hadd(acc0 + acc1);
    for (; k < K; ++k) sum += a[k] * b[k];
    c[n] = beta == T(0) ? sum : sum + beta * c[n];
  }
}

}  // namespace xg::gemv

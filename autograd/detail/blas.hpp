// Internal to xgrad's .cpp files: the one place that calls BLAS. A typed gemm over
// row-major arrays: float32 on the library gemm_backend.hpp's rules give the product (oneDNN's
// dnnl_sgemm or OpenBLAS's cblas_sgemm), float64 on cblas_dgemm.
#pragma once

#include <cblas.h>

#include <cstdint>
#include <type_traits>

#include "autograd/bfloat16.hpp"

namespace xg::blas {

// Defined in gemm_backend.cpp: whether a float32 product of `madds` multiply-adds goes to
// oneDNN (gemm_backend.hpp's rules), and the call itself.
bool sgemm_on_onednn(double madds);
void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C = op(A) op(B) + beta C for bfloat16 A and B, float32 C, on oneDNN's matmul primitive
// (gemm_bf16.cpp; matmul.cpp calls it when bf16_gemm() is OneDNN). Shapes and strides as gemm's
// below. It runs on the calling thread (matmul.cpp splits a product over the threads).
void onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t lda,
                      const bfloat16* B, int64_t ldb, float beta, float* C, int64_t ldc);

// C = alpha op(A) op(B) + beta C, row-major; op transposes when its flag is set.
// C: [M, N], op(A): [M, K], op(B): [K, N]; lda, ldb, ldc are the row strides of A, B, C as
// stored (so A is [K, M] in memory when trans_a is set). Returns at once when C is empty.
// whole_madds: M N K of the whole product when this call computes one thread's part of it
// (matmul.cpp's split), so that the library chosen by size is the same on any thread count;
// 0 for this call's own.
// NOTE: BLAS indexes with 32-bit int; callers check that their sizes fit.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
          const T* B, int64_t ldb, T beta, T* C, int64_t ldc, double whole_madds = 0) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "blas::gemm: float or double only");
  if (M == 0 || N == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    const double madds = whole_madds > 0 ? whole_madds : static_cast<double>(M) * N * K;
    if (sgemm_on_onednn(madds)) return onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                static_cast<int>(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                static_cast<int>(ldc));
}

}  // namespace xg::blas

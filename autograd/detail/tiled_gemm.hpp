// Internal to xgrad's .cpp files: register-tiled products for operands that fit in the L1/L2
// cache (attention's per-head products with short heads), with no packing and no call overhead:
// BLAS pays a fixed cost per call that these shapes cannot amortise.
#pragma once

#include <cstdint>

#include "autograd/detail/row_kernels.hpp"

namespace xg::tiled {

// Accumulators a tile may hold, leaving registers for the row of B and the broadcast of A:
// half of AVX-512's 32; 12 of AVX2's 16 (tiles of 6 rows by 2 vectors, 3 registers to spare).
// NOTE: on AVX2, 12 rather than 8 (4 x 2): each row of B loaded then serves 6 rows of A, not 4,
// which is what lets AVX2 builds beat BLAS up to 256 keys (kTiledMaxKeys in attention.cpp).
#if defined(__AVX512F__)
constexpr int kAccumulators = 16;
#else
constexpr int kAccumulators = 12;
#endif

// Keeps x in a vector register: without it GCC folds each use of a row of B into its FMA as a
// memory operand, R loads of every vector instead of one, and the tile then waits on loads.
template <class T>
inline Batch<T> in_register(Batch<T> x) {
  auto r = x.data;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(r));
#endif
  return Batch<T>(r);
}

// C[0:R, 0:NV W] (+)= alpha sum_r a(i, r) B[r, :] for one R x (NV vectors) tile of C, with
// a(i, r) = A[i ai + r ar]. The sums run over r in order, whatever the thread count.
template <class T, int R, int NV>
inline void tile(int64_t K, T alpha, const T* A, int64_t ai, int64_t ar, const T* B, int64_t ldb, T* C, int64_t ldc,
                 bool accumulate) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  Batch<T> c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = Batch<T>(T(0));
  for (int64_t k = 0; k < K; ++k) {
    Batch<T> b[NV];
    for (int v = 0; v < NV; ++v) b[v] = in_register(Batch<T>::load_unaligned(B + k * ldb + v * W));
    for (int r = 0; r < R; ++r) {
      const Batch<T> a(A[r * ai + k * ar]);
      for (int v = 0; v < NV; ++v) c[r][v] = xsimd::fma(a, b[v], c[r][v]);
    }
  }
  const Batch<T> al(alpha);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      T* out = C + r * ldc + v * W;
      const Batch<T> x = c[r][v] * al;
      (accumulate ? x + Batch<T>::load_unaligned(out) : x).store_unaligned(out);
    }
}

// All M rows of an NV-vector column block: tiles of kAccumulators / NV rows, then single rows.
template <class T, int NV>
void column_block(int64_t M, int64_t K, T alpha, const T* A, int64_t ai, int64_t ar, const T* B, int64_t ldb, T* C,
                  int64_t ldc, bool accumulate) {
  constexpr int R = kAccumulators / NV;
  int64_t i = 0;
  for (; i + R <= M; i += R) tile<T, R, NV>(K, alpha, A + i * ai, ai, ar, B, ldb, C + i * ldc, ldc, accumulate);
  if constexpr (R > 4)
    for (; i + 4 <= M; i += 4) tile<T, 4, NV>(K, alpha, A + i * ai, ai, ar, B, ldb, C + i * ldc, ldc, accumulate);
  for (; i < M; ++i) tile<T, 1, NV>(K, alpha, A + i * ai, ai, ar, B, ldb, C + i * ldc, ldc, accumulate);
}

// C = alpha op(A) B (+ C when accumulate), row-major: C [M, N] with leading dim ldc, B [K, N]
// with leading dim ldb, and op(A) [M, K] read as a(i, r) = A[i ai + r ar]: ai = lda, ar = 1
// for A stored [M, K]; ai = 1, ar = lda for A stored [K, M] (op(A) = A^T). A product by B^T
// needs B transposed first (transpose below). Columns past the last whole vector run as scalar
// sums in the same order.
template <class T>
void gemm(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t ai, int64_t ar, const T* B, int64_t ldb, T* C,
          int64_t ldc, bool accumulate) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  constexpr int kWide = kAccumulators >= 16 ? 4 : 2;  // vectors per column block
  int64_t n = 0;
  for (; n + kWide * W <= N; n += kWide * W)
    column_block<T, kWide>(M, K, alpha, A, ai, ar, B + n, ldb, C + n, ldc, accumulate);
  for (; n + 2 * W <= N; n += 2 * W) column_block<T, 2>(M, K, alpha, A, ai, ar, B + n, ldb, C + n, ldc, accumulate);
  for (; n + W <= N; n += W) column_block<T, 1>(M, K, alpha, A, ai, ar, B + n, ldb, C + n, ldc, accumulate);
  for (; n < N; ++n)
    for (int64_t i = 0; i < M; ++i) {
      T s = 0;
      for (int64_t r = 0; r < K; ++r) s = std::fma(A[i * ai + r * ar], B[r * ldb + n], s);
      T& out = C[i * ldc + n];
      out = accumulate ? out + alpha * s : alpha * s;
    }
}

// dst[c, r] = src[r, c] for src [rows, cols] (leading dim lds) into dst [cols, rows] (leading
// dim ldd): each destination row a strided gather of one source column.
template <class T>
void transpose(const T* src, int64_t rows, int64_t cols, int64_t lds, T* dst, int64_t ldd) {
  for (int64_t c = 0; c < cols; ++c) {
    T* d = dst + c * ldd;
    const T* s = src + c;
#pragma omp simd
    for (int64_t r = 0; r < rows; ++r) d[r] = s[r * lds];
  }
}

}  // namespace xg::tiled

// Internal to xgrad's .cpp files: register-tiled bf16 products with float32 sums for operands
// that fit in the L1/L2 cache (attention's per-head products under autocast), on AVX512-BF16's
// VDPBF16PS: one instruction multiplies 16 pairs of bf16 and adds both products to 16 float32
// sums, twice the multiply-adds of a float32 FMA. B is packed in pairs along the summed dim
// ("VNNI" layout: Bp[k / 2][n][2] = B[k][n], B[k + 1][n]) so that a 512-bit load holds one pair
// for each of 16 columns; A's row i contributes A[i][k], A[i][k + 1] as one broadcast 32-bit word.
// Without AVX512-BF16 in the build there is nothing here (kHaveBf16Tiles false).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "autograd/bfloat16.hpp"

namespace xg::tiled_bf16 {

#if defined(__AVX512BF16__) && defined(__AVX512F__)
constexpr bool kHaveBf16Tiles = true;

// NOTE: the packing functions and gemm are noinline. Inlined into attention's kernels they made
// its bf16 forward + backward 12% slower (41.0 against 36.4 ms CPU a call at SmolLM2's shape,
// BM_AttentionAutocastForwardBackward, one thread, alternated).

// n values of src rounded to bf16 (nearest, ties to even) into dst, then zeros up to `padded`.
__attribute__((noinline)) inline void to_bf16(const float* src, int64_t n, uint16_t* dst, int64_t padded) {
  int64_t j = 0;
  // (__m256i) reinterprets the 16 bf16 as the integer vector they are stored as.
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + j)));
  for (; j < n; ++j) dst[j] = bf16::from_float(src[j]);
  for (; j < padded; ++j) dst[j] = 0;
}

// Rows [0, rows) of src (leading dim lds), each `n` values, into bf16 rows of `padded` values
// (n rounded up to even, zeros after): an A operand, its pairs along the row.
inline void rows_to_bf16(const float* src, int64_t rows, int64_t n, int64_t lds, uint16_t* dst, int64_t padded) {
  for (int64_t r = 0; r < rows; ++r) to_bf16(src + r * lds, n, dst + r * padded, padded);
}

// B[k][n] = src[k][n] (rows [0, K) of src, leading dim lds, columns [0, N)) packed in pairs:
// dst[(k / 2) ldd 2 + 2 n + k % 2], for k up to K rounded to even (a zero row past K).
__attribute__((noinline)) inline void pack_rows_in_pairs(const float* src, int64_t K, int64_t N, int64_t lds,
                                                         uint16_t* dst, int64_t ldd) {
  for (int64_t k = 0; k < K; k += 2) {
    uint16_t* d = dst + (k / 2) * ldd * 2;
    const float* r0 = src + k * lds;
    const float* r1 = k + 1 < K ? r0 + lds : nullptr;
    int64_t n = 0;
    for (; n + 16 <= N; n += 16) {
      const __m512 a = _mm512_loadu_ps(r0 + n), b = r1 ? _mm512_loadu_ps(r1 + n) : _mm512_setzero_ps();
      // bf16 of (a[i], b[i]) side by side: the pair's 32-bit word is a in its low half.
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a));
      const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(b));
      _mm512_storeu_si512(d + 2 * n, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; n < N; ++n) {
      d[2 * n] = bf16::from_float(r0[n]);
      d[2 * n + 1] = r1 ? bf16::from_float(r1[n]) : 0;
    }
  }
}

// B[k][n] = src[n][k] (B = src^T for src [N, K], leading dim lds) packed in pairs as above:
// each of src's rows gives its column of Bp, its values already paired along k.
__attribute__((noinline)) inline void pack_transposed_in_pairs(const float* src, int64_t N, int64_t K, int64_t lds,
                                                               uint16_t* dst, int64_t ldd, uint16_t* row_scratch) {
  const int64_t K2 = (K + 1) / 2;
  for (int64_t n = 0; n < N; ++n) {
    to_bf16(src + n * lds, K, row_scratch, 2 * K2);
    for (int64_t k2 = 0; k2 < K2; ++k2) std::memcpy(dst + 2 * (k2 * ldd + n), row_scratch + 2 * k2, 4);
  }
}

// One R x NV-vector tile: C[0:R, 0:16 NV] (+)= alpha sum_k2 A(r, k2) . Bp[k2][:], the last
// vector's columns cut to `tail` (1..16). A(r, k2), the pair (A[r][2 k2], A[r][2 k2 + 1]), is the
// 32-bit word at pair r ai + k2 ak of A2; Bp: pairs, ldb columns a pair row.
template <int R, int NV>
inline void tile(int64_t K2, float alpha, const uint16_t* A2, int64_t ai, int64_t ak, const uint16_t* Bp, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate, int tail) {
  const __mmask16 last = static_cast<__mmask16>(tail == 16 ? 0xFFFF : (1u << tail) - 1);
  // NOTE: GCC 12 stored all 16 accumulators to the stack on every step of this loop (perf
  // annotate) while the epilogue below branched on `accumulate`.
  __m512 c[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) c[r][v] = _mm512_setzero_ps();
  for (int64_t k2 = 0; k2 < K2; ++k2) {
    __m512bh b[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const uint16_t* src = Bp + (k2 * ldb + 16 * v) * 2;
      b[v] = (__m512bh)(v + 1 < NV ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi32(last, src));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      int32_t pair;  // (memcpy: the pairs are stored as bf16 values)
      std::memcpy(&pair, A2 + 2 * (r * ai + k2 * ak), 4);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, b[v]);
    }
  }
  // Branch-free: with a branch on `accumulate` here GCC 12 kept the accumulators in memory too.
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      float* out = C + r * ldc + 16 * v;
      const __mmask16 m = v + 1 < NV ? static_cast<__mmask16>(0xFFFF) : last;
      const __m512 prev = _mm512_maskz_loadu_ps(accumulate ? m : static_cast<__mmask16>(0), out);
      _mm512_mask_storeu_ps(out, m, _mm512_fmadd_ps(c[r][v], al, prev));
    }
}

// All M rows of one column block of NV vectors: tiles of 4 rows, then single rows.
template <int NV>
inline void column_block(int64_t M, int64_t K2, float alpha, const uint16_t* A2, int64_t ai, int64_t ak,
                         const uint16_t* Bp, int64_t ldb, float* C, int64_t ldc, bool accumulate, int tail) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) tile<4, NV>(K2, alpha, A2 + 2 * i * ai, ai, ak, Bp, ldb, C + i * ldc, ldc, accumulate, tail);
  for (; i < M; ++i) tile<1, NV>(K2, alpha, A2 + 2 * i * ai, ai, ak, Bp, ldb, C + i * ldc, ldc, accumulate, tail);
}

// C[M, N] (leading dim ldc) = alpha A Bp (+ C when accumulate): A [M, 2 K2] in bf16 pairs, the
// pair (i, k2) at pair i ai + k2 ak of A2 (bf16 rows of an even length L: ai = L / 2,
// ak = 1; pairs packed along A's columns, A = Wp^T: ai = 1, ak = Wp's row of words); Bp packed
// pairs [K2][ldb][2] (ldb >= N). Sums in float32, over k in order for each element, whatever
// the thread count.
__attribute__((noinline)) inline void gemm(int64_t M, int64_t N, int64_t K2, float alpha, const uint16_t* A2,
                                           int64_t ai, int64_t ak, const uint16_t* Bp, int64_t ldb, float* C,
                                           int64_t ldc, bool accumulate) {
  int64_t n = 0;
  for (; n + 64 <= N; n += 64) column_block<4>(M, K2, alpha, A2, ai, ak, Bp + 2 * n, ldb, C + n, ldc, accumulate, 16);
  for (; n + 16 < N; n += 16) column_block<1>(M, K2, alpha, A2, ai, ak, Bp + 2 * n, ldb, C + n, ldc, accumulate, 16);
  if (n < N)
    column_block<1>(M, K2, alpha, A2, ai, ak, Bp + 2 * n, ldb, C + n, ldc, accumulate, static_cast<int>(N - n));
}
#else
constexpr bool kHaveBf16Tiles = false;
#endif

}  // namespace xg::tiled_bf16

// Internal to xgrad's .cpp files: llama.cpp's other 32-value block formats (dtype.hpp's q4_1,
// q5_0, q5_1; "legacy quants" in ggml's words), as block_formats.hpp's q8_0 and q4_0: how a block
// widens, and how a row of blocks dots with a row of floats. The layouts are ggml-common.h's:
//
//   q4_1 (block_q4_1, 20 bytes): half d, half m, uint8 qs[16]             x = d c + m
//   q5_0 (block_q5_0, 22 bytes): half d, uint8 qh[4], uint8 qs[16]        x = d (c - 16)
//   q5_1 (block_q5_1, 24 bytes): half d, half m, uint8 qh[4], uint8 qs[16] x = d c + m
//
// Value j < 16's code is qs[j]'s low nibble, value j + 16's its high nibble; q5's fifth bit of
// value j is bit j of qh (a little-endian uint32). llama.cpp's quantizer writes q5_0 and q5_1 where
// a Q4_K_M or Q5_K_M file's rows are not whole 256-value super-blocks (576- or 896-wide models).
//
// The values are ggml's dequantize_row_q4_1/_q5_0/_q5_1's, bit for bit: d c is exact in float32
// (a half's 11 bits times 5), so the one rounding is the min's add, the same in a fused
// multiply-add. Every dtype widens through them in float32.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "autograd/detail/block_formats.hpp"

namespace xg::blocks {

#if defined(__AVX512F__) && defined(__F16C__)
// q5_0's codes c - 16 of values 0..15 (*c0) and 16..31 (*c1) as floats: a constant table picked
// by the low 4 bits (vpermps reads an index's low 4 bits alone: no masking), plus 16 where the
// value's bit of qh is set (qh's 32 bits read as two mask registers, one bit a lane).
__attribute__((always_inline)) inline void q5_0_codes(const uint8_t* blk, __m512* c0, __m512* c1) {
  const __m512 codes = _mm512_setr_ps(-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1);
  const __m512 sixteen = _mm512_set1_ps(16);
  __mmask16 fifth0, fifth1;
  std::memcpy(&fifth0, blk + 2, 2);
  std::memcpy(&fifth1, blk + 4, 2);
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 6)));
  const __m512 lo = _mm512_permutexvar_ps(q, codes), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), codes);
  *c0 = _mm512_mask_add_ps(lo, fifth0, lo, sixteen);
  *c1 = _mm512_mask_add_ps(hi, fifth1, hi, sixteen);
}

// f(0, v) and f(16, v) with a block's values 0..15 and 16..31.
// - q5_0: its codes c - 16 (q5_0_codes) times d. (Code 16 under a negative d is then -0, as
//   ggml's (c - 16) * d; a table of d (l - 16) for the low 4 bits l, plus 16 d, would give +0.)
// - q4_1: the block's 16 possible values d c + m made once as a table in registers, each code
//   picking its value with one vpermps, as the k-quants' tables do (k_formats.hpp).
// - q5_1: a second table for codes 16..31 (d c + m rounds once, as ggml's; adding 16 d to the first
//   table's value would round twice), picked by vpermt2ps, which reads an index's low 5 bits. qh is
//   broadcast to every lane and rotated right by j - 4 (lane j, values 0..15) or j + 12 (values
//   16..31), which puts bit j or j + 16 at bit 4, and one ternary-logic op takes bits 0-3 from the
//   code and the rest from the rotated qh. (Masked permutes instead: two on the one permute port
//   for every 16 values, 9.6 -> 7.7 G values/s.)
template <bool kFifth, bool kMin, class F>
__attribute__((always_inline)) inline void legacy_each16(const uint8_t* blk, F f) {
  const __m512 d = block_d(blk);  // F16C, inline: block_scale is a call
  if constexpr (!kMin) {
    static_assert(kFifth, "q4_0 is block_formats.hpp's Q4");
    __m512 c0, c1;
    q5_0_codes(blk, &c0, &c1);
    f(0, _mm512_mul_ps(d, c0));
    f(16, _mm512_mul_ps(d, c1));
  } else {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 m = block_d(blk + 2);
    const __m512 low = _mm512_fmadd_ps(d, iota, m);  // codes 0..15
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (kFifth ? 8 : 4))));
    const __m512i hi_nibbles = _mm512_srli_epi32(q, 4);
    if constexpr (kFifth) {
      const __m512 high = _mm512_fmadd_ps(d, _mm512_add_ps(iota, _mm512_set1_ps(16)), m);  // codes 16..31
      uint32_t qh_bits;
      std::memcpy(&qh_bits, blk + 4, 4);
      const __m512i qh = _mm512_set1_epi32(static_cast<int>(qh_bits));
      const __m512i rot_lo = _mm512_setr_epi32(28, 29, 30, 31, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
      const __m512i rot_hi = _mm512_add_epi32(rot_lo, _mm512_set1_epi32(16));  // j + 12 = (j - 4) + 16
      const __m512i low4 = _mm512_set1_epi32(0xF);
      // (code & 15) | (rotated qh & ~15): vpermt2ps reads bit 4, the fifth bit
      const __m512i idx_lo = _mm512_ternarylogic_epi32(q, _mm512_rorv_epi32(qh, rot_lo), low4, 0xE4);
      const __m512i idx_hi = _mm512_ternarylogic_epi32(hi_nibbles, _mm512_rorv_epi32(qh, rot_hi), low4, 0xE4);
      f(0, _mm512_permutex2var_ps(low, idx_lo, high));
      f(16, _mm512_permutex2var_ps(low, idx_hi, high));
    } else {
      f(0, _mm512_permutexvar_ps(q, low));  // vpermps reads the low nibble alone
      f(16, _mm512_permutexvar_ps(hi_nibbles, low));
    }
  }
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// AVX2 with FMA and F16C: 8 values a register. AVX2 has no 16-entry float permute, so the codes
// become floats by conversion: c[k] the codes of values 8k .. 8k + 7, from bytes 0-7 (k = 0, 2) or
// 8-15 (k = 1, 3) of qs, low nibbles for k < 2 and high ones after; q5's fifth bit (bit 8k + l of
// qh) where its lane's bit of a constant mask is set in qh, moved to bit 4. q5_0's come less 16,
// as its values use them: the low 4 bits plus -16 where the fifth bit is clear (one op fewer for
// each 8 than adding the bit and subtracting 16: its dot 7.5 -> 8.2 G values/s from the caches).
template <bool kFifth, bool kMin>
__attribute__((always_inline)) inline void legacy_codes8(const uint8_t* blk, __m256i* c) {
  constexpr int64_t kCodes = 2 + (kMin ? 2 : 0) + (kFifth ? 4 : 0);
  const __m256i low4 = _mm256_set1_epi32(0xF);
  const __m256i a = bytes8(blk + kCodes), b = bytes8(blk + kCodes + 8);
  c[0] = _mm256_and_si256(a, low4);
  c[1] = _mm256_and_si256(b, low4);
  c[2] = _mm256_srli_epi32(a, 4);
  c[3] = _mm256_srli_epi32(b, 4);
  if constexpr (kFifth) {
    uint32_t qh_bits;
    std::memcpy(&qh_bits, blk + (kMin ? 4 : 2), 4);
    const __m256i qh = _mm256_set1_epi32(static_cast<int>(qh_bits)), sixteen = _mm256_set1_epi32(16);
    const __m256i minus16 = _mm256_set1_epi32(-16);
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int k = 0; k < 4; ++k) {
      const __m256i bit = _mm256_slli_epi32(lane_bit, 8 * k);
      const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(qh, bit), bit);
      c[k] = kMin ? _mm256_or_si256(c[k], _mm256_and_si256(set, sixteen)) : _mm256_add_epi32(c[k], _mm256_andnot_si256(set, minus16));
    }
  }
}

// f(8 k, v) with a block's values 8k .. 8k + 7: q5_0's (c - 16) d, q4_1's and q5_1's d c + m.
template <bool kFifth, bool kMin, class F>
__attribute__((always_inline)) inline void legacy_each8(const uint8_t* blk, F f) {
  __m256i c[4];
  legacy_codes8<kFifth, kMin>(blk, c);
  const __m256 d = block_d(blk);
  if constexpr (kMin) {
    const __m256 m = block_d(blk + 2);
    for (int k = 0; k < 4; ++k) f(8 * k, _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(c[k]), m));
  } else {
    for (int k = 0; k < 4; ++k) f(8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(c[k]), d));  // c less 16
  }
}
#endif

template <bool kFifth, bool kMin>
struct Legacy {
  static_assert(kFifth || kMin, "q4_0 is block_formats.hpp's Q4");
  static constexpr int64_t kValues = 32;
  static constexpr int64_t kBytes = 2 + (kMin ? 2 : 0) + (kFifth ? 4 : 0) + 16;
  static constexpr Dtype kDtype = !kFifth ? Dtype::Q4_1 : kMin ? Dtype::Q5_1 : Dtype::Q5_0;
  static constexpr int64_t kHigh = kMin ? 4 : 2;                  // where qh starts (q5)
  static constexpr int64_t kCodes = kHigh + (kFifth ? 4 : 0);     // where qs starts

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) {
    return first_nonfinite_half(blocks, count, kBytes, 0, kMin ? 2 : -1);
  }

  static void widen_float(const uint8_t* blk, float* out) {
#if defined(__AVX512F__) && defined(__F16C__)
    legacy_each16<kFifth, kMin>(blk, [out](int i, __m512 v) { _mm512_storeu_ps(out + i, v); });
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    legacy_each8<kFifth, kMin>(blk, [out](int i, __m256 v) { _mm256_storeu_ps(out + i, v); });
#else
    const float d = block_scale(blk), m = kMin ? block_scale(blk + 2) : 0.0f;
    uint32_t qh = 0;
    if constexpr (kFifth) std::memcpy(&qh, blk + kHigh, 4);
    const uint8_t* qs = blk + kCodes;
    for (int j = 0; j < 16; ++j) {
      int c0 = qs[j] & 0xF, c1 = qs[j] >> 4;
      if constexpr (kFifth) {
        c0 |= static_cast<int>((qh >> j) & 1) << 4;
        c1 |= static_cast<int>((qh >> (j + 16)) & 1) << 4;
      }
      out[j] = value(d, m, c0);
      out[j + 16] = value(d, m, c1);
    }
#endif
  }

  static float value(float d, float m, int c) {
    if constexpr (kMin)
      return static_cast<float>(c) * d + m;
    else
      return static_cast<float>(c - 16) * d;
  }

  template <class T>
  static void widen(const uint8_t* blk, T* out) { widen_through_float<Legacy>(blk, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<Legacy>(row, x, count); }
};
using Q41 = Legacy<false, true>;
using Q50 = Legacy<true, false>;
using Q51 = Legacy<true, true>;

#if defined(__AVX512F__) && defined(__F16C__)
// float x on AVX-512: two blocks a step on four sums (each block's two halves on sums of their
// own, so no sum waits on the FMA before it within a step), one prefetch a step 2 KB ahead.
template <bool kFifth, bool kMin>
inline float legacy_dot(const uint8_t* row, const float* x, int64_t count) {
  constexpr int64_t kBytes = Legacy<kFifth, kMin>::kBytes;
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t b = 0;
  for (; b + 1 < count; b += 2) {
    const uint8_t* blk = row + b * kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead, _MM_HINT_T0);
    const float* xb = x + b * 32;
    legacy_each16<kFifth, kMin>(blk, [&](int i, __m512 v) __attribute__((always_inline)) {
      acc[i >> 4] = _mm512_fmadd_ps(v, _mm512_loadu_ps(xb + i), acc[i >> 4]);
    });
    legacy_each16<kFifth, kMin>(blk + kBytes, [&](int i, __m512 v) __attribute__((always_inline)) {
      acc[2 + (i >> 4)] = _mm512_fmadd_ps(v, _mm512_loadu_ps(xb + 32 + i), acc[2 + (i >> 4)]);
    });
  }
  if (b < count)
    legacy_each16<kFifth, kMin>(row + b * kBytes, [&](int i, __m512 v) __attribute__((always_inline)) {
      acc[i >> 4] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + b * 32 + i), acc[i >> 4]);
    });
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

// q5_0's dot as q4_0's (block_formats.hpp): a block's codes c - 16 from a constant table, each
// block's sum of (c - 16) x scaled by its d, so no table is made for each block.
template <>
template <>
inline float Legacy<true, false>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return dot_blocks(row, x, count, kBytes, [](const uint8_t* blk, const float* xb) {
    __m512 c0, c1;
    q5_0_codes(blk, &c0, &c1);
    return _mm512_fmadd_ps(c1, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(c0, _mm512_loadu_ps(xb)));
  });
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// float x on AVX2: q4_1's and q5_1's values d c + m made 8 at a time and multiplied with x into
// four sums (one a register of the block), one prefetch a block 2 KB ahead.
template <bool kFifth, bool kMin>
inline float legacy_dot(const uint8_t* row, const float* x, int64_t count) {
  constexpr int64_t kBytes = Legacy<kFifth, kMin>::kBytes;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* blk = row + b * kBytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead, _MM_HINT_T0);
    const float* xb = x + b * 32;
    legacy_each8<kFifth, kMin>(blk, [&](int i, __m256 v) __attribute__((always_inline)) {
      acc[i >> 3] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xb + i), acc[i >> 3]);
    });
  }
  return reduce_add8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// q5_0's as q4_0's (block_formats.hpp): each block's sum of (c - 16) x, scaled by its d.
template <>
template <>
inline float Legacy<true, false>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return dot_blocks(row, x, count, kBytes, [](const uint8_t* blk, const float* xb) {
    __m256i c[4];
    legacy_codes8<true, false>(blk, c);  // c less 16
    return dot32(_mm256_cvtepi32_ps(c[0]), _mm256_cvtepi32_ps(c[1]), _mm256_cvtepi32_ps(c[2]), _mm256_cvtepi32_ps(c[3]), xb);
  });
}
#endif

#if (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))) && defined(__F16C__)
// q4_1's and q5_1's: legacy_dot above, in this CPU's registers.
template <>
template <>
inline float Legacy<false, true>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return legacy_dot<false, true>(row, x, count);
}
template <>
template <>
inline float Legacy<true, true>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return legacy_dot<true, true>(row, x, count);
}
#endif

}  // namespace xg::blocks

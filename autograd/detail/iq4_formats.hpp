// Internal to xgrad's .cpp files: llama.cpp's non-linear 4-bit block formats (dtype.hpp's iq4_nl,
// iq4_xs), as block_formats.hpp's q8_0 and q4_0: how a block widens, and how a row of blocks dots
// with a row of floats. A 4-bit code does not stand for c - 8 but picks one of 16 fixed levels,
// denser near 0 where a weight's values are (ggml-common.h's kvalues_iq4nl; llama.cpp PR #5590):
//
//   iq4_nl (block_iq4_nl, 18 bytes): half d, uint8 qs[16]                    x = d L[c]
//   iq4_xs (block_iq4_xs, 136 bytes, 256 values): half d, uint16 scales_h, uint8 scales_l[4],
//          uint8 qs[128]           x = d (s_j - 32) L[c]   for sub-block j of 32 values
//
// Each 32 values' codes are 16 bytes: value l < 16's code is byte l's low nibble, value l + 16's
// its high nibble (as q4_0's). iq4_xs's 6-bit s_j is nibble j of scales_l (low nibble first) with
// bits 2j, 2j + 1 of scales_h on top. llama.cpp writes iq4_nl where an IQ4_XS file's
// rows are not whole 256-value super-blocks.
//
// The values are ggml's dequantize_row_iq4_nl/_iq4_xs's, bit for bit: every product is exact in
// float32 (d's 11 bits times at most 7 bits of L, and 6 of s_j - 32: 24 bits), so the order of the
// multiplications does not matter, nor does a zero's sign (the xor of the factors' signs).
// Every dtype widens through them in float32.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "autograd/detail/block_formats.hpp"
#include "autograd/detail/k_formats.hpp"

namespace xg::blocks {

// ggml-common.h's kvalues_iq4nl: the level each 4-bit code picks.
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// iq4_xs's 6-bit scale of sub-block j (of 8), minus 32.
inline int iq4_xs_scale(const uint8_t* blk, int j) {
  uint16_t high;
  std::memcpy(&high, blk + 2, 2);
  return (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((high >> (2 * j)) & 3) << 4)) - 32;
}

// 32 values from 16 bytes of codes, each level times `scale`.
inline void iq4_widen32(const uint8_t* qs, float scale, float* out) {
  for (int l = 0; l < 16; ++l) {
    out[l] = scale * static_cast<float>(kIq4Levels[qs[l] & 0xF]);
    out[l + 16] = scale * static_cast<float>(kIq4Levels[qs[l] >> 4]);
  }
}

#if defined(__AVX512F__) && defined(__F16C__)
// The levels of 32 values' codes (16 bytes at qs) as two registers of floats: one vpermps each,
// which reads an index's low 4 bits alone (the byte itself for the low nibbles, the byte shifted
// right by 4 for the high ones), as q4_0's dot does.
__attribute__((always_inline)) inline void iq4_levels32(const uint8_t* qs, __m512* lo, __m512* hi) {
  const __m512 levels = _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  *lo = _mm512_permutexvar_ps(q, levels);
  *hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), levels);
}

// An iq4_xs super-block's eight d (s_j - 32) into dl[0..7], made at once (scales_l's nibbles and
// scales_h's bit pairs, one lane each). Its callers read them back from memory, so that each
// broadcast is a load rather than a shuffle on the port the lookups use (as the k-quants' scales,
// k_formats.hpp).
__attribute__((always_inline)) inline void iq4_xs_scales(const uint8_t* blk, float* dl) {
  const __m512i pair_shift = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);  // bits 2j, 2j + 1
  const __m512i nibble_shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i byte_of = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0);
  uint16_t high;
  uint32_t low;
  std::memcpy(&high, blk + 2, 2);
  std::memcpy(&low, blk + 4, 4);
  const __m512i low_bytes = _mm512_permutexvar_epi32(byte_of, _mm512_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(low))));
  const __m512i s_low = _mm512_and_si512(_mm512_srlv_epi32(low_bytes, nibble_shift), _mm512_set1_epi32(0xF));
  const __m512i s_high = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(high), pair_shift), _mm512_set1_epi32(3));
  const __m512i s = _mm512_sub_epi32(_mm512_or_si512(s_low, _mm512_slli_epi32(s_high, 4)), _mm512_set1_epi32(32));
  _mm512_store_ps(dl, _mm512_mul_ps(block_d(blk), _mm512_cvtepi32_ps(s)));  // exact: 11 bits times 6
  asm volatile("" ::: "memory");
}

// f(i, v): v the 16 values i .. i + 15 of an iq4_xs super-block.
template <class F>
__attribute__((always_inline)) inline void iq4_xs_each16(const uint8_t* blk, F f) {
  alignas(64) float dl[16];
  iq4_xs_scales(blk, dl);
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    __m512 lo, hi;
    iq4_levels32(blk + 8 + 16 * j, &lo, &hi);
    f(32 * j, _mm512_mul_ps(_mm512_set1_ps(dl[j]), lo));
    f(32 * j + 16, _mm512_mul_ps(_mm512_set1_ps(dl[j]), hi));
  }
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// AVX2: the levels of 32 values' codes (16 bytes at qs) as four registers of 8 floats, v[k] values
// 8k .. 8k + 7: the nibbles looked up as bytes in a 16-byte table (vpshufb, whose index is a
// byte's low 4 bits: the bytes masked for the low nibbles, shifted right by 4 and masked for the
// high ones), then each 8 levels widened and converted.
__attribute__((always_inline)) inline void iq4_levels32(const uint8_t* qs, __m256* v) {
  const __m128i levels = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
  const __m128i low4 = _mm_set1_epi8(0xF);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, low4));
  const __m128i hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
  v[0] = int8x8_floats(lo);
  v[1] = int8x8_floats(_mm_unpackhi_epi64(lo, lo));
  v[2] = int8x8_floats(hi);
  v[3] = int8x8_floats(_mm_unpackhi_epi64(hi, hi));
}

// An iq4_xs super-block's eight d (s_j - 32) into dl[0..7] (exact: 11 bits times 6).
inline void iq4_xs_scales(const uint8_t* blk, float* dl) {
  const float d = block_scale(blk);
  for (int j = 0; j < 8; ++j) dl[j] = d * static_cast<float>(iq4_xs_scale(blk, j));
}
#endif

struct IQ4NL {
  static constexpr int64_t kValues = 32;
  static constexpr int64_t kBytes = 18;
  static constexpr Dtype kDtype = Dtype::IQ4_NL;

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) { return first_nonfinite_scale(blocks, count, kBytes); }

  static void widen_float(const uint8_t* blk, float* out) {
#if defined(__AVX512F__) && defined(__F16C__)
    __m512 lo, hi;
    iq4_levels32(blk + 2, &lo, &hi);
    const __m512 d = block_d(blk);
    _mm512_storeu_ps(out, _mm512_mul_ps(d, lo));
    _mm512_storeu_ps(out + 16, _mm512_mul_ps(d, hi));
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    __m256 v[4];
    iq4_levels32(blk + 2, v);
    const __m256 d = block_d(blk);
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(d, v[k]));
#else
    iq4_widen32(blk + 2, block_scale(blk), out);
#endif
  }

  template <class T>
  static void widen(const uint8_t* blk, T* out) { widen_through_float<IQ4NL>(blk, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<IQ4NL>(row, x, count); }
};

struct IQ4XS {
  static constexpr int64_t kValues = kKBlock;
  static constexpr int64_t kBytes = 136;
  static constexpr Dtype kDtype = Dtype::IQ4_XS;

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) { return first_nonfinite_scale(blocks, count, kBytes); }

  static void widen_float(const uint8_t* blk, float* out) {
#if defined(__AVX512F__) && defined(__F16C__)
    iq4_xs_each16(blk, [out](int i, __m512 v) { _mm512_storeu_ps(out + i, v); });
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    float dl[8];
    iq4_xs_scales(blk, dl);
    for (int j = 0; j < 8; ++j) {
      __m256 v[4];
      iq4_levels32(blk + 8 + 16 * j, v);
      const __m256 s = _mm256_set1_ps(dl[j]);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 32 * j + 8 * k, _mm256_mul_ps(s, v[k]));
    }
#else
    const float d = block_scale(blk);
    for (int j = 0; j < 8; ++j) iq4_widen32(blk + 8 + 16 * j, d * static_cast<float>(iq4_xs_scale(blk, j)), out + 32 * j);
#endif
  }

  template <class T>
  static void widen(const uint8_t* blk, T* out) { widen_through_float<IQ4XS>(blk, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<IQ4XS>(row, x, count); }
};

#if defined(__AVX512F__) && defined(__F16C__)
// iq4_nl's dot as q4_0's (block_formats.hpp): each block's sum of L[c] x, scaled by its d.
template <>
inline float IQ4NL::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return dot_blocks(row, x, count, kBytes, [](const uint8_t* blk, const float* xb) {
    __m512 lo, hi;
    iq4_levels32(blk + 2, &lo, &hi);
    return _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
  });
}

// iq4_xs's: each sub-block's sum of L[c] x scaled by its d (s_j - 32), one multiply for each 32
// values (through k_dot and iq4_xs_each16, a multiply for each 16: 17.2 -> 15.1 G values/s).
template <>
inline float IQ4XS::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* blk = row + b * kBytes;
    prefetch_super_block(blk);
    alignas(64) float dl[16];
    iq4_xs_scales(blk, dl);
    const float* xb = x + b * kKBlock;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m512 lo, hi;
      iq4_levels32(blk + 8 + 16 * j, &lo, &hi);
      const __m512 part = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 32 * j + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xb + 32 * j)));
      if (j & 1)
        acc1 = _mm512_fmadd_ps(_mm512_set1_ps(dl[j]), part, acc1);
      else
        acc0 = _mm512_fmadd_ps(_mm512_set1_ps(dl[j]), part, acc0);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// float x on AVX2, as the AVX-512 dots: iq4_nl's each block's sum of L[c] x scaled by its d;
// iq4_xs's each sub-block's, scaled by its d (s_j - 32), into two sums.
template <>
inline float IQ4NL::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return dot_blocks(row, x, count, kBytes, [](const uint8_t* blk, const float* xb) {
    __m256 v[4];
    iq4_levels32(blk + 2, v);
    return dot32(v[0], v[1], v[2], v[3], xb);
  });
}

template <>
inline float IQ4XS::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* blk = row + b * kBytes;
    prefetch_super_block(blk);
    alignas(32) float dl_[8];
    iq4_xs_scales(blk, dl_);
    const float* dl = opaque(dl_);
    const float* xb = x + b * kKBlock;
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m256 v[4];
      iq4_levels32(blk + 8 + 16 * j, v);
      const __m256 part = dot32(v[0], v[1], v[2], v[3], xb + 32 * j);
      if (j & 1)
        acc1 = _mm256_fmadd_ps(_mm256_broadcast_ss(dl + j), part, acc1);
      else
        acc0 = _mm256_fmadd_ps(_mm256_broadcast_ss(dl + j), part, acc0);
    }
  }
  return reduce_add8(_mm256_add_ps(acc0, acc1));
}
#endif

}  // namespace xg::blocks

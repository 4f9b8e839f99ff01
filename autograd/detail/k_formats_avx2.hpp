// Internal to k_formats.hpp, which includes it after its scale helpers on a CPU without AVX-512: the
// k-quants' super-block kernels on AVX2 with FMA and F16C (AMD Zen 1-3, Intel Haswell to Alder
// Lake), k_formats.hpp's AVX-512 ones (same names, same values) in registers of 8. Without them
// these CPUs widened each block with scalar or compiler-vectorised loops, at a quarter to a half of
// float32's rate, so a Q4_K_M file decoded slower than its F32 copy (bench/README.md, "On an AVX2
// CPU").
//
// AVX2 has no 16-entry float permute (vpermps reads an index's low 3 bits), so a code is not looked
// up in a table of its values: it is converted to float and multiplied by its scale (minus its min
// in the same fused op), which gives the same float32 value as the scalar code, as the AVX-512
// tables do (each product is exact; the one rounding is the min's).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "autograd/detail/block_formats.hpp"

namespace xg::blocks {

// q4_k's and q5_k's 8 scales times d into out[0..7] and 8 mins times dmin into out[8..15]:
// k_scale_min_words widened 8 at a time.
inline void k_scales_mins8(const uint8_t* blk, float* out) {
  uint32_t u[4];
  k_scale_min_words(blk + 4, u);
  const __m128i fields = _mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]), static_cast<int>(u[2]),
                                        static_cast<int>(u[3]));
  _mm256_store_ps(out, _mm256_mul_ps(block_d(blk), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(fields))));
  _mm256_store_ps(out + 8, _mm256_mul_ps(block_d(blk + 2), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(fields, 8)))));
}

// f(i, v): v the 8 values i .. i + 7 of a q4_k / q5_k super-block (i a constant after unrolling;
// f must not depend on the order). Sub-block j's value is d sc_j c - dmin m_j, one fused
// multiply-subtract on the code as a float; the 32 bytes of sub-blocks 2p and 2p + 1 (low and high
// nibbles) are read once for both, and q5_k's 32 bytes of fifth bits once for the block.
template <bool kHigh, class F>
__attribute__((always_inline)) inline void k_with_mins_each(const uint8_t* blk, F f) {
  alignas(32) float dsms_[16];
  k_scales_mins8(blk, dsms_);
  const float* dsms = opaque(dsms_);
  const uint8_t* q = blk + (kHigh ? 48 : 16);
  const __m256i low4 = _mm256_set1_epi32(0xF), bit4 = _mm256_set1_epi32(16);
  __m256i hbits[4];
  if constexpr (kHigh)
    for (int k = 0; k < 4; ++k) hbits[k] = bytes8(blk + 16 + 8 * k);
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles)
    __m256i bytes[4];
    for (int k = 0; k < 4; ++k) bytes[k] = bytes8(q + 32 * p + 8 * k);
#pragma GCC unroll 2
    for (int nib = 0; nib < 2; ++nib) {
      const int j = 2 * p + nib;
      const __m256 ds = _mm256_broadcast_ss(dsms + j), ms = _mm256_broadcast_ss(dsms + 8 + j);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m256i c = nib ? _mm256_srli_epi32(bytes[k], 4) : _mm256_and_si256(bytes[k], low4);
        if constexpr (kHigh) {  // bit j of the fifth-bit byte, moved to bit 4
          const __m256i h = j < 4 ? _mm256_slli_epi32(hbits[k], 4 - j) : _mm256_srli_epi32(hbits[k], j - 4);
          c = _mm256_or_si256(c, _mm256_and_si256(h, bit4));
        }
        f(32 * j + 8 * k, _mm256_fmsub_ps(ds, _mm256_cvtepi32_ps(c), ms));
      }
    }
  }
}

// f(i, v) for a q6_k super-block: each 8 codes from their nibbles and 2-bit highs, minus 32, times
// their d sc (sc one int8 for each 16 values). (d sc c - 32 d sc in one fused multiply-subtract
// would be exact too, but +0 where ggml's (c - 32) d sc is -0, and no faster.)
template <class F>
__attribute__((always_inline)) inline void q6_k_each(const uint8_t* blk, F f) {
  alignas(32) float dsc_[16];
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
  const __m256 d = block_d(blk + 208);
  _mm256_store_ps(dsc_, _mm256_mul_ps(d, int8x8_floats(sc)));
  _mm256_store_ps(dsc_ + 8, _mm256_mul_ps(d, int8x8_floats(_mm_unpackhi_epi64(sc, sc))));
  const float* dsc = opaque(dsc_);
  const __m256i low4 = _mm256_set1_epi32(0xF), high2 = _mm256_set1_epi32(0x30), bias = _mm256_set1_epi32(32);
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
    for (int part = 0; part < 4; ++part) {  // l = 8 part .. 8 part + 7
      const int l0 = 8 * part;
      const __m256i a = bytes8(blk + 64 * h + l0);
      const __m256i b = bytes8(blk + 64 * h + 32 + l0);
      const __m256i hb = bytes8(blk + 128 + 32 * h + l0);
      // bits 2g, 2g + 1 of hb moved to bits 4-5: the code's top two bits
      const __m256i c[4] = {
          _mm256_or_si256(_mm256_and_si256(a, low4), _mm256_and_si256(_mm256_slli_epi32(hb, 4), high2)),
          _mm256_or_si256(_mm256_and_si256(b, low4), _mm256_and_si256(_mm256_slli_epi32(hb, 2), high2)),
          _mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_and_si256(hb, high2)),
          _mm256_or_si256(_mm256_srli_epi32(b, 4), _mm256_and_si256(_mm256_srli_epi32(hb, 2), high2))};
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g)  // value 128 h + 32 g + l, scale (value) / 16
        f(128 * h + 32 * g + l0,
          _mm256_mul_ps(_mm256_broadcast_ss(dsc + 8 * h + 2 * g + part / 2), _mm256_cvtepi32_ps(_mm256_sub_epi32(c[g], bias))));
    }
}

// f(i, v) for a q2_k or q3_k super-block (kHigh: q3_k): each 8 codes from their 2 bits of a code
// byte (the bytes read once for all four shifts). q2_k's value is d sc c - dmin m; q3_k's is
// d (sc - 32) k, k = the low 2 bits, less 4 where the high bit is clear.
template <bool kHigh, class F>
__attribute__((always_inline)) inline void k_low_bits_each(const uint8_t* blk, F f) {
  alignas(32) float dl_[16], ml_[16];
  if constexpr (kHigh) {
    const __m128i sc = q3_k_scales(blk);
    const __m256 d = block_d(blk + 108);
    _mm256_store_ps(dl_, _mm256_mul_ps(d, int8x8_floats(sc)));
    _mm256_store_ps(dl_ + 8, _mm256_mul_ps(d, int8x8_floats(_mm_unpackhi_epi64(sc, sc))));
  } else {
    const __m256 d = block_d(blk + 80), dmin = block_d(blk + 82);
    const __m256i low4 = _mm256_set1_epi32(0xF);
    for (int k = 0; k < 2; ++k) {
      const __m256i sc = bytes8(blk + 8 * k);
      _mm256_store_ps(dl_ + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(sc, low4))));
      _mm256_store_ps(ml_ + 8 * k, _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4))));
    }
  }
  const float* dl = opaque(dl_);
  const float* ml = opaque(ml_);
  const uint8_t* q = blk + (kHigh ? 32 : 16);
  const __m256i two = _mm256_set1_epi32(3), bit2 = _mm256_set1_epi32(4);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
    for (int part = 0; part < 4; ++part) {  // code bytes l = 8 part .. 8 part + 7
      const __m256i bytes = bytes8(q + 32 * h + 8 * part);
      __m256i high;
      if constexpr (kHigh) high = bytes8(blk + 8 * part);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {  // value 128 h + 32 s + l: bits 2s, 2s + 1 of its code byte
        const int g = 8 * h + 2 * s + part / 2;  // its scale: value / 16
        const __m256i c = _mm256_and_si256(_mm256_srli_epi32(bytes, 2 * s), two);
        if constexpr (kHigh) {
          const int bit = 4 * h + s;  // the value's high bit in its high byte, moved to bit 2
          const __m256i hb = bit >= 2 ? _mm256_srli_epi32(high, bit - 2) : _mm256_slli_epi32(high, 2 - bit);
          const __m256i k = _mm256_sub_epi32(c, _mm256_andnot_si256(hb, bit2));  // less 4 where the bit is clear
          f(128 * h + 32 * s + 8 * part, _mm256_mul_ps(_mm256_broadcast_ss(dl + g), _mm256_cvtepi32_ps(k)));
        } else {
          f(128 * h + 32 * s + 8 * part,
            _mm256_fmsub_ps(_mm256_broadcast_ss(dl + g), _mm256_cvtepi32_ps(c), _mm256_broadcast_ss(ml + g)));
        }
      }
    }
}

// sum over `count` super-blocks of dot(values, x), each through each(block, f), on four sums (the
// FMA's latency is 4 steps on these cores, two issued a cycle).
template <class Each>
inline float k_dot(const uint8_t* row, const float* x, int64_t count, int64_t bytes, Each each) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* blk = row + b * bytes;
    prefetch_super_block(blk);
    const float* xb = x + b * kKBlock;
    each(blk, [&](int i, __m256 v) __attribute__((always_inline)) {
      acc[(i >> 3) & 3] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xb + i), acc[(i >> 3) & 3]);
    });
  }
  return reduce_add8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

}  // namespace xg::blocks

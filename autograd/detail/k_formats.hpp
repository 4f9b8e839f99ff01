// Internal to xgrad's .cpp files: the k-quant block formats (dtype.hpp's q2_k, q3_k, q4_k, q5_k,
// q6_k), as block_formats.hpp's q8_0 and q4_0: how a super-block of 256 values widens, and how a
// row of them dots with a row of floats. The layouts are ggml-common.h's (llama.cpp, ggml PR #1684):
//
//   q2_k (block_q2_K, 84 bytes): 16 bytes of scales (a 4-bit scale and a 4-bit min for each 16
//        values), 64 bytes of 2-bit codes, half d, half dmin   x = d sc c - dmin m
//   q3_k (block_q3_K, 110 bytes): 32 bytes of high bits, 64 bytes of 2-bit low codes, 12 bytes of
//        6-bit scales (one per 16 values, stored plus 32), half d
//                                          x = d (sc - 32) (c - 4)   c: the low 2 bits, plus 4
//                                                                    where the high bit is set
//   q4_k (block_q4_K, 144 bytes): half d, half dmin, 12 bytes of 6-bit scales and mins (8 each),
//        128 bytes of 4-bit codes          x = d sc_j c - dmin m_j   for sub-block j of 32 values
//   q5_k (block_q5_K, 176 bytes): as q4_k, then 32 bytes of fifth bits before the codes
//   q6_k (block_q6_K, 210 bytes): 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 int8
//        scales, half d                    x = d sc_i (c - 32)       for each 16 values
//
// q2_k's and q3_k's codes: value 128 h + 32 s + l (l < 32) sits in bits 2s, 2s + 1 of code byte
// 32 h + l; q3_k's high bit of it is bit 4 h + s of high byte l. The scale of value i is i / 16's.
//
// The values are ggml's dequantize_row_q2_K ... _q6_K's, bit for bit: every product here is
// exact in float32 (a half's 11 bits times at most 7 and 6), so the one rounding is the min's
// subtraction, the same in a fused multiply-subtract. Every dtype widens through them in float32.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "autograd/detail/block_formats.hpp"

namespace xg::blocks {

// The 6-bit scale and min of sub-block j (of 8) from q4_k's and q5_k's 12 bytes (ggml's
// get_scale_min_k4): j < 4 in the low 6 bits of bytes j and j + 4; else the nibbles of byte
// j + 4, with the top 2 bits in the high bits of bytes j - 4 and j.
inline void k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// q3_k's 16 6-bit scales, one a byte of u[0..3] (scale j in byte j % 4 of u[j / 4]), from its 12
// packed bytes, by 32-bit words: the low nibbles of words 0-1 are scales 0-7's low 4 bits and their
// high nibbles scales 8-15's; word 2's byte b holds the top 2 bits of scales b, b + 4, b + 8 and
// b + 12 (bits 0-1, 2-3, 4-5, 6-7). Each is stored plus 32.
inline void q3_k_scale_words(const uint8_t* packed, uint32_t* u) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t low4 = 0x0f0f0f0f, low2 = 0x03030303;
  u[0] = (w[0] & low4) | ((w[2] & low2) << 4);
  u[1] = (w[1] & low4) | (((w[2] >> 2) & low2) << 4);
  u[2] = ((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4);
  u[3] = ((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4);
}

#if defined(__AVX512F__) || defined(__AVX2__)
// q3_k's 16 scales s - 32 as signed bytes: q3_k_scale_words' words go to a register as they are
// (stored and loaded back as 16 bytes, they stalled the load: a third of the AVX-512 dot's time),
// then minus 32 by byte.
inline __m128i q3_k_scales(const uint8_t* blk) {
  uint32_t u[4];
  q3_k_scale_words(blk + 96, u);
  return _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]), static_cast<int>(u[2]), static_cast<int>(u[3])),
                      _mm_set1_epi8(32));
}
#endif

// k_scale_min for all eight sub-blocks of q4_k's and q5_k's 12 bytes, by 32-bit words, one field
// a byte: scales 0-7 in u[0..1], mins 0-7 in u[2..3]. The 6-bit fields of sub-blocks 4-7 are a
// nibble of bytes 8-11 and the top 2 bits of bytes 0-3 or 4-7.
inline void k_scale_min_words(const uint8_t* packed, uint32_t* u) {
  std::memcpy(u, packed, 12);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  u[3] = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);  // mins 4..7
  const uint32_t mins03 = u[1] & low6;
  u[1] = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);  // scales 4..7
  u[2] = mins03;
  u[0] &= low6;  // scales 0..3
}

#if defined(__AVX512F__) && defined(__F16C__)
// AVX-512: a super-block widened 16 values a register (the same float32 values as the scalar
// code: the exact product, then one rounding), and for a row's dot multiplied with x at once
// into two sums, with the row 2 KB ahead prefetched as q8_0's and q4_0's dots do.

// 16 bytes at p, each in a 32-bit lane.
inline __m512i k_bytes16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// The super-block's 8 scales times d and 8 mins times dmin, as 16 floats (ds[0..7], then ms):
// k_scale_min_words widened in one register.
inline void k_scales_mins(const uint8_t* blk, float* out) {
  uint32_t u[4];
  k_scale_min_words(blk + 4, u);
  const __m512 fields = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u))));
  const __m512 dd = _mm512_mask_blend_ps(0xFF00, block_d(blk), block_d(blk + 2));
  _mm512_storeu_ps(out, _mm512_mul_ps(fields, dd));
}

// f(i, v): v the 16 values i .. i + 15 of a q4_k / q5_k super-block (in an order f must not
// depend on). A sub-block's 16 (q4_k) or 32 (q5_k) possible values d sc c - dmin m are made once
// as a table in registers, and each code picks its value with one permute (vpermps reads an
// index's low 4 bits, vpermt2ps its low 5), so a value costs no masking or int-to-float
// conversion; the 32 bytes of two sub-blocks' codes are read once for both nibbles.
template <bool kHigh, class F>
__attribute__((always_inline)) inline void k_with_mins_each(const uint8_t* blk, F f) {
  alignas(64) float dsms[16];
  k_scales_mins(blk, dsms);
  // Read back from memory: each broadcast below is then a load (vbroadcastss m32, no shuffle
  // port), where GCC would otherwise permute the register it holds them in, two shuffles each,
  // on the port the code permutes already need (q4_k's dot, one thread: 10.4 -> 13.7 G values/s).
  asm volatile("" ::: "memory");
  const uint8_t* q = blk + (kHigh ? 48 : 16);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 iota16 = _mm512_add_ps(iota, _mm512_set1_ps(16));
  const __m512i low4 = _mm512_set1_epi32(0xF);
  __m512i hbits[2];
  if constexpr (kHigh) hbits[0] = k_bytes16(blk + 16), hbits[1] = k_bytes16(blk + 32);
  // Unrolled whole: the shifts and the caller's choice of sum by i become constants.
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (low nibbles) and 2p + 1 (high nibbles)
    const __m512i bytes[2] = {k_bytes16(q + 32 * p), k_bytes16(q + 32 * p + 16)};
#pragma GCC unroll 2
    for (int nib = 0; nib < 2; ++nib) {
      const int j = 2 * p + nib;
      const __m512 ds = _mm512_set1_ps(dsms[j]), ms = _mm512_set1_ps(dsms[8 + j]);
      const __m512 table = _mm512_fmsub_ps(ds, iota, ms);
      const __m512 table16 = kHigh ? _mm512_fmsub_ps(ds, iota16, ms) : table;  // codes 16..31
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const __m512i c = nib ? _mm512_srli_epi32(bytes[half], 4) : bytes[half];  // low 4 bits: the code
        if constexpr (kHigh) {
          // the fifth bit (bit j of hbits) moved to bit 4, then bits 0-3 from c and 4 up from it in
          // one ternary-logic op ((c & 15) | (h & ~15)); vpermt2ps ignores the bits above 4
          const __m512i h = j < 4 ? _mm512_slli_epi32(hbits[half], 4 - j) : _mm512_srli_epi32(hbits[half], j - 4);
          const __m512i idx = _mm512_ternarylogic_epi32(c, h, low4, 0xE4);
          f(32 * j + 16 * half, _mm512_permutex2var_ps(table, idx, table16));
        } else {
          f(32 * j + 16 * half, _mm512_permutexvar_ps(c, table));
        }
      }
    }
  }
}

// f(i, v) for a q6_k super-block, as k_with_mins_each: each 16 codes from their nibbles and
// 2-bit highs, minus 32, times their d sc_i.
template <class F>
__attribute__((always_inline)) inline void q6_k_each(const uint8_t* blk, F f) {
  // d sc_i for the 16 scales, through memory as q4_k's (k_with_mins_each says why)
  alignas(64) float dsc[16];
  _mm512_store_ps(dsc, _mm512_mul_ps(block_d(blk + 208),
                                     _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192))))));
  asm volatile("" ::: "memory");
  const __m512i low4 = _mm512_set1_epi32(0xF), two = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
  for (int h = 0; h < 2; ++h)
    for (int part = 0; part < 2; ++part) {  // l = 16 part .. 16 part + 15
      const int l0 = 16 * part;
      const __m512i a = k_bytes16(blk + 64 * h + l0);
      const __m512i b = k_bytes16(blk + 64 * h + 32 + l0);
      const __m512i hb = k_bytes16(blk + 128 + 32 * h + l0);
      const __m512i c[4] = {
          _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_slli_epi32(_mm512_and_si512(hb, two), 4)),
          _mm512_or_si512(_mm512_and_si512(b, low4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2), two), 4)),
          _mm512_or_si512(_mm512_srli_epi32(a, 4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 4), two), 4)),
          _mm512_or_si512(_mm512_srli_epi32(b, 4), _mm512_slli_epi32(_mm512_srli_epi32(hb, 6), 4))};
      for (int g = 0; g < 4; ++g) {
        const __m512 s = _mm512_set1_ps(dsc[8 * h + part + 2 * g]);
        f(128 * h + 32 * g + l0, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_sub_epi32(c[g], bias))));
      }
    }
}

// f(i, v) for a q2_k or q3_k super-block (kHigh: q3_k), as the others: each 16 codes from their
// 2 bits of a code byte (the bytes read once for all four shifts). q2_k's become floats times
// their scale minus their min. q3_k's pick their value from a table of the 8 a code can have,
// d sc (k - 4) for k = low 2 bits + 4 high bit: one ternary-logic op puts the low bits (bits
// 0-1 of the shifted code byte) beside the high bit (shifted to bit 2), and vpermps, which reads
// an index's low 4 bits, finds the table repeated in its upper 8 entries whatever bit 3 holds
// (one thread from the caches, 8.6 -> 10.1 G values/s against masking and converting the codes).
template <bool kHigh, class F>
__attribute__((always_inline)) inline void k_low_bits_each(const uint8_t* blk, F f) {
  alignas(64) float dl[16], ml[16];
  if constexpr (kHigh) {
    const __m128i sc = q3_k_scales(blk);
    _mm512_store_ps(dl, _mm512_mul_ps(block_d(blk + 108), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc))));
  } else {
    const __m512i sc = k_bytes16(blk);
    _mm512_store_ps(dl, _mm512_mul_ps(block_d(blk + 80), _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(0xF)))));
    _mm512_store_ps(ml, _mm512_mul_ps(block_d(blk + 82), _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4))));
  }
  asm volatile("" ::: "memory");  // the broadcasts below read memory (k_with_mins_each says why)
  const uint8_t* q = blk + (kHigh ? 32 : 16);
  const __m512i two = _mm512_set1_epi32(3);
  const __m512 levels = _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3);  // q3_k: k - 4
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
    for (int part = 0; part < 2; ++part) {
      const __m512i bytes = k_bytes16(q + 32 * h + 16 * part);
      __m512i high;
      if constexpr (kHigh) high = k_bytes16(blk + 16 * part);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const int g = 8 * h + 2 * s + part;  // the scale's index: value i / 16
        const __m512i c = _mm512_srli_epi32(bytes, 2 * s);
        if constexpr (kHigh) {
          const int bit = 4 * h + s;  // this value's high bit in its high byte, moved to bit 2
          const __m512i hb = bit >= 2 ? _mm512_srli_epi32(high, bit - 2) : _mm512_slli_epi32(high, 2 - bit);
          const __m512i idx = _mm512_ternarylogic_epi32(c, hb, two, 0xE4);  // (c & 3) | (hb & ~3)
          f(16 * g, _mm512_permutexvar_ps(idx, _mm512_mul_ps(_mm512_set1_ps(dl[g]), levels)));
        } else {
          f(16 * g, _mm512_fmsub_ps(_mm512_set1_ps(dl[g]), _mm512_cvtepi32_ps(_mm512_and_si512(c, two)), _mm512_set1_ps(ml[g])));
        }
      }
    }
}

#endif

}  // namespace xg::blocks

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "autograd/detail/k_formats_avx2.hpp"  // the kernels above in registers of 8
#endif

namespace xg::blocks {

// q2_k and q3_k (kHigh: the high bits).
template <bool kHigh>
struct KLowBits {
  static constexpr int64_t kValues = kKBlock;
  static constexpr int64_t kBytes = kHigh ? 110 : 84;
  static constexpr Dtype kDtype = kHigh ? Dtype::Q3_K : Dtype::Q2_K;

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) {
    return kHigh ? first_nonfinite_half(blocks, count, kBytes, 108, -1) : first_nonfinite_half(blocks, count, kBytes, 80, 82);
  }

  static void widen_float(const uint8_t* blk, float* out) {
#if defined(__AVX512F__) && defined(__F16C__)
    k_low_bits_each<kHigh>(blk, [out](int i, __m512 v) { _mm512_storeu_ps(out + i, v); });
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    k_low_bits_each<kHigh>(blk, [out](int i, __m256 v) { _mm256_storeu_ps(out + i, v); });
#else
    float dl[16], ml[16] = {};
    if constexpr (kHigh) {
      uint32_t u[4];
      q3_k_scale_words(blk + 96, u);
      const float d = block_scale(blk + 108);
      for (int g = 0; g < 16; ++g) {
        const int stored = static_cast<int>((u[g / 4] >> (8 * (g % 4))) & 0xFF);
        dl[g] = d * static_cast<float>(stored - 32);
      }
    } else {
      const float d = block_scale(blk + 80), dmin = block_scale(blk + 82);
      for (int g = 0; g < 16; ++g) {
        dl[g] = d * static_cast<float>(blk[g] & 0xF);
        ml[g] = dmin * static_cast<float>(blk[g] >> 4);
      }
    }
    // Value i = 128 h + 32 s + l, in runs of 16 that share a scale (the loop over them vectorises).
    const uint8_t* q = blk + (kHigh ? 32 : 16);
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int half = 0; half < 2; ++half) {
          const int g = 8 * h + 2 * s + half;
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            int c = (q[32 * h + l] >> (2 * s)) & 3;
            if constexpr (kHigh) c -= 4 * (1 - ((blk[l] >> (4 * h + s)) & 1));
            out[128 * h + 32 * s + l] = dl[g] * static_cast<float>(c) - ml[g];  // q3_k: minus +0, exact
          }
        }
#endif
  }

  template <class T>
  static void widen(const uint8_t* blk, T* out) { widen_through_float<KLowBits>(blk, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<KLowBits>(row, x, count); }
};
using Q2K = KLowBits<false>;
using Q3K = KLowBits<true>;

// q4_k and q5_k (kHigh: the fifth bits). Each 32 bytes of codes hold sub-blocks 2p (low
// nibbles) and 2p + 1 (high nibbles); sub-block j's fifth bits are bit j of the 32 bytes qh.
template <bool kHigh>
struct KWithMins {
  static constexpr int64_t kValues = kKBlock;
  static constexpr int64_t kBytes = kHigh ? 176 : 144;
  static constexpr Dtype kDtype = kHigh ? Dtype::Q5_K : Dtype::Q4_K;
  static constexpr int64_t kCodes = kHigh ? 48 : 16;  // where the 4-bit codes start

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) {
    return first_nonfinite_half(blocks, count, kBytes, 0, 2);
  }

  static void widen_float(const uint8_t* blk, float* out) {
#if defined(__AVX512F__) && defined(__F16C__)
    k_with_mins_each<kHigh>(blk, [out](int i, __m512 v) { _mm512_storeu_ps(out + i, v); });
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    k_with_mins_each<kHigh>(blk, [out](int i, __m256 v) { _mm256_storeu_ps(out + i, v); });
#else
    const float d = block_scale(blk), dmin = block_scale(blk + 2);
    const uint8_t* q = blk + kCodes;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(j, blk + 4, &sc, &m);
      const float ds = d * static_cast<float>(sc), ms = dmin * static_cast<float>(m);
      const uint8_t* codes = q + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      for (int l = 0; l < 32; ++l) {
        int c = (codes[l] >> shift) & 0xF;
        if constexpr (kHigh) c |= ((blk[16 + l] >> j) & 1) << 4;
        out[32 * j + l] = ds * static_cast<float>(c) - ms;
      }
    }
#endif
  }

  template <class T>
  static void widen(const uint8_t* blk, T* out) { widen_through_float<KWithMins>(blk, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<KWithMins>(row, x, count); }
};
using Q4K = KWithMins<false>;
using Q5K = KWithMins<true>;

// q6_k: per 128 values (two halves), ql[l] holds values l (low nibble) and l + 64 (high), ql[l + 32]
// values l + 32 and l + 96, and qh[l] their top 2 bits in bits 0-1, 2-3, 4-5, 6-7; value i's scale
// is sc[i / 16].
struct Q6K {
  static constexpr int64_t kValues = kKBlock;
  static constexpr int64_t kBytes = 210;
  static constexpr Dtype kDtype = Dtype::Q6_K;

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) {
    return first_nonfinite_half(blocks, count, kBytes, 208, -1);
  }

  static void widen_float(const uint8_t* blk, float* out) {
#if defined(__AVX512F__) && defined(__F16C__)
    q6_k_each(blk, [out](int i, __m512 v) { _mm512_storeu_ps(out + i, v); });
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    q6_k_each(blk, [out](int i, __m256 v) { _mm256_storeu_ps(out + i, v); });
#else
    const float d = block_scale(blk + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk + 64 * h;
      const uint8_t* qh = blk + 128 + 32 * h;
      float* y = out + 128 * h;
      // Values 32 g + l: the low nibble (g < 2) or high one of ql[l + 32 (g % 2)], and bits 2g, 2g + 1
      // of qh[l]; in runs of 16 that share a scale (the loop over them vectorises).
      for (int g = 0; g < 4; ++g)
        for (int half = 0; half < 2; ++half) {
          const float ds = d * static_cast<float>(sc[8 * h + 2 * g + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int c = ((ql[l + 32 * (g % 2)] >> (4 * (g / 2))) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4);
            y[l + 32 * g] = ds * static_cast<float>(c - 32);
          }
        }
    }
#endif
  }

  template <class T>
  static void widen(const uint8_t* blk, T* out) { widen_through_float<Q6K>(blk, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<Q6K>(row, x, count); }
};

#if defined(__AVX512F__) && defined(__F16C__)
// sum over `count` super-blocks of dot(values, x), each through each(block, f).
template <class Each>
inline float k_dot(const uint8_t* row, const float* x, int64_t count, int64_t bytes, Each each) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* blk = row + b * bytes;
    prefetch_super_block(blk);
    const float* xb = x + b * kKBlock;
    each(blk, [&](int i, __m512 v) __attribute__((always_inline)) {
      if (i & 16)
        acc1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(xb + i), acc1);
      else
        acc0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(xb + i), acc0);
    });
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

#endif

#if (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))) && defined(__F16C__)
// float x: the super-blocks' values in registers (of 16 or 8), multiplied with x as they come.
template <>
template <>
inline float KWithMins<false>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return k_dot(row, x, count, kBytes, [](const uint8_t* blk, auto f) { k_with_mins_each<false>(blk, f); });
}
template <>
template <>
inline float KWithMins<true>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return k_dot(row, x, count, kBytes, [](const uint8_t* blk, auto f) { k_with_mins_each<true>(blk, f); });
}
template <>
inline float Q6K::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return k_dot(row, x, count, kBytes, [](const uint8_t* blk, auto f) { q6_k_each(blk, f); });
}
template <>
template <>
inline float KLowBits<false>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return k_dot(row, x, count, kBytes, [](const uint8_t* blk, auto f) { k_low_bits_each<false>(blk, f); });
}
template <>
template <>
inline float KLowBits<true>::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return k_dot(row, x, count, kBytes, [](const uint8_t* blk, auto f) { k_low_bits_each<true>(blk, f); });
}
#endif

}  // namespace xg::blocks

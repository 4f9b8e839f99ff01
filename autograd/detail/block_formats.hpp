// Internal to xgrad's .cpp files: how one block of a quantized weight widens, and how a row of
// blocks dots with a row of floats, for each blocked dtype (dtype.hpp). The products and lookups
// (blocks.cpp) are written once over these two operations.
//
//   q8_0 (ggml's block_q8_0, 34 bytes):  half d, int8 q[32]          x_j = d q_j
//   q4_0 (ggml's block_q4_0, 18 bytes):  half d, uint8 qs[16]        x_j = d (lo(qs_j) - 8),
//                                                                    x_{j+16} = d (hi(qs_j) - 8)
// (q4_0's first 16 values are the low nibbles, the next 16 the high ones: ggml's
// dequantize_row_q4_0.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "autograd/bfloat16.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/dtype.hpp"
#include "autograd/float16.hpp"

namespace xg::blocks {

inline float block_scale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return half_to_float(h);
}

// The first of `count` blocks (`bytes` each, the half scale first) whose scale is NaN or Inf,
// or -1: such a block makes every value of its 32 NaN or Inf, which a file's reader must refuse.
inline int64_t first_nonfinite_scale(const uint8_t* blocks, int64_t count, int64_t bytes) {
  for (int64_t b = 0; b < count; ++b) {
    uint16_t h;
    std::memcpy(&h, blocks + b * bytes, 2);
    if ((h & 0x7c00u) == 0x7c00u) return b;  // exponent all ones: Inf or NaN
  }
  return -1;
}

// The first of `count` blocks of `bytes` whose half at offset `at` (or at `at2`, when >= 0) is NaN
// or Inf, or -1.
inline int64_t first_nonfinite_half(const uint8_t* blocks, int64_t count, int64_t bytes, int64_t at, int64_t at2) {
  const int64_t a = first_nonfinite_scale(blocks + at, count, bytes);
  const int64_t b = at2 >= 0 ? first_nonfinite_scale(blocks + at2, count, bytes) : -1;
  return a < 0 ? b : b < 0 ? a : std::min(a, b);
}

// Quantizes n values (n / 32 blocks of `bytes`) with one(x, out), which returns false for a block
// it cannot store. Blocks are independent: split over the threads, the first bad one reported
// whatever the split. Returns -1, or the first element of that block.
template <class One>
int64_t quantize_each(const float* x, int64_t n, void* out, int64_t bytes, One one) {
  auto* o = static_cast<uint8_t*>(out);
  const int64_t count = n / kQ8Block;
  int64_t first_bad = count;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n >= kParallelMin)
  for (int64_t b = 0; b < count; ++b)
    if (!one(x + b * kQ8Block, o + b * bytes)) first_bad = std::min(first_bad, b);
  return first_bad < count ? first_bad * kQ8Block : -1;
}

// Widens n values (n / Fmt::kValues blocks of format Fmt) into out.
template <class Fmt, class T>
void widen_each(const void* data, int64_t n, T* out) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (int64_t b = 0; b < n / Fmt::kValues; ++b) Fmt::widen(p + b * Fmt::kBytes, out + b * Fmt::kValues);
}

// A block's values as T (its format's float32 widening, converted), and their dot with x over
// `count` blocks, for any T: the read-only formats (k_formats.hpp, legacy_formats.hpp,
// iq4_formats.hpp), whose values are defined as ggml's float32 ones. Their float dots have
// AVX-512 and AVX2 versions of their own; this one serves doubles and the portable build.
template <class Fmt, class T>
void widen_through_float(const uint8_t* blk, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    Fmt::widen_float(blk, out);
  } else {
    float v[Fmt::kValues];
    Fmt::widen_float(blk, v);
    for (int64_t i = 0; i < Fmt::kValues; ++i) out[i] = static_cast<T>(v[i]);
  }
}
// The dot's products go to 32 sums, one for each position modulo 32, added together once at the
// end of the row: the compiler keeps them in vector registers (4 of 8 floats on AVX2), so a block
// costs its widening and a few FMAs, where a sum reduced across its lanes at every block made
// each block wait on a horizontal add (q5_1 through this loop on an AVX2 Zen 3, before it had an
// AVX2 dot of its own: 0.82 G values/s before, 1.47 after).
template <class Fmt, class T>
acc_t<T> dot_through_float(const uint8_t* row, const T* x, int64_t count) {
  using A = acc_t<T>;
  constexpr int64_t kV = Fmt::kValues, kLanes = 32;
  static_assert(kV % kLanes == 0, "a block is a whole number of 32 values");
  A lanes[kLanes] = {};
  float v[kV];
  for (int64_t b = 0; b < count; ++b) {
    Fmt::widen_float(row + b * Fmt::kBytes, v);
    const T* xb = x + b * kV;
    for (int64_t c = 0; c < kV; c += kLanes)
#pragma omp simd
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += static_cast<A>(v[c + l]) * static_cast<A>(xb[c + l]);
  }
  A acc = 0;
  for (int64_t l = 0; l < kLanes; ++l) acc += lanes[l];
  return acc;
}

struct Q8 {
  static constexpr int64_t kValues = kQ8Block;
  static constexpr int64_t kBytes = kQ8BlockBytes;
  static constexpr Dtype kDtype = Dtype::Q8_0;

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) { return first_nonfinite_scale(blocks, count, kBytes); }

  // T float or double: exactly d * q; bfloat16: d * q rounded (a product under autocast).
  template <class T>
  static void widen(const uint8_t* block, T* out) {
    using A = acc_t<T>;
    const A d = static_cast<A>(block_scale(block));
    const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
    for (int64_t j = 0; j < kQ8Block; ++j) out[j] = static_cast<T>(d * static_cast<A>(q[j]));
  }

  // sum over `count` blocks b of d_b * dot(q_b, x[32 b .. 32 b + 31]), in acc_t<T>.
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) {
    using A = acc_t<T>;
    A acc = 0;
    for (int64_t b = 0; b < count; ++b) {
      const int8_t* q = reinterpret_cast<const int8_t*>(row + b * kBytes + 2);
      A part = 0;
#pragma omp simd reduction(+ : part)
      for (int64_t j = 0; j < kQ8Block; ++j) part += static_cast<A>(q[j]) * static_cast<A>(x[b * kQ8Block + j]);
      acc += static_cast<A>(block_scale(row + b * kBytes)) * part;
    }
    return acc;
  }
};

struct Q4 {
  static constexpr int64_t kValues = kQ4Block;
  static constexpr int64_t kBytes = kQ4BlockBytes;
  static constexpr Dtype kDtype = Dtype::Q4_0;

  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) { return first_nonfinite_scale(blocks, count, kBytes); }

  template <class T>
  static void widen(const uint8_t* block, T* out) {
    using A = acc_t<T>;
    const A d = static_cast<A>(block_scale(block));
    const uint8_t* qs = block + 2;
    for (int64_t j = 0; j < kQ4Block / 2; ++j) {
      out[j] = static_cast<T>(d * static_cast<A>((qs[j] & 0x0F) - 8));
      out[j + kQ4Block / 2] = static_cast<T>(d * static_cast<A>((qs[j] >> 4) - 8));
    }
  }

  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) {
    using A = acc_t<T>;
    A acc = 0;
    for (int64_t b = 0; b < count; ++b) {
      const uint8_t* qs = row + b * kBytes + 2;
      const T* xb = x + b * kQ4Block;
      A part = 0;
#pragma omp simd reduction(+ : part)
      for (int64_t j = 0; j < kQ4Block / 2; ++j)
        part += static_cast<A>((qs[j] & 0x0F) - 8) * static_cast<A>(xb[j]) +
                static_cast<A>((qs[j] >> 4) - 8) * static_cast<A>(xb[j + kQ4Block / 2]);
      acc += static_cast<A>(block_scale(row + b * kBytes)) * part;
    }
    return acc;
  }
};

#if defined(__AVX512F__) && defined(__F16C__)
// float x on AVX-512. A decoded token's products are these dots alone, and they must keep up with
// the weights streaming in from memory, so each block costs as few vector instructions as it can:
// its codes become floats in two registers of 16, their dot with x stays a vector, scaled by the
// block's d into one of two sums (two blocks in flight, so the sums' FMA latency does not set the
// pace), and one horizontal sum ends the row. The weight 2 KB ahead is prefetched at every step
// (a prefetch past the end is harmless): the loads' waits then overlap the arithmetic instead of
// adding to it. Measured one thread from memory (bench_blocks.cpp, Intel Xeon): q8_0 from 5.5-7.4
// to 10.1-11.9 GB/s, float32's 12-14; q4_0 from 4.9-5.6 GB/s to 7.7-8.6, at the 14-15 G values/s
// the arithmetic allows from the caches.

inline __m512 block_d(const uint8_t* blk) {
  uint16_t h;
  std::memcpy(&h, blk, 2);
  return _mm512_set1_ps(_cvtsh_ss(h));
}

// sum over the blocks of d_b * part(block b, x + 32 b): two blocks a step, on two sums.
constexpr int64_t kAhead = 2048;  // bytes: 1024 read 8.5 GB/s for q8_0's 576-wide rows
template <class Part>
inline float dot_blocks(const uint8_t* row, const float* x, int64_t count, int64_t bytes, Part part) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < count; b += 2) {
    const uint8_t* blk = row + b * bytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead, _MM_HINT_T0);
    acc0 = _mm512_fmadd_ps(block_d(blk), part(blk, x + b * 32), acc0);
    acc1 = _mm512_fmadd_ps(block_d(blk + bytes), part(blk + bytes, x + b * 32 + 32), acc1);
  }
  if (b < count) acc0 = _mm512_fmadd_ps(block_d(row + b * bytes), part(row + b * bytes, x + b * 32), acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

template <>
inline float Q8::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return dot_blocks(row, x, count, kBytes, [](const uint8_t* blk, const float* xb) {
    const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
    const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
    return _mm512_fmadd_ps(q1, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(xb)));
  });
}

// q4_0's 16 bytes hold both halves: the low nibbles are values 0..15, the high ones 16..31. A code
// c becomes the float c - 8 in one permute: vpermps reads only an index's low 4 bits, so the table
// of -8..7 is indexed by the byte itself (low nibble) and by the byte shifted right by 4 (high),
// with no masking, subtracting or integer-to-float conversion.
template <>
inline float Q4::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  return dot_blocks(row, x, count, kBytes, [codes](const uint8_t* blk, const float* xb) {
    const __m512i qs = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m512 lo = _mm512_permutexvar_ps(qs, codes), hi = _mm512_permutexvar_ps(_mm512_srli_epi32(qs, 4), codes);
    return _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
  });
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// float x on AVX2 with FMA and F16C (AMD Zen 1-3, Intel Haswell to Alder Lake): the AVX-512 dots
// above in registers of 8. A block's 32 products are summed into one register (two chains of
// two FMAs), scaled by its d into one of two sums (two blocks in flight), and one horizontal sum
// ends the row; the weight 2 KB ahead is prefetched at every step. Before, these rows took the
// portable loops, whose sum crossed its lanes at every block: on a Zen 3, q8_0 ran at 1.8 G
// values/s from memory, float32 at 4.7 (bench/README.md, "On an AVX2 CPU").

inline __m256 block_d(const uint8_t* blk) {
  uint16_t h;
  std::memcpy(&h, blk, 2);
  return _mm256_set1_ps(_cvtsh_ss(h));
}

inline float reduce_add8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// sum over the blocks of d_b * part(block b, x + 32 b): two blocks a step, on two sums.
constexpr int64_t kAhead = 2048;
template <class Part>
inline float dot_blocks(const uint8_t* row, const float* x, int64_t count, int64_t bytes, Part part) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < count; b += 2) {
    const uint8_t* blk = row + b * bytes;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead, _MM_HINT_T0);
    acc0 = _mm256_fmadd_ps(block_d(blk), part(blk, x + b * 32), acc0);
    acc1 = _mm256_fmadd_ps(block_d(blk + bytes), part(blk + bytes, x + b * 32 + 32), acc1);
  }
  if (b < count) acc0 = _mm256_fmadd_ps(block_d(row + b * bytes), part(row + b * bytes, x + b * 32), acc0);
  return reduce_add8(_mm256_add_ps(acc0, acc1));
}

// 8 bytes at p, each in a 32-bit lane (vpmovzxbd ymm, m64: the widening reads memory itself).
inline __m256i bytes8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }

// p, which the compiler no longer knows as the address of a local array: broadcasts from it are
// then loads at p + 4 j (vbroadcastss m32, no shuffle), where GCC 12 made an address for each j
// of a block's table of scales, kept them in registers and on the stack, and reloaded them (on a
// Zen 3, a fifth of a q4_k block's instructions). Also a barrier: the table is stored before it
// is read.
inline const float* opaque(const float* p) {
  asm volatile("" : "+r"(p)::"memory");
  return p;
}

// 8 signed bytes as 8 floats.
inline __m256 int8x8_floats(__m128i q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)); }
// 8 signed bytes at p as 8 floats: the widening reads memory itself (vpmovsxbd ymm, m64).
inline __m256 int8x8_floats_at(const uint8_t* p) {
  return int8x8_floats(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// sum of c_j x_j over one block's 32 values, c in four registers of 8, in one register.
inline __m256 dot32(__m256 c0, __m256 c1, __m256 c2, __m256 c3, const float* xb) {
  return _mm256_add_ps(_mm256_fmadd_ps(c1, _mm256_loadu_ps(xb + 8), _mm256_mul_ps(c0, _mm256_loadu_ps(xb))),
                       _mm256_fmadd_ps(c3, _mm256_loadu_ps(xb + 24), _mm256_mul_ps(c2, _mm256_loadu_ps(xb + 16))));
}

template <>
inline float Q8::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  return dot_blocks(row, x, count, kBytes, [](const uint8_t* blk, const float* xb) {
    return dot32(int8x8_floats_at(blk + 2), int8x8_floats_at(blk + 10), int8x8_floats_at(blk + 18),
                 int8x8_floats_at(blk + 26), xb);
  });
}

// q4_0: bytes 0..7 and 8..15 zero-extended from memory into 32-bit lanes, whose low nibbles are
// values 0..7 and 8..15 and whose high ones (the lane shifted right by 4) are values 16..31;
// c - 8 in integers, then as floats.
template <>
inline float Q4::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  const __m256i low4 = _mm256_set1_epi32(0x0F), eight = _mm256_set1_epi32(8);
  return dot_blocks(row, x, count, kBytes, [low4, eight](const uint8_t* blk, const float* xb) {
    const __m256i a = bytes8(blk + 2), b = bytes8(blk + 10);
    const auto value = [eight](__m256i c) { return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, eight)); };
    return dot32(value(_mm256_and_si256(a, low4)), value(_mm256_and_si256(b, low4)), value(_mm256_srli_epi32(a, 4)),
                 value(_mm256_srli_epi32(b, 4)), xb);
  });
}
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
// The row kAhead bytes past a super-block (up to 210 bytes: three cache lines), as the 32-value
// dots prefetch.
inline void prefetch_super_block(const uint8_t* blk) {
  _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead + 64, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead + 128, _MM_HINT_T0);
}

#endif

}  // namespace xg::blocks

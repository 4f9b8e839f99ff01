// Internal to xgrad's .cpp files: float16 frozen weights (dtype.hpp's kF16) as a block format
// beside q8_0's (block_formats.hpp), so that every product, lookup and widening written over
// blocks reads them: a "block" is 32 IEEE half values, 64 bytes, nothing else. A float16
// Hugging Face folder (torch_dtype "float16") or a GGUF file's F16 tensors keep their 2 bytes a
// value this way, as llama.cpp keeps them, where float32 would take 4 and bf16 would drop 3 of
// the 10 mantissa bits.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "autograd/detail/block_formats.hpp"

namespace xg::blocks {

struct F16 {
  static constexpr int64_t kValues = 32;
  static constexpr int64_t kBytes = 64;
  static constexpr Dtype kDtype = Dtype::F16;

  // Every value of a block is a half of its own: the first block holding a NaN or Inf, or -1.
  static int64_t first_nonfinite(const uint8_t* blocks, int64_t count) {
    const int64_t v = first_nonfinite_scale(blocks, count * kValues, 2);
    return v < 0 ? -1 : v / kValues;
  }

  static void widen_float(const uint8_t* block, float* out);  // below: vcvtph2ps or one half at a time
  // Exact in float and double; bfloat16 rounds (a product under autocast).
  template <class T>
  static void widen(const uint8_t* block, T* out) { widen_through_float<F16>(block, out); }
  template <class T>
  static acc_t<T> dot(const uint8_t* row, const T* x, int64_t count) { return dot_through_float<F16>(row, x, count); }

  // float32 -> half, to nearest even; false for a block with a value half cannot hold (NaN, Inf,
  // or beyond 65504, which would round to Inf).
  static bool quantize(const float* x, uint8_t* out) {
    for (int64_t j = 0; j < kValues; ++j) {
      const uint16_t h = float_to_half(x[j]);
      if ((h & 0x7c00u) == 0x7c00u) return false;
      std::memcpy(out + 2 * j, &h, 2);
    }
    return true;
  }
};

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
inline void F16::widen_float(const uint8_t* block, float* out) {
  for (int64_t j = 0; j < kValues; ++j) {
    uint16_t h;
    std::memcpy(&h, block + 2 * j, 2);
    out[j] = half_to_float(h);
  }
}
#elif !defined(__AVX512F__)
// AVX2 with F16C: vcvtph2ps 8 halves at a time, exact.
inline __m256 halves8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline void F16::widen_float(const uint8_t* block, float* out) {
  for (int j = 0; j < 4; ++j) _mm256_storeu_ps(out + 8 * j, halves8(block + 16 * j));
}

// A row's dot with float x: a block's four registers of 8 on four sums.
template <>
inline float F16::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (int64_t b = 0; b < count; ++b) {
    const uint8_t* blk = row + b * kBytes;
    const float* xb = x + b * kValues;
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead, _MM_HINT_T0);
    a0 = _mm256_fmadd_ps(halves8(blk), _mm256_loadu_ps(xb), a0);
    a1 = _mm256_fmadd_ps(halves8(blk + 16), _mm256_loadu_ps(xb + 8), a1);
    a2 = _mm256_fmadd_ps(halves8(blk + 32), _mm256_loadu_ps(xb + 16), a2);
    a3 = _mm256_fmadd_ps(halves8(blk + 48), _mm256_loadu_ps(xb + 24), a3);
  }
  return reduce_add8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}
#else
// vcvtph2ps: 16 halves a instruction, exact.
inline void F16::widen_float(const uint8_t* block, float* out) {
  _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block))));
  _mm512_storeu_ps(out + 16, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32))));
}

// A row's dot with float x: two blocks (four registers of 16) a step on four sums, so that no
// sum waits on the FMA before it within a step.
template <>
inline float F16::dot<float>(const uint8_t* row, const float* x, int64_t count) {
  const auto half16 = [](const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  };
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < count; b += 2) {
    const uint8_t* blk = row + b * kBytes;
    const float* xb = x + b * kValues;
    a0 = _mm512_fmadd_ps(half16(blk), _mm512_loadu_ps(xb), a0);
    a1 = _mm512_fmadd_ps(half16(blk + 32), _mm512_loadu_ps(xb + 16), a1);
    a2 = _mm512_fmadd_ps(half16(blk + 64), _mm512_loadu_ps(xb + 32), a2);
    a3 = _mm512_fmadd_ps(half16(blk + 96), _mm512_loadu_ps(xb + 48), a3);
  }
  if (b < count) {
    a0 = _mm512_fmadd_ps(half16(row + b * kBytes), _mm512_loadu_ps(x + b * kValues), a0);
    a1 = _mm512_fmadd_ps(half16(row + b * kBytes + 32), _mm512_loadu_ps(x + b * kValues + 16), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
#endif

}  // namespace xg::blocks

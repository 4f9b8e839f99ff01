// q4_0 blocks (q4_0.hpp): quantizing as ggml's reference does, bit for bit, and widening.
#include "autograd/q4_0.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/detail/block_formats.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/float16.hpp"

namespace xg {

namespace {

// The block's value of largest magnitude, the first on a tie (ggml's loop keeps the first, as
// its test is a strict amax < |v|); 0 for a block of zeros. `finite`: whether every x_j is.
float q4_block_max(const float* x, bool& finite) {
#if defined(__AVX512F__)
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16), zero = _mm512_setzero_ps();
  finite = (_mm512_cmp_ps_mask(_mm512_sub_ps(a, a), zero, _CMP_EQ_OQ) &
            _mm512_cmp_ps_mask(_mm512_sub_ps(b, b), zero, _CMP_EQ_OQ)) == 0xFFFF;
  if (!finite) return 0;
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  if (amax == 0) return 0;
  const __m512 va = _mm512_set1_ps(amax);
  const uint32_t at = _mm512_cmp_ps_mask(_mm512_abs_ps(a), va, _CMP_EQ_OQ) |
                      (static_cast<uint32_t>(_mm512_cmp_ps_mask(_mm512_abs_ps(b), va, _CMP_EQ_OQ)) << 16);
  return x[__builtin_ctz(at)];
#else
  float amax = 0, max = 0;
  finite = true;
  for (int64_t j = 0; j < kQ4Block; ++j) {
    finite = finite && std::isfinite(x[j]);
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
#endif
}

// min(15, trunc(v + 8.5)) for v = x_j * id, each step rounded to float as ggml's C does: the
// multiply and the add must not fuse into one FMA (a compiler contracts a * b + c where it may),
// or a value whose product lands just under a half, like 0.49999997, would round differently.
// v >= -8 (up to rounding), so the sum is above -1 and truncates to 0..16.
void q4_codes(const float* x, float id, uint8_t* qs) {
#if defined(__AVX512F__)
  constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 vid = _mm512_set1_ps(id), bias = _mm512_set1_ps(8.5f);
  const __m512i top = _mm512_set1_epi32(15);
  __m512i c[2];
  for (int k = 0; k < 2; ++k) {  // the *_round_ps forms are builtins no compiler contracts
    const __m512 v = _mm512_mul_round_ps(_mm512_loadu_ps(x + 16 * k), vid, kNear);
    c[k] = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_round_ps(v, bias, kNear)), top);
  }
  const __m512i packed = _mm512_or_si512(c[0], _mm512_slli_epi32(c[1], 4));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(packed));
#else
  for (int64_t j = 0; j < kQ4Block / 2; ++j) {
    float v0 = x[j] * id, v1 = x[j + kQ4Block / 2] * id;
    asm("" : "+x"(v0), "+x"(v1));  // the rounded products, kept apart from the add
    const int c0 = std::min(15, static_cast<int>(v0 + 8.5f)), c1 = std::min(15, static_cast<int>(v1 + 8.5f));
    qs[j] = static_cast<uint8_t>(c0 | (c1 << 4));
  }
#endif
}

// One block of x into o (18 bytes); false when it cannot be stored (a NaN or Inf, or a scale
// beyond half's range).
bool q4_quantize_block(const float* x, uint8_t* o) {
  bool finite = true;
  const float max = q4_block_max(x, finite);
  const float d = max / -8.0f;
  const uint16_t dh = float_to_half(d);
  if (!finite || (dh & 0x7fffu) == 0x7c00u) return false;
  std::memcpy(o, &dh, 2);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  if (d != 0 && !std::isfinite(id)) {
    // 1 / d overflows for a subnormal d (max|x| below about 3e-38): ggml would multiply by the
    // infinite 1 / d and convert Inf or NaN to int8, which is undefined. x / d stays within
    // +-8; such a block's half scale is 0, so it widens to zeros either way.
    for (int64_t j = 0; j < kQ4Block / 2; ++j) {
      const int c0 = std::min(15, static_cast<int>(x[j] / d + 8.5f));
      const int c1 = std::min(15, static_cast<int>(x[j + kQ4Block / 2] / d + 8.5f));
      o[2 + j] = static_cast<uint8_t>(c0 | (c1 << 4));
    }
    return true;
  }
  q4_codes(x, id, o + 2);
  return true;
}

}  // namespace

int64_t quantize_q4_0(const float* x, int64_t n, void* out) {
  return blocks::quantize_each(x, n, out, kQ4BlockBytes, q4_quantize_block);
}

void dequantize_q4_0(const void* data, int64_t n, float* out) { blocks::widen_each<blocks::Q4>(data, n, out); }
void dequantize_q4_0(const void* data, int64_t n, double* out) { blocks::widen_each<blocks::Q4>(data, n, out); }

}  // namespace xg

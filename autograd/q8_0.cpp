// q8_0 blocks (q8_0.hpp): quantizing as ggml's reference does, bit for bit, and widening. The
// products and lookups that read a q8_0 weight are blocks.cpp's.
#include "autograd/q8_0.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/detail/block_formats.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/float16.hpp"

namespace xg {

namespace {

// max |x_j| of one block, and whether every x_j is finite.
float block_amax(const float* x, bool& finite) {
#if defined(__AVX512F__)
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16), zero = _mm512_setzero_ps();
  // x - x is 0 exactly when x is finite (NaN for NaN and Inf)
  finite = (_mm512_cmp_ps_mask(_mm512_sub_ps(a, a), zero, _CMP_EQ_OQ) &
            _mm512_cmp_ps_mask(_mm512_sub_ps(b, b), zero, _CMP_EQ_OQ)) == 0xFFFF;
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
#else
  float amax = 0;
  finite = true;
  for (int64_t j = 0; j < kQ8Block; ++j) {
    finite = finite && std::isfinite(x[j]);
    amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
#endif
}

// q_j = roundf(x_j * id) for one block (|x_j * id| <= 127): halves away from zero, as ggml's
// reference. AVX-512: t = trunc(v), then t + sign(v) where |v - t| >= 0.5 (v - t is exact);
// its own rounding mode would round halves to even.
void round_block(const float* x, float id, int8_t* q) {
#if defined(__AVX512F__)
  const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int k = 0; k < 2; ++k) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), vid);
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), half, _CMP_GE_OQ);
    const __m512 step = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), sign_bit), _mm512_castps_si512(one)));
    t = _mm512_mask_add_ps(t, up, t, step);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * k), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(t)));
  }
#else
  // std::round rounds halves away from zero, as ggml's roundf; |x / d| <= 127 fits int8.
  for (int64_t j = 0; j < kQ8Block; ++j) q[j] = static_cast<int8_t>(std::round(x[j] * id));
#endif
}

// One block of x into o (34 bytes); false when it cannot be stored (a NaN or Inf, or a scale
// beyond half's range).
bool quantize_block(const float* x, uint8_t* o) {
  bool finite = true;
  const float amax = block_amax(x, finite);
  const float d = amax / 127.0f;
  // 1 / d overflows for a subnormal d (max|x| below about 4e-37): then x / d, which stays
  // within +-127 (ggml multiplies by the infinite 1 / d, and converting that to int8 is
  // undefined). Such a block's half scale is 0 either way, so it widens to zeros.
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const uint16_t dh = float_to_half(d);
  if (!finite || (dh & 0x7fffu) == 0x7c00u) return false;
  std::memcpy(o, &dh, 2);
  auto* q = reinterpret_cast<int8_t*>(o + 2);
  if (d != 0 && !std::isfinite(id)) {
    for (int64_t j = 0; j < kQ8Block; ++j) q[j] = static_cast<int8_t>(std::round(x[j] / d));
    return true;
  }
  round_block(x, id, q);
  return true;
}

}  // namespace

int64_t quantize_q8_0(const float* x, int64_t n, void* out) {
  return blocks::quantize_each(x, n, out, kQ8BlockBytes, quantize_block);
}

void dequantize_q8_0(const void* data, int64_t n, float* out) { blocks::widen_each<blocks::Q8>(data, n, out); }
void dequantize_q8_0(const void* data, int64_t n, double* out) { blocks::widen_each<blocks::Q8>(data, n, out); }

}  // namespace xg

// xg::bfloat16, the element type of kBFloat16 tensors: the top 16 bits of a float32 (1 sign,
// 8 exponent, 7 mantissa bits; Google Brain's format, torch.bfloat16). It converts to float
// implicitly and from any arithmetic type with round-to-nearest-even, so a kernel written for
// T reads bf16, computes in float32, and rounds once when it stores (PyTorch's CPU kernels
// do the same). Accumulators are float32: acc_t<bfloat16> (reductions never sum in bf16).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace xg {

namespace bf16 {
inline float to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Round to nearest, ties to even; a NaN stays a quiet NaN.
inline uint16_t from_float(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
}  // namespace bf16

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  // NOTE: a float64 value is rounded to float32 first, then to bf16, as c10::BFloat16's
  // constructor (which takes a float) does for torch's float64 -> bfloat16 casts.
  template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  bfloat16(U v) : bits(bf16::from_float(static_cast<float>(v))) {}  // NOLINT: implicit, like c10::BFloat16
  operator float() const { return bf16::to_float(bits); }           // NOLINT

  // Compound assignment computes in float32 and rounds once (`acc += x` in a kernel over bf16).
  bfloat16& operator+=(float v) { return *this = bfloat16(static_cast<float>(*this) + v); }
  bfloat16& operator-=(float v) { return *this = bfloat16(static_cast<float>(*this) - v); }
  bfloat16& operator*=(float v) { return *this = bfloat16(static_cast<float>(*this) * v); }
  bfloat16& operator/=(float v) { return *this = bfloat16(static_cast<float>(*this) / v); }

  static bfloat16 from_bits(uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
};
static_assert(sizeof(bfloat16) == 2, "bfloat16 is two bytes");

// The type a kernel accumulates T in: float for bf16, T itself otherwise.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<bfloat16> { using type = float; };
template <class T> using acc_t = typename acc_type<T>::type;

}  // namespace xg

// numeric_limits, so that generic kernels' infinity()/lowest() are bf16's, never the
// unspecialised template's silent zeros.
template <>
class std::numeric_limits<xg::bfloat16> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int digits = 8;
  static constexpr int radix = 2;
  static xg::bfloat16 min() { return xg::bfloat16::from_bits(0x0080); }      // 2^-126
  static xg::bfloat16 max() { return xg::bfloat16::from_bits(0x7f7f); }      // 3.3895e38
  static xg::bfloat16 lowest() { return xg::bfloat16::from_bits(0xff7f); }
  static xg::bfloat16 epsilon() { return xg::bfloat16::from_bits(0x3c00); }  // 2^-7
  static xg::bfloat16 infinity() { return xg::bfloat16::from_bits(0x7f80); }
  static xg::bfloat16 quiet_NaN() { return xg::bfloat16::from_bits(0x7fc0); }
  static xg::bfloat16 denorm_min() { return xg::bfloat16::from_bits(0x0001); }
};

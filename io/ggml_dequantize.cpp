// Widening llama.cpp's 2- and 3-bit k-quants to float32 (io/detail/ggml_dequantize.hpp).
// Each function takes one block and writes its values in order; the arithmetic is ggml's, in
// its order, so that the values equal dequantize_row_* bit for bit. The products are exact in
// float32 (a half scale's 11 bits times a scale of at most 6 bits and a code of at most 3), so a
// compiler's fused multiply-add cannot change them; the one rounding is the min's subtraction.
// Load-time only: plain loops.
#include "io/detail/ggml_dequantize.hpp"

#include <cstring>

#include "autograd/error.hpp"
#include "autograd/float16.hpp"

namespace xg::io::detail {

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// Q2_K (block_q2_K, 84 bytes): 16 bytes of scales (a 4-bit scale and a 4-bit min for each 16
// values), 64 bytes of 2-bit codes, half d, half dmin; x = d sc c - dmin m. The codes of values
// 128h + 32s + l (h half, s shift) sit in bits 2s of byte 32h + l, l < 32.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  int is = 0;
  for (int h = 0; h < 2; ++h, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part) {  // the first 16 of the 32 bytes, then the next 16
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
      }
    }
  }
}

// Q3_K (block_q3_K, 110 bytes): 32 bytes of high bits, 64 bytes of 2-bit low codes, 12 bytes of
// 6-bit signed scales (one per 16 values, stored minus 32), half d; x = d (sc - 32) (c - 4), where
// c's third bit is the high bit (set: c = low, unset: low - 4 below it).
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  const uint8_t* packed = b + 96;
  const float d = half_at(b + 108);
  // The 16 scales: the low 4 bits of scale j are byte j's low nibble (j < 8) or byte j - 8's high
  // nibble; its top 2 bits are bits 2 (j / 4) of byte 8 + j % 4.
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  int is = 0;
  uint8_t m = 1;
  for (int h = 0; h < 2; ++h, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int part = 0; part < 2; ++part) {
        const float dl = d * static_cast<float>(scales[is++]);
        for (int l = 16 * part; l < 16 * part + 16; ++l) {
          const int c = ((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(c);
        }
      }
    }
  }
}

}  // namespace

void dequantize_ggml(GgmlType type, const char* p, int64_t n, float* out) {
  void (*one)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::Q2_K: one = q2_k; break;
    case GgmlType::Q3_K: one = q3_k; break;
    default: throw Error(str_cat("dequantize_ggml: ", ggml_type_name(type), " is not a read-only block type"));
  }
  const int64_t values = ggml_block_values(type);
  const uint64_t bytes = ggml_block_bytes(type);
  check(n % values == 0, "dequantize_ggml: ", n, " values are not whole ", ggml_type_name(type), " blocks of ", values);
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  for (int64_t i = 0; i < n / values; ++i) one(b + i * bytes, out + i * values);
}

}  // namespace xg::io::detail

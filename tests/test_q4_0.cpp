// q4_0 tensors (autograd/q4_0.hpp): ggml's block_q4_0 quantization, storage and widening, against
// ggml's reference loop written out here (and, in test_gguf_llama_cpp.cpp, against the blocks
// llama.cpp's own quantizer wrote). The ops that read a q4_0 weight are test_blocks.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "autograd/q4_0.hpp"
#include "tests/torch_fixture.hpp"

namespace test_q4_0 {

using namespace xg;

// ggml's quantize_row_q4_0_ref for one block, written out from its definition: max is the value
// of largest magnitude (the first on a tie), d = max / -8 stored as half, and each code
// min(15, (int8_t)(x * id + 8.5f)) with every step rounded to float (the asm keeps the compiler
// from fusing the multiply and the add, which ggml's C does not fuse either).
void reference_block(const float* x, uint16_t* d_bits, uint8_t* qs) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  const float d = max / -8, id = d != 0 ? 1.0f / d : 0.0f;
  *d_bits = float_to_half(d);
  for (int j = 0; j < 16; ++j) {
    float x0 = x[j] * id, x1 = x[16 + j] * id;
    asm("" : "+x"(x0), "+x"(x1));
    const int c0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
    const int c1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
    qs[j] = static_cast<uint8_t>(c0 | (c1 << 4));
  }
}

Tensor random_weight(const Shape& shape, uint64_t seed, double scale = 1.0) {
  return (xg::test::randn64(shape, seed).detach() * scale).to(kFloat32);
}

// The number of blocks of w (float32) whose q4_0 bytes in q differ from the reference's.
int differing_blocks(const Tensor& w, const Tensor& q) {
  const auto* bytes = static_cast<const uint8_t*>(q.raw_data());
  int bad = 0;
  for (int64_t b = 0; b < w.numel() / 32; ++b) {
    uint16_t d, stored;
    uint8_t qs[16];
    reference_block(w.data<float>() + 32 * b, &d, qs);
    std::memcpy(&stored, bytes + 18 * b, 2);
    const bool same = stored == d && std::memcmp(bytes + 18 * b + 2, qs, 16) == 0;
    if (!same && bad < 5) ADD_FAILURE() << "block " << b;
    bad += !same;
  }
  return bad;
}

TEST(Q4_0, QuantizesAsGgmlsReferenceAndStoresItsBlocks) {
  Tensor w = random_weight({3, 64}, 1);
  for (int j = 32; j < 64; ++j) w.data<float>()[64 + j] = 0.0f;  // an all-zero block: d = 0
  Tensor q = w.to(kQ4_0);
  EXPECT_EQ(q.dtype(), kQ4_0);
  EXPECT_STREQ(dtype_name(kQ4_0), "q4_0");
  EXPECT_EQ(q.shape(), w.shape());
  EXPECT_EQ(storage_bytes(kQ4_0, q.numel()), 6u * 18u);
  EXPECT_THROW(itemsize(kQ4_0), Error);
  EXPECT_EQ(differing_blocks(w, q), 0);
  // widening is exactly d * (c - 8): the low nibbles are values 0..15, the high ones 16..31
  const auto* bytes = static_cast<const uint8_t*>(q.raw_data());
  const Tensor back = q.to(kFloat32), back64 = q.to(kFloat64);
  for (int64_t i = 0; i < w.numel(); ++i) {
    uint16_t d;
    std::memcpy(&d, bytes + 18 * (i / 32), 2);
    const uint8_t byte = bytes[18 * (i / 32) + 2 + i % 16];
    const int c = i % 32 < 16 ? byte & 0x0F : byte >> 4;
    EXPECT_EQ(back.data<float>()[i], half_to_float(d) * static_cast<float>(c - 8)) << i;
    EXPECT_EQ(back64.data<double>()[i], static_cast<double>(back.data<float>()[i])) << i;
  }
  EXPECT_EQ(back.data<float>()[64 + 40], 0.0f);
  EXPECT_EQ(q.to_vector(), back64.to_vector());
  // the value of largest magnitude is code 0, exactly: it comes back as itself up to d's rounding
  const float* x = w.data<float>();
  int at = 0;
  for (int j = 1; j < 32; ++j) at = std::fabs(x[j]) > std::fabs(x[at]) ? j : at;
  EXPECT_NEAR(back.data<float>()[at], x[at], std::fabs(x[at]) * 1e-3);
  EXPECT_EQ(bytes[2 + at % 16] >> (at < 16 ? 0 : 4) & 0x0F, 0);
}

// Many blocks (enough for the threads to split them) and the cases the rule turns on: a negative
// maximum (d > 0), a tie between +m and -m (the first wins), -max clamped from 16 to 15, values
// whose x * id lands on a half only once rounded (a fused multiply-add would code them one
// lower), and tiny blocks.
TEST(Q4_0, EveryBlockOfALargeTensorQuantizesAsGgmlsReference) {
  Tensor w = random_weight({512, 1024}, 5, 3.0);
  float* x = w.data<float>();
  x[0] = 8.0f;  // d = -1, id = -1
  x[1] = -8.0f;
  for (int j = 2; j < 32; ++j) x[j] = static_cast<float>(j % 15 - 7) + (j % 2 ? 0.5f : -0.5f);  // within 7.5
  for (int j = 37; j < 64; ++j) x[j] = 0.01f * static_cast<float>(j - 50);
  x[32] = -2.0f;  // a tie: -2 comes first, so d = 0.25 > 0
  x[33] = 2.0f;
  x[34] = std::nextafter(0.125f, 0.0f);  // x * id just under a half: 0.4999999 + 8.5 rounds to 9
  x[35] = -std::nextafter(0.125f, 0.0f);
  x[36] = std::nextafter(0.375f, 1.0f);
  for (int j = 64; j < 96; ++j) x[j] = 0.0f;
  for (int j = 96; j < 128; ++j) x[j] = -1e-3f * static_cast<float>(j);
  for (int j = 128; j < 160; ++j) x[j] = 3e-38f * static_cast<float>(j - 140);  // a normal d near the bottom
  // max -3: d = 0.375 and id = 1 / d = 2.6666667, so -2.8125 * id rounds to -7.5 exactly and
  // codes to 1, where the unrounded product (-7.50000024) would code to 0; likewise -2.4375 to 2.
  for (int j = 160; j < 192; ++j) x[j] = 0.01f * static_cast<float>(j - 175);
  x[160] = -3.0f;
  x[161] = -2.8125f;
  x[162] = -2.4375f;
  const Tensor q = w.to(kQ4_0);
  EXPECT_EQ(differing_blocks(w, q), 0);
  const auto* bytes = static_cast<const uint8_t*>(q.raw_data());
  EXPECT_EQ(bytes[2] & 0x0F, 0) << "the max is code 0";
  EXPECT_EQ(bytes[2 + 1] & 0x0F, 15) << "-max is 16, clamped to 15";
  uint16_t d;
  std::memcpy(&d, bytes + 18, 2);
  EXPECT_EQ(half_to_float(d), 0.25f) << "the first of a tie (-2) is the max";
  EXPECT_EQ(bytes[5 * 18 + 2 + 1] & 0x0F, 1) << "-2.8125 * id + 8.5 is 1 with the product rounded first";
  EXPECT_EQ(bytes[5 * 18 + 2 + 2] & 0x0F, 2);
  // The first block that cannot be stored is the one named, however the blocks are split.
  x[32 * 9000 + 7] = std::numeric_limits<float>::infinity();
  x[32 * 12000 + 1] = std::numeric_limits<float>::quiet_NaN();
  try {
    w.to(kQ4_0);
    FAIL() << "an Inf quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 288007 "), std::string::npos) << e.what();
  }
}

TEST(Q4_0, RefusesWhatBlocksCannotHoldByName) {
  Tensor w = random_weight({2, 32}, 2);
  w.data<float>()[37] = std::numeric_limits<float>::quiet_NaN();
  try {
    w.to(kQ4_0);
    FAIL() << "a NaN quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 37"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("to(q4_0)"), std::string::npos) << e.what();
  }
  w.data<float>()[37] = 6e5f;  // d = 6e5 / 8 is beyond half's 65504 (q8_0 holds it: / 127)
  EXPECT_THROW(w.to(kQ4_0), Error);
  EXPECT_NO_THROW(w.to(kQ8_0));
  EXPECT_THROW(empty({4, 48}, kQ4_0), Error);  // rows are not whole blocks
  // A block of subnormal values: 1 / d would be infinite; it quantizes to a zero half scale and
  // widens to zeros.
  Tensor tiny = full({1, 32}, 1e-39, kFloat32);
  tiny.data<float>()[3] = -5e-40f;
  EXPECT_EQ(tiny.to(kQ4_0).to(kFloat32).to_vector(), std::vector<double>(32, 0.0));
  Tensor q = random_weight({4, 32}, 4).to(kQ4_0);
  try {
    (void)(q + q);
    FAIL() << "an elementwise op read q4_0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(q.to(kQ8_0), Error);  // widen first: a quantized tensor is not quantized again
}

// Quantizing what q4_0 widens gives the same blocks: the max of a widened block is -8 d (code 0).
TEST(Q4_0, WidenedBlocksQuantizeToThemselves) {
  const Tensor q = random_weight({64, 96}, 7, 0.1).to(kQ4_0);
  const Tensor again = q.to(kFloat32).to(kQ4_0);
  EXPECT_EQ(std::memcmp(q.raw_data(), again.raw_data(), storage_bytes(kQ4_0, q.numel())), 0);
}

}  // namespace test_q4_0

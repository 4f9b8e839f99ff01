// q8_0 tensors (autograd/q8_0.hpp): ggml's block_q8_0 quantization, storage and widening. The
// ops that read a frozen q8_0 weight are tested with q4_0's in test_blocks.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tests/torch_fixture.hpp"

namespace test_q8_0 {

using namespace xg;

// ggml's quantize_row_q8_0_ref for one block, written out here from its definition so that the
// library's version is checked against it: d = amax / 127 stored as half, q = roundf(x / d).
void reference_block(const float* x, uint16_t* d_bits, int8_t* q) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
  *d_bits = float_to_half(d);
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
}

Tensor random_weight(const Shape& shape, uint64_t seed, double scale = 1.0) {
  return (xg::test::randn64(shape, seed).detach() * scale).to(kFloat32);
}

TEST(Q8_0, QuantizesAsGgmlsReferenceAndStoresItsBlocks) {
  Tensor w = random_weight({3, 64}, 1);
  w.data<float>()[5] = 0.0f;
  for (int j = 32; j < 64; ++j) w.data<float>()[64 + j] = 0.0f;  // an all-zero block: d = 0
  Tensor q = w.to(kQ8_0);
  EXPECT_EQ(q.dtype(), kQ8_0);
  EXPECT_STREQ(dtype_name(kQ8_0), "q8_0");
  EXPECT_EQ(q.shape(), w.shape());
  EXPECT_EQ(storage_bytes(kQ8_0, q.numel()), 6u * 34u);
  EXPECT_THROW(itemsize(kQ8_0), Error);
  const auto* bytes = static_cast<const uint8_t*>(q.raw_data());
  for (int b = 0; b < 6; ++b) {
    uint16_t d;
    int8_t qs[32];
    reference_block(w.data<float>() + 32 * b, &d, qs);
    uint16_t stored;
    std::memcpy(&stored, bytes + 34 * b, 2);
    EXPECT_EQ(stored, d) << "block " << b;
    EXPECT_EQ(std::memcmp(bytes + 34 * b + 2, qs, 32), 0) << "block " << b;
  }
  // widening is exactly d * q, to float32 and float64 alike
  const Tensor back = q.to(kFloat32), back64 = q.to(kFloat64);
  for (int64_t i = 0; i < w.numel(); ++i) {
    uint16_t d;
    std::memcpy(&d, bytes + 34 * (i / 32), 2);
    const auto qi = static_cast<int8_t>(bytes[34 * (i / 32) + 2 + i % 32]);
    EXPECT_EQ(back.data<float>()[i], half_to_float(d) * static_cast<float>(qi)) << i;
    EXPECT_EQ(back64.data<double>()[i], static_cast<double>(back.data<float>()[i])) << i;
  }
  EXPECT_EQ(back.data<float>()[64 + 40], 0.0f);
  EXPECT_EQ(q.to_vector(), back64.to_vector());  // printing and to_vector widen
}

// Many blocks (enough for the threads to split them), among them exact ties: a block whose max
// is 127 has d = 1, so x = k + 0.5 quantizes to roundf's k + 1 away from zero (round-to-even
// would give k or k + 1 by parity), and the float just below 0.5 to 0.
TEST(Q8_0, EveryBlockOfALargeTensorQuantizesAsGgmlsReference) {
  Tensor w = random_weight({512, 1024}, 5, 3.0);
  float* x = w.data<float>();
  x[0] = 127.0f;
  for (int j = 1; j < 32; ++j) x[j] = static_cast<float>(j - 16) + (j % 2 ? 0.5f : -0.5f);
  x[32] = -127.0f;
  x[33] = std::nextafter(0.5f, 0.0f);
  x[34] = -std::nextafter(0.5f, 0.0f);
  x[35] = 126.5f;
  x[36] = -126.5f;
  x[37] = 1.5f;
  x[38] = 2.5f;
  for (int j = 64; j < 96; ++j) x[j] = 0.0f;
  for (int j = 96; j < 128; ++j) x[j] = -1e-3f * static_cast<float>(j);
  const Tensor q = w.to(kQ8_0);
  const auto* bytes = static_cast<const uint8_t*>(q.raw_data());
  int bad = 0;
  for (int64_t b = 0; b < w.numel() / 32 && bad < 5; ++b) {
    uint16_t d;
    int8_t qs[32];
    reference_block(x + 32 * b, &d, qs);
    uint16_t stored;
    std::memcpy(&stored, bytes + 34 * b, 2);
    const bool same = stored == d && std::memcmp(bytes + 34 * b + 2, qs, 32) == 0;
    EXPECT_TRUE(same) << "block " << b;
    bad += !same;
  }
  EXPECT_EQ(static_cast<int8_t>(bytes[2 + 1]), -15) << "-14.5 rounds away from zero";
  EXPECT_EQ(static_cast<int8_t>(bytes[34 + 2 + 1]), 0) << "just below 0.5 rounds to 0";
  EXPECT_EQ(static_cast<int8_t>(bytes[34 + 2 + 6]), 3) << "2.5 rounds to 3, not to even";
  // The first block that cannot be stored is the one named, however the blocks are split.
  x[32 * 9000 + 7] = std::numeric_limits<float>::infinity();
  x[32 * 12000 + 1] = std::numeric_limits<float>::quiet_NaN();
  try {
    w.to(kQ8_0);
    FAIL() << "an Inf quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 288007 "), std::string::npos) << e.what();
  }
}

TEST(Q8_0, RefusesWhatBlocksCannotHoldByName) {
  Tensor w = random_weight({2, 32}, 2);
  w.data<float>()[37] = std::numeric_limits<float>::quiet_NaN();
  try {
    w.to(kQ8_0);
    FAIL() << "a NaN quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element 37"), std::string::npos) << e.what();
  }
  w.data<float>()[37] = 1e8f;  // d = 1e8 / 127 is beyond half's 65504
  EXPECT_THROW(w.to(kQ8_0), Error);
  EXPECT_THROW(empty({4, 48}, kQ8_0), Error);  // rows are not whole blocks
  // A block of subnormal values: 1 / d would be infinite (and its int8 conversion undefined); it
  // quantizes to a zero half scale and widens to zeros.
  Tensor tiny = full({1, 32}, 1e-39, kFloat32);
  tiny.data<float>()[3] = -5e-40f;
  EXPECT_EQ(tiny.to(kQ8_0).to(kFloat32).to_vector(), std::vector<double>(32, 0.0));
  EXPECT_THROW(random_weight({4, 48}, 3).to(kQ8_0), Error);
  Tensor q = random_weight({4, 32}, 4).to(kQ8_0);
  try {
    (void)(q + q);
    FAIL() << "an elementwise op read q8_0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
  }
}

}  // namespace test_q8_0

// The blocked weights xgrad reads from GGUF files but does not make: the k-quants (q2_k, q3_k,
// q4_k, q5_k, q6_k: autograd/detail/k_formats.hpp), llama.cpp's other 32-value blocks (q4_1, q5_0, q5_1:
// autograd/detail/legacy_formats.hpp) and its non-linear 4-bit ones (iq4_nl, iq4_xs:
// autograd/detail/iq4_formats.hpp), as test_blocks.cpp checks q8_0 and q4_0: linear, matmul and
// embedding against float64 products of the same blocks widened, on every path (a dot per row,
// register tiles, BLAS tiles, bf16 tiles under autocast), a float64 gradient check, 1 and 2
// threads. The weights are random blocks: random codes (and k-quant sub-block scales and mins)
// under finite half scales (the values' ggml widening is checked against libggml itself in
// test_gguf_dequantize.cpp).
#include <gtest/gtest.h>

#include <random>

#include "tests/blocked_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace test_read_only_blocks {

using namespace xg;

// A [rows, cols] weight of random blocks of dtype d whose values are about `scale` in size.
Tensor random_blocked_weight(Dtype d, int64_t rows, int64_t cols, uint64_t seed, float scale = 0.05f) {
  Tensor w = empty({rows, cols}, d);
  auto* p = static_cast<uint8_t*>(w.raw_data());
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < storage_bytes(d, w.numel()); ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  const auto put = [](uint8_t* at, float v) {
    const uint16_t h = float_to_half(v);
    std::memcpy(at, &h, 2);
  };
  for (int64_t b = 0; b < w.numel() / block_values(d); ++b) {
    uint8_t* blk = p + b * block_bytes(d);
    // The largest |sc c| (or |c - 16|) a block can reach, so that d top is about `scale`:
    // q4_k / q5_k: x = d sc c - dmin m with sc, m < 64 and c < 16 or 32; q6_k: d sc (c - 32), |sc| <= 128;
    // q2_k: d sc c - dmin m with sc, m < 16 and c < 4; q3_k: d (sc - 32) (c - 4) with sc < 64 and c < 8;
    // q4_1 / q5_1: x = d c + m with c < 16 or 32 (m about -d top / 2: values either side of 0); q5_0: d (c - 16);
    // iq4_nl: d L[c], |L| <= 127; iq4_xs: d (s - 32) L[c] with s < 64.
    switch (d) {
      case Dtype::Q6_K: put(blk + 208, scale * u(rng) / (128.0f * 32)); break;
      case Dtype::Q2_K:
        put(blk + 80, scale * u(rng) / (15.0f * 3));
        put(blk + 82, scale * u(rng) / 15.0f / 2);
        break;
      case Dtype::Q3_K: put(blk + 108, scale * u(rng) / (32.0f * 4)); break;
      case Dtype::Q4_K:
      case Dtype::Q5_K:
        put(blk, scale * u(rng) / (d == kQ5_K ? 63.0f * 31 : 63.0f * 15));
        put(blk + 2, scale * u(rng) / 63.0f / 2);
        break;
      case Dtype::Q5_0: put(blk, scale * u(rng) / 16); break;
      case Dtype::Q4_1:
      case Dtype::Q5_1:
        put(blk, scale * u(rng) / (d == kQ5_1 ? 31 : 15));
        put(blk + 2, -scale * u(rng) / 2);
        break;
      case Dtype::IQ4_NL: put(blk, scale * u(rng) / 127); break;
      case Dtype::IQ4_XS: put(blk, scale * u(rng) / (127.0f * 32)); break;
      default: ADD_FAILURE() << dtype_name(d); break;
    }
  }
  return w;
}

class ReadOnlyBlockedWeight : public ::testing::TestWithParam<Dtype> {};

TEST_P(ReadOnlyBlockedWeight, WidensToValuesOfTheScaleAndAcrossDtypesAlike) {
  const Tensor w = random_blocked_weight(GetParam(), 8, 512, 1);
  const Tensor f = w.to(kFloat32), d = w.to(kFloat64);
  double amax = 0;
  for (double v : d.to_vector()) amax = std::max(amax, std::fabs(v));
  EXPECT_GT(amax, 0.005);
  EXPECT_LT(amax, 0.1);
  EXPECT_TRUE(xg::test::tensors_close(f.to(kFloat64), d, 0, 0));  // float64 is the float32 values, widened
  const std::string name = dtype_name(GetParam());
  EXPECT_XG_ERROR(empty({2, 200}, GetParam()), str_cat("a ", name, " tensor stores blocks of ", block_values(GetParam()),
                                                       " along its last dim, which shape [2,200] does not hold"));
  EXPECT_XG_ERROR(f.to(GetParam()), str_cat("to(", name, "): xgrad reads ", name, " weights from GGUF files but does not make them"));
  EXPECT_XG_ERROR(w.sum(0), std::string("sum: expected a float32, float64 or bfloat16 tensor, got ") + dtype_name(GetParam()));
}

// linear against the float64 product of the widened weight, on every path: a dot per row (one or
// three rows), register tiles and BLAS tiles of 256 weight rows (pieces, some partial).
TEST_P(ReadOnlyBlockedWeight, LinearAndMatmulEqualTheProductOfTheWidenedWeight) {
  std::vector<Shape> shapes = {Shape{1, 96, 256}, Shape{3, 300, 512}, Shape{70, 600, 512}, Shape{300, 512, 768}};
  if (block_values(GetParam()) == 32)  // an odd number of blocks a row: the dot's last block alone
    shapes.insert(shapes.end(), {Shape{1, 40, 96}, Shape{2, 33, 32}, Shape{5, 17, 160}});
  for (const Shape& mnk : shapes)
    xg::test::expect_blocked_products_match_widened(random_blocked_weight(GetParam(), mnk[1], mnk[2], 10 + mnk[0]), mnk[0],
                                                    20 + mnk[0]);
}

TEST_P(ReadOnlyBlockedWeight, GradientsFlowToTheInputAndNeverToTheWeight) {
  const Tensor wq = random_blocked_weight(GetParam(), 24, 256, 5, 0.5f);
  Tensor x = xg::test::randn64({2, 3, 256}, 6).detach().requires_grad_();
  Tensor b = xg::test::randn64({24}, 7).detach().requires_grad_();
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return linear(in[0], wq, in[1]); }, {x, b});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor a = xg::test::randn64({5, 24}, 8).detach().requires_grad_();
  const Tensor wt = random_blocked_weight(GetParam(), 24, 256, 9, 0.5f);  // [n, m] blocked along m
  r = gradcheck([&](const std::vector<Tensor>& in) { return matmul(in[0], wt); }, {a});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor w = random_blocked_weight(GetParam(), 4, 256, 10);
  EXPECT_THROW(w.requires_grad_(), Error);
}

TEST_P(ReadOnlyBlockedWeight, ProductsDoNotDependOnTheThreadCount) {
  xg::test::expect_blocked_products_thread_independent(random_blocked_weight(GetParam(), 900, 512, 11), {2, 90, 240}, 12);
}

TEST_P(ReadOnlyBlockedWeight, UnderAutocastAProductRunsOnBf16Tiles) {
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "no bf16 kernels on this CPU";
  test::Bf16GemmScope on_bf16(Bf16Gemm::OneDNN);
  const Tensor wq = random_blocked_weight(GetParam(), 300, 256, 15);
  const Tensor x = xg::test::randn64({40, 256}, 16).detach().to(kFloat32);
  const Tensor w_bf = wq.to(kFloat32).to(kBFloat16).to(kFloat64), x_bf = x.to(kBFloat16).to(kFloat64);
  Tensor y;
  {
    autocast bf16;
    y = linear(x, wq);
  }
  EXPECT_TRUE(xg::test::tensors_close(y.to(kFloat64), linear(x_bf, w_bf), 1e-5, 1e-6));
  EXPECT_FALSE(xg::test::tensors_close(linear(x, wq).to(kFloat64), linear(x_bf, w_bf), 1e-5, 1e-6));
}

TEST_P(ReadOnlyBlockedWeight, EmbeddingWidensTheRowsItLooksUp) {
  const Tensor wq = random_blocked_weight(GetParam(), 10, 512, 14);
  const Tensor ids = from_vector(std::vector<int64_t>{3, 0, 9, 3}, {2, 2});
  const Tensor out = embedding(wq, ids);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 512}));
  EXPECT_TRUE(xg::test::tensors_close(out, embedding(wq.to(kFloat32), ids), 0, 0));
}

// A q5_0 and a q5_1 block written by hand, read by the layout's definition (ggml-common.h's
// block_q5_0 / block_q5_1, ggml-quants.c's dequantize_row_q5_0): value j's code is qs[j]'s low
// nibble (j < 16) or qs[j - 16]'s high one, plus 16 when bit j of the little-endian qh is set.
TEST(LegacyBlocks, TheFifthBitOfValueJIsBitJOfQh) {
  uint8_t b0[22], b1[24];
  const uint16_t d = float_to_half(0.25f), m = float_to_half(-1.5f);
  std::memcpy(b0, &d, 2);
  std::memcpy(b1, &d, 2);
  std::memcpy(b1 + 2, &m, 2);
  const uint32_t qh = (1u << 0) | (1u << 5) | (1u << 15) | (1u << 16) | (1u << 27) | (1u << 31);
  std::memcpy(b0 + 2, &qh, 4);
  std::memcpy(b1 + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) b0[6 + j] = b1[8 + j] = static_cast<uint8_t>(((15 - j) << 4) | j);  // lo j, hi 15 - j
  Tensor w0 = empty({1, 32}, kQ5_0), w1 = empty({1, 32}, kQ5_1);
  std::memcpy(w0.raw_data(), b0, 22);
  std::memcpy(w1.raw_data(), b1, 24);
  const std::vector<double> v0 = w0.to_vector(), v1 = w1.to_vector();
  for (int j = 0; j < 32; ++j) {
    const int c = (j < 16 ? j : 15 - (j - 16)) + (((qh >> j) & 1) ? 16 : 0);
    EXPECT_EQ(v0[j], 0.25 * (c - 16)) << j;
    EXPECT_EQ(v1[j], 0.25 * c - 1.5) << j;
  }
  // the one-row dot reads the same values: x = e_j picks value j
  for (int j : {0, 5, 16, 31}) {
    Tensor x = zeros({1, 32});
    x.data<float>()[j] = 1.0f;
    EXPECT_EQ(linear(x, w0).item(), v0[j]) << j;
    EXPECT_EQ(linear(x, w1).item(), v1[j]) << j;
  }
}

// An iq4_nl and an iq4_xs block written by hand, read by the layouts' definitions (ggml-common.h's
// block_iq4_nl / block_iq4_xs and kvalues_iq4nl, ggml-quants.c's dequantize_row_iq4_xs): code c
// picks level L[c]; iq4_xs's sub-block j is scaled by d (s_j - 32), s_j's low 4 bits nibble j of
// scales_l (low nibble first), its top 2 bits bits 2j and 2j + 1 of scales_h.
TEST(Iq4Blocks, CodesPickTheNonLinearLevelsAndSubBlocksTheirSixBitScales) {
  const int L[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  const uint16_t d = float_to_half(0.0625f);
  uint8_t nl[18], xs[136];
  std::memcpy(nl, &d, 2);
  std::memcpy(xs, &d, 2);
  for (int l = 0; l < 16; ++l) nl[2 + l] = static_cast<uint8_t>(((15 - l) << 4) | l);  // lo l, hi 15 - l
  const int s[8] = {0, 1, 31, 32, 33, 47, 62, 63};  // every bit of both fields in use
  uint16_t high = 0;
  for (int j = 0; j < 8; ++j) {
    high = static_cast<uint16_t>(high | ((s[j] >> 4) << (2 * j)));
    if (j % 2 == 0) xs[4 + j / 2] = static_cast<uint8_t>(s[j] & 0xF);
    else xs[4 + j / 2] = static_cast<uint8_t>(xs[4 + j / 2] | ((s[j] & 0xF) << 4));
  }
  std::memcpy(xs + 2, &high, 2);
  for (int i = 0; i < 128; ++i) xs[8 + i] = static_cast<uint8_t>(i * 37 + 11);
  Tensor wn = empty({1, 32}, kIQ4_NL), wx = empty({1, 256}, kIQ4_XS);
  std::memcpy(wn.raw_data(), nl, 18);
  std::memcpy(wx.raw_data(), xs, 136);
  const std::vector<double> vn = wn.to_vector(), vx = wx.to_vector();
  for (int j = 0; j < 32; ++j) EXPECT_EQ(vn[j], 0.0625 * L[j < 16 ? j : 15 - (j - 16)]) << j;
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = xs[8 + 16 * j + l % 16];
      EXPECT_EQ(vx[32 * j + l], 0.0625 * (s[j] - 32) * L[l < 16 ? byte & 0xF : byte >> 4]) << j << " " << l;
    }
  // the one-row dots read the same values: x = e_j picks value j
  for (int j : {0, 7, 16, 31}) {
    Tensor x = zeros({1, 32});
    x.data<float>()[j] = 1.0f;
    EXPECT_EQ(linear(x, wn).item(), vn[j]) << j;
  }
  for (int j : {0, 40, 100, 255}) {
    Tensor x = zeros({1, 256});
    x.data<float>()[j] = 1.0f;
    EXPECT_EQ(linear(x, wx).item(), vx[j]) << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ReadOnlyBlockedWeight,
                         ::testing::Values(kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kQ4_1, kQ5_0, kQ5_1, kIQ4_NL, kIQ4_XS),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(dtype_name(info.param)); });

}  // namespace test_read_only_blocks

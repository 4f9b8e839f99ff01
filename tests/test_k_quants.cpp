// The k-quant weights (q4_k, q5_k, q6_k: autograd/detail/k_formats.hpp), as test_blocks.cpp checks
// q8_0 and q4_0: linear, matmul and embedding against float64 products of the same blocks widened,
// on every path (a dot per row, register tiles, BLAS tiles, bf16 tiles under autocast), a float64
// gradient check, 1 and 2 threads. xgrad does not make k-quants, so the weights are random blocks:
// random codes, scales and mins under finite half super-scales (the values' ggml widening is
// checked against libggml itself in test_gguf_dequantize.cpp).
#include <gtest/gtest.h>

#include <random>

#include "tests/blocked_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace test_k_quants {

using namespace xg;

// A [rows, cols] weight of random k-quant blocks whose values are about `scale` in size.
Tensor random_k_weight(Dtype d, int64_t rows, int64_t cols, uint64_t seed, float scale = 0.05f) {
  Tensor w = empty({rows, cols}, d);
  auto* p = static_cast<uint8_t*>(w.raw_data());
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < storage_bytes(d, w.numel()); ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  for (int64_t b = 0; b < w.numel() / kKBlock; ++b) {
    uint8_t* blk = p + b * block_bytes(d);
    // q4_k / q5_k: x = d sc c - dmin m with sc, m < 64 and c < 16 or 32; q6_k: d sc (c - 32), |sc| <= 128
    const float top = d == kQ6_K ? 128.0f * 32 : d == kQ5_K ? 63.0f * 31 : 63.0f * 15;
    const uint16_t dh = float_to_half(scale * u(rng) / top), mh = float_to_half(scale * u(rng) / 63.0f / 2);
    if (d == kQ6_K) {
      std::memcpy(blk + 208, &dh, 2);
    } else {
      std::memcpy(blk, &dh, 2);
      std::memcpy(blk + 2, &mh, 2);
    }
  }
  return w;
}

class KQuantWeight : public ::testing::TestWithParam<Dtype> {};

TEST_P(KQuantWeight, WidensToValuesOfTheScaleAndAcrossDtypesAlike) {
  const Tensor w = random_k_weight(GetParam(), 8, 512, 1);
  const Tensor f = w.to(kFloat32), d = w.to(kFloat64);
  double amax = 0;
  for (double v : d.to_vector()) amax = std::max(amax, std::fabs(v));
  EXPECT_GT(amax, 0.005);
  EXPECT_LT(amax, 0.1);
  EXPECT_TRUE(xg::test::tensors_close(f.to(kFloat64), d, 0, 0));  // float64 is the float32 values, widened
  EXPECT_XG_ERROR(empty({2, 200}, GetParam()), std::string("a ") + dtype_name(GetParam()) +
                                                   " tensor stores blocks of 256 along its last dim, which shape [2,200] does not hold");
  EXPECT_XG_ERROR(f.to(GetParam()), "xgrad reads k-quant weights from GGUF files but does not make them");
  EXPECT_XG_ERROR(w.sum(0), std::string("sum: expected a float32, float64 or bfloat16 tensor, got ") + dtype_name(GetParam()));
}

// linear against the float64 product of the widened weight, on every path: a dot per row (one or
// three rows), register tiles and BLAS tiles of 256 weight rows (pieces, some partial).
TEST_P(KQuantWeight, LinearAndMatmulEqualTheProductOfTheWidenedWeight) {
  for (const Shape& mnk : {Shape{1, 96, 256}, Shape{3, 300, 512}, Shape{70, 600, 512}, Shape{300, 512, 768}})
    xg::test::expect_blocked_products_match_widened(random_k_weight(GetParam(), mnk[1], mnk[2], 10 + mnk[0]), mnk[0],
                                                    20 + mnk[0]);
}

TEST_P(KQuantWeight, GradientsFlowToTheInputAndNeverToTheWeight) {
  const Tensor wq = random_k_weight(GetParam(), 24, 256, 5, 0.5f);
  Tensor x = xg::test::randn64({2, 3, 256}, 6).detach().requires_grad_();
  Tensor b = xg::test::randn64({24}, 7).detach().requires_grad_();
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return linear(in[0], wq, in[1]); }, {x, b});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor a = xg::test::randn64({5, 24}, 8).detach().requires_grad_();
  const Tensor wt = random_k_weight(GetParam(), 24, 256, 9, 0.5f);  // [n, m] blocked along m
  r = gradcheck([&](const std::vector<Tensor>& in) { return matmul(in[0], wt); }, {a});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor w = random_k_weight(GetParam(), 4, 256, 10);
  EXPECT_THROW(w.requires_grad_(), Error);
}

TEST_P(KQuantWeight, ProductsDoNotDependOnTheThreadCount) {
  xg::test::expect_blocked_products_thread_independent(random_k_weight(GetParam(), 900, 512, 11), {2, 90, 240}, 12);
}

TEST_P(KQuantWeight, UnderAutocastAProductRunsOnBf16Tiles) {
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "no bf16 kernels on this CPU";
  test::Bf16GemmScope on_bf16(Bf16Gemm::OneDNN);
  const Tensor wq = random_k_weight(GetParam(), 300, 256, 15);
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

TEST_P(KQuantWeight, EmbeddingWidensTheRowsItLooksUp) {
  const Tensor wq = random_k_weight(GetParam(), 10, 512, 14);
  const Tensor ids = from_vector(std::vector<int64_t>{3, 0, 9, 3}, {2, 2});
  const Tensor out = embedding(wq, ids);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 512}));
  EXPECT_TRUE(xg::test::tensors_close(out, embedding(wq.to(kFloat32), ids), 0, 0));
}

INSTANTIATE_TEST_SUITE_P(Formats, KQuantWeight, ::testing::Values(kQ4_K, kQ5_K, kQ6_K),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(dtype_name(info.param)); });

}  // namespace test_k_quants

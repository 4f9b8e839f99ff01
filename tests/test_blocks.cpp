// The ops that read a frozen blocked weight (autograd/blocks.hpp), for each format xgrad makes
// (q8_0, q4_0 and float16): linear, matmul and embedding against float64 references computed from the same blocks
// widened, with a float64 gradient check of what flows to x, on every path (a dot per row,
// register tiles, BLAS tiles, bf16 tiles under autocast) and on 1 and 2 threads.
#include <gtest/gtest.h>

#include "tests/blocked_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace test_blocks {

using namespace xg;

Tensor random_weight(const Shape& shape, uint64_t seed, double scale = 1.0) {
  return (xg::test::randn64(shape, seed).detach() * scale).to(kFloat32);
}

class BlockedWeight : public ::testing::TestWithParam<Dtype> {};

// linear with a blocked weight against the float64 product of the widened weight, on every path:
// a dot per row (one or two rows), and tiles of 256 weight rows and columns (pieces, some partial).
TEST_P(BlockedWeight, LinearEqualsTheProductOfTheWidenedWeight) {
  // float32 products below 2^26 multiply-adds run on register tiles, larger ones on BLAS
  for (const Shape& mnk :
       {Shape{1, 96, 64}, Shape{3, 300, 96}, Shape{70, 600, 544}, Shape{5, 40, 32}, Shape{300, 512, 448}})
    xg::test::expect_blocked_products_match_widened(random_weight({mnk[1], mnk[2]}, 10 + mnk[0], 0.05).to(GetParam()),
                                                    mnk[0], 20 + mnk[0]);
}

TEST_P(BlockedWeight, GradientsFlowToTheInputAndBiasNeverToTheWeight) {
  const Tensor wq = random_weight({40, 64}, 5, 0.1).to(GetParam());
  const Tensor w64 = wq.to(kFloat64);
  Tensor x = xg::test::randn64({2, 3, 64}, 6).detach().requires_grad_();
  Tensor b = xg::test::randn64({40}, 7).detach().requires_grad_();
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return linear(in[0], wq, in[1]); }, {x, b});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor a = xg::test::randn64({5, 40}, 8).detach().requires_grad_();
  r = gradcheck([&](const std::vector<Tensor>& in) { return matmul(in[0], wq); }, {a});
  EXPECT_TRUE(r.ok) << r.message;
  // and the gradients equal those through the widened float64 weight
  Tensor g = xg::test::randn64({2, 3, 40}, 9).detach();
  linear(x, wq, b).backward(g);
  Tensor x2 = x.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  linear(x2, w64, b2).backward(g);
  EXPECT_TRUE(xg::test::tensors_close(x.grad(), x2.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(xg::test::tensors_close(b.grad(), b2.grad(), 1e-12, 1e-12));
  Tensor trainable = random_weight({40, 64}, 5).to(GetParam());
  EXPECT_THROW(trainable.requires_grad_(), Error);  // only float tensors require grad
}

TEST_P(BlockedWeight, ProductsDoNotDependOnTheThreadCount) {
  // x w^T on register tiles, then (2^26 multiply-adds and up) on BLAS
  xg::test::expect_blocked_products_thread_independent(random_weight({900, 320}, 11, 0.05).to(GetParam()), {90, 240}, 12);
}

TEST_P(BlockedWeight, UnderAutocastAProductRunsOnBf16Tiles) {
  // torch.autocast's rule for a product (both operands in bf16, float32 sums): the weight's tiles are
  // widened to bf16 (each value rounded) and x rounded, so the result is the float64 product of those
  // rounded values up to the float32 sums' rounding; a decoding step (fewer than 4 rows) keeps
  // the exact dot instead.
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "no bf16 kernels on this CPU";
  test::Bf16GemmScope on_bf16(Bf16Gemm::OneDNN);  // whether or not they beat this CPU's FMAs
  const Tensor wq = random_weight({300, 96}, 15, 0.05).to(GetParam());
  const Tensor x = random_weight({40, 96}, 16), g = random_weight({40, 300}, 17);
  const Tensor w_bf = wq.to(kFloat32).to(kBFloat16).to(kFloat64), x_bf = x.to(kBFloat16).to(kFloat64);
  const Tensor g_bf = g.to(kBFloat16).to(kFloat64);
  Tensor xr = x.clone().detach().requires_grad_();
  Tensor y;
  {
    autocast bf16;
    y = linear(xr, wq);
    y.backward(g);
  }
  EXPECT_TRUE(xg::test::tensors_close(y.to(kFloat64), linear(x_bf, w_bf), 1e-5, 1e-6));
  EXPECT_TRUE(xg::test::tensors_close(xr.grad().to(kFloat64), matmul(g_bf, w_bf), 1e-5, 1e-6));
  // and the exact float32 product differs from it by more than the sums' rounding: the path is taken
  EXPECT_FALSE(xg::test::tensors_close(linear(x, wq).to(kFloat64), linear(x_bf, w_bf), 1e-5, 1e-6));
  const Tensor row = random_weight({1, 96}, 18);
  Tensor one;
  {
    autocast bf16;
    one = linear(row, wq);
  }
  EXPECT_TRUE(xg::test::tensors_close(one.to(kFloat64), linear(row.to(kFloat64), wq.to(kFloat64)), 1e-5, 1e-6));
}

TEST_P(BlockedWeight, EmbeddingWidensTheRowsItLooksUp) {
  const Tensor wq = random_weight({10, 64}, 14).to(GetParam());
  const Tensor ids = from_vector(std::vector<int64_t>{3, 0, 9, 3}, {2, 2});
  const Tensor out = embedding(wq, ids);
  EXPECT_EQ(out.dtype(), kFloat32);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 64}));
  EXPECT_TRUE(xg::test::tensors_close(out, embedding(wq.to(kFloat32), ids), 0, 0));
  EXPECT_THROW(embedding(wq, from_vector(std::vector<int64_t>{10}, {1})), Error);
}

// float16 holds each value as the nearest half (to even on a tie), as torch's .half() rounds;
// a value past 65504 is refused by name, as are NaN and Inf.
TEST(Float16Weight, HoldsTheNearestHalfOfEachValueAndRefusesWhatItCannotHold) {
  const std::vector<double> v = {1.0, 1.0 + 1.0 / 2048, 1.0 + 3.0 / 2048, -65504.0, 6e-8, 1e-9, 3.14159265, 0.1};
  std::vector<double> row(64, 0.5);
  std::copy(v.begin(), v.end(), row.begin());
  const Tensor w = from_vector(row, {2, 32}).to(kF16);
  EXPECT_EQ(w.dtype(), kF16);
  EXPECT_EQ(storage_bytes(kF16, 64), 128u);
  const std::vector<double> back = w.to(kFloat64).to_vector();
  EXPECT_EQ(back[0], 1.0);
  EXPECT_EQ(back[1], 1.0);                 // the tie between 1 and 1 + 2^-10 goes to even
  EXPECT_EQ(back[2], 1.0 + 2.0 / 1024);    // the tie between 1 + 2^-10 and 1 + 2^-9 goes to even
  EXPECT_EQ(back[3], -65504.0);
  EXPECT_EQ(back[4], std::ldexp(1.0, -24));  // the smallest subnormal
  EXPECT_EQ(back[5], 0.0);
  EXPECT_EQ(back[6], 3.140625);
  EXPECT_EQ(back[7], 0.0999755859375);
  row[40] = 70000;
  EXPECT_XG_ERROR(from_vector(row, {2, 32}).to(kF16),
                  "to(float16): element 40 of [2,32] is 70000, which float16 cannot hold (its largest is 65504)");
  row[40] = std::nan("");
  EXPECT_XG_ERROR(from_vector(row, {2, 32}).to(kF16), "to(float16): element 40 of [2,32] is nan");
  EXPECT_XG_ERROR(add(w, w), "add: expected a float32, float64 or bfloat16 tensor, got float16");  // read, not computed on
}

INSTANTIATE_TEST_SUITE_P(Formats, BlockedWeight, ::testing::Values(kQ8_0, kQ4_0, kF16),
                         [](const ::testing::TestParamInfo<Dtype>& info) { return std::string(dtype_name(info.param)); });

}  // namespace test_blocks

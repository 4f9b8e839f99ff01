// Tests for nn/linear.cpp: Linear, Embedding, Dropout against PyTorch, gradchecks, init, errors.
#include "nn/linear.hpp"

#include <cmath>

#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using V = std::vector<Tensor>;

TEST(NnLinearTorch, Linear) {
  Linear lin(5, 4);
  test::expect_module_matches_torch("nn_linear", "linear", lin, [&](const V& x) { return lin(x[0]); });
  Linear nob(5, 4, false);
  test::expect_module_matches_torch("nn_linear", "linear_nobias", nob, [&](const V& x) { return nob(x[0]); });
}

TEST(NnLinearTorch, Embedding) {
  Embedding emb(7, 3);
  test::expect_module_matches_torch("nn_linear", "embedding", emb, [&](const V& x) { return emb(x[0]); });
  Embedding pad(7, 3, 2);
  test::expect_module_matches_torch("nn_linear", "embedding_pad", pad, [&](const V& x) { return pad(x[0]); });
}

TEST(NnLinearGradcheck, LinearAndEmbedding) {
  Linear lin(3, 2);
  lin.to(kFloat64);
  EXPECT_GRADCHECK([&](const V& v) { return lin(v[0]); }, {test::randn64({2, 4, 3}, 1), lin.weight(), lin.bias()});
  Embedding emb(5, 3);
  emb.to(kFloat64);
  Tensor ids = from_vector(std::vector<int64_t>{1, 3, 3, 0}, {2, 2});
  EXPECT_GRADCHECK([&](const V&) { return emb(ids); }, {emb.weight()});
}

TEST(NnLinear, InitFollowsPyTorchBounds) {
  manual_seed(0);
  Linear lin(100, 50);
  const double bound = 1.0 / std::sqrt(100.0);  // kaiming_uniform(a=sqrt 5) = U(+-1/sqrt(in))
  double lo = 1, hi = -1;
  for (double w : lin.weight().to_vector()) {
    lo = std::min(lo, w);
    hi = std::max(hi, w);
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.9 * bound);  // the range is actually used
  EXPECT_GT(hi, 0.9 * bound);
  for (double b : lin.bias().to_vector()) EXPECT_LE(std::abs(b), bound);
  Embedding pad(4, 3, 1);
  EXPECT_EQ(pad.weight().to_vector()[3], 0.0);  // padding row starts at zero
}

TEST(NnLinear, DropoutFollowsMode) {
  Dropout d(0.5);
  Tensor x = ones({1000});
  std::vector<double> y = d(x).to_vector();
  EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](double v) { return v == 0; }));
  d.eval();
  EXPECT_EQ(d(x).to_vector(), x.to_vector());
}

TEST(NnLinearErrors, Shapes) {
  Linear lin(5, 4);
  EXPECT_XG_ERROR(lin(ones({2, 3})), "Linear(in_features=5): expected input [..., 5], got [2,3]");
  Embedding emb(7, 3);
  EXPECT_XG_ERROR(emb(ones({2})), "Embedding: ids must be int64, got float32");
  EXPECT_XG_ERROR(Linear(0, 3), "Linear: in_features and out_features must be positive");
  EXPECT_XG_ERROR(Dropout(2.0), "Dropout: probability must be in [0, 1], got 2");
}

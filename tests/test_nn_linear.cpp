// Tests for nn/linear.cpp: Linear, Embedding, Dropout against PyTorch, gradchecks, init, errors.
#include "nn/linear.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
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

// linear_stacked runs plain Linears with one input side by side into one output (linear_cat):
// the same outputs side by side and the same gradients (float64) as the layers one by one.
TEST(NnLinear, StackedEqualsTheLayersOneByOne) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    Linear a(5, 4, bias), b(5, 3, bias), c(5, 4, bias);
    for (Linear* l : {&a, &b, &c}) l->to(kFloat64);
    Tensor x = test::randn64({2, 3, 5}, 1).requires_grad_(), g = test::randn64({2, 3, 11}, 2);
    std::vector<Tensor> params;
    for (Linear* l : {&a, &b, &c})
      for (const Tensor& p : l->parameters()) params.push_back(p);
    auto grads = [&](const Tensor& y) {
      backward({y}, {g});
      std::vector<Tensor> r = {y.detach(), x.grad()};
      for (Tensor& p : params) {
        r.push_back(p.grad());
        p.zero_grad();
      }
      x.zero_grad();
      return r;
    };
    const std::vector<Tensor> stacked = grads(linear_stacked(x, {&a, &b, &c}));
    const std::vector<Tensor> one_by_one = grads(cat({a(x), b(x), c(x)}, -1));
    for (std::size_t i = 0; i < stacked.size(); ++i)
      EXPECT_TRUE(test::tensors_close(stacked[i], one_by_one[i], 1e-14, 1e-14)) << "tensor " << i;
    EXPECT_GRADCHECK([&](const V& v) { return linear_stacked(v[0], {&a, &b}); }, {test::randn64({2, 5}, 3), a.weight(),
                                                                                  b.weight()});
  }
}

// An adapted Linear (its adapter computes the whole output), other inputs or a bias on one
// only cannot stack.
TEST(NnLinear, WhatCannotStack) {
  struct Delta : LinearAdapter {
    bool on = true;
    bool active() const override { return on; }
    Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) const override { return linear(x, w, b) * 2.0; }
  };
  Linear a(5, 4), b(5, 3), other_in(6, 3), no_bias(5, 3, false);
  EXPECT_TRUE(stackable({&a, &b}));
  EXPECT_FALSE(stackable({&a, &other_in}));
  EXPECT_FALSE(stackable({&a, &no_bias}));
  EXPECT_FALSE(stackable({}));
  auto delta = std::make_shared<Delta>();
  b.set_adapter(delta);
  EXPECT_FALSE(b.plain());
  EXPECT_FALSE(stackable({&a, &b}));
  delta->on = false;  // an inactive (disabled or merged) adapter leaves the plain product
  EXPECT_TRUE(stackable({&a, &b}));
  delta->on = true;
  EXPECT_XG_ERROR(linear_stacked(ones({2, 5}), {&a, &b}), "linear_stacked: the layers must be plain Linears");
  EXPECT_XG_ERROR(linear_stacked(ones({2, 6}), {&a}), "Linear(in_features=5): expected input [..., 5], got [2,6]");
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

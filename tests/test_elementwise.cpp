// Tests for autograd/elementwise.cpp: PyTorch values, float64 gradient checks, errors.
#include "autograd/elementwise.hpp"

#include "tests/torch_fixture.hpp"

using namespace xg;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

// A float64 leaf with values away from 0 (for log, sqrt, pow with fractional exponents).
Tensor positive64(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  Tensor t = uniform(s, 0.5, 1.5, kFloat64, &gen);
  t.requires_grad_(true);
  return t;
}

}  // namespace

TEST(ElementwiseTorch, Arithmetic) {
  expect_matches_torch("elementwise", "add", [](const V& x) { return x[0] + x[1]; });
  expect_matches_torch("elementwise", "add_bcast", [](const V& x) { return x[0] + x[1]; });
  expect_matches_torch("elementwise", "sub_bcast", [](const V& x) { return x[0] - x[1]; });
  expect_matches_torch("elementwise", "mul_bcast", [](const V& x) { return x[0] * x[1]; });
  expect_matches_torch("elementwise", "div_bcast", [](const V& x) { return x[0] / x[1]; });
  expect_matches_torch("elementwise", "scalar_ops", [](const V& x) {
    const Tensor& a = x[0];
    return (2.0 - a) * 3.0 / 4.0 + a / 2.0 - 1.5 / (a * a + 1.0);
  });
  expect_matches_torch("elementwise", "neg", [](const V& x) { return -x[0]; });
  expect_matches_torch("elementwise", "pow_scalar", [](const V& x) { return pow(x[0], 3.0) + pow(x[0], 2.0); });
  expect_matches_torch("elementwise", "pow_frac", [](const V& x) { return pow(x[0], 1.5); });
  expect_matches_torch("elementwise", "pow_tensor", [](const V& x) { return pow(x[0], x[1]); });
}

TEST(ElementwiseTorch, Math) {
  expect_matches_torch("elementwise", "exp", [](const V& x) { return exp(x[0]); });
  expect_matches_torch("elementwise", "log", [](const V& x) { return log(x[0]); });
  expect_matches_torch("elementwise", "sqrt", [](const V& x) { return sqrt(x[0]); });
  expect_matches_torch("elementwise", "rsqrt", [](const V& x) { return rsqrt(x[0]); });
  expect_matches_torch("elementwise", "abs", [](const V& x) { return abs(x[0]); });
  expect_matches_torch("elementwise", "tanh", [](const V& x) { return tanh(x[0]); });
  expect_matches_torch("elementwise", "sigmoid", [](const V& x) { return sigmoid(x[0]); });
  expect_matches_torch("elementwise", "logsigmoid", [](const V& x) { return logsigmoid(x[0]); });
  expect_matches_torch("elementwise", "softplus", [](const V& x) { return softplus(x[0]); });
  expect_matches_torch("elementwise", "softplus_beta", [](const V& x) { return softplus(x[0], 2.0, 5.0); });
}

TEST(ElementwiseTorch, Activations) {
  expect_matches_torch("elementwise", "relu", [](const V& x) { return relu(x[0]); });
  expect_matches_torch("elementwise", "silu", [](const V& x) { return silu(x[0]); });
  expect_matches_torch("elementwise", "gelu_erf", [](const V& x) { return gelu(x[0]); });
  expect_matches_torch("elementwise", "gelu_tanh", [](const V& x) { return gelu(x[0], GeluApprox::Tanh); });
}

TEST(ElementwiseTorch, ClampMinMaxSelect) {
  expect_matches_torch("elementwise", "clamp", [](const V& x) { return clamp(x[0], -0.5, 0.7); });
  expect_matches_torch("elementwise", "clamp_min", [](const V& x) { return clamp_min(x[0], 0.1); });
  expect_matches_torch("elementwise", "clamp_max", [](const V& x) { return clamp_max(x[0], 0.1); });
  expect_matches_torch("elementwise", "minimum", [](const V& x) { return minimum(x[0], x[1]); });
  expect_matches_torch("elementwise", "maximum", [](const V& x) { return maximum(x[0], x[1]); });
  expect_matches_torch("elementwise", "maximum_bcast", [](const V& x) { return maximum(x[0], x[1]); });
  expect_matches_torch("elementwise", "where", [](const V& x) { return where(x[0], x[1], x[2]); });
  expect_matches_torch("elementwise", "masked_fill", [](const V& x) { return masked_fill(x[0], x[1], -1e9); });
  expect_matches_torch("elementwise", "eq", [](const V& x) { return eq(x[0], x[1]); });
  expect_matches_torch("elementwise", "gt", [](const V& x) { return gt(x[0], x[1]); });
}

TEST(ElementwiseGradcheck, Binary) {
  EXPECT_GRADCHECK([](const V& x) { return x[0] + x[1]; }, {randn64({2, 3}, 1), randn64({2, 3}, 2)});
  EXPECT_GRADCHECK([](const V& x) { return x[0] + x[1]; }, {randn64({4, 1, 3}, 1), randn64({2, 1}, 2)});
  EXPECT_GRADCHECK([](const V& x) { return x[0] - x[1]; }, {randn64({3}, 3), randn64({2, 3}, 4)});
  EXPECT_GRADCHECK([](const V& x) { return x[0] * x[1]; }, {randn64({2, 3, 4}, 5), randn64({3, 1}, 6)});
  EXPECT_GRADCHECK([](const V& x) { return x[0] / x[1]; }, {randn64({2, 3}, 7), positive64({2, 1}, 8)});
  EXPECT_GRADCHECK([](const V& x) { return x[0] * x[0]; }, {randn64({3}, 9)});  // repeated input
  EXPECT_GRADCHECK([](const V& x) { return pow(x[0], x[1]); }, {positive64({2, 3}, 10), randn64({3}, 11)});
  EXPECT_GRADCHECK([](const V& x) { return minimum(x[0], x[1]); }, {randn64({2, 3}, 12), randn64({3}, 13)});
  EXPECT_GRADCHECK([](const V& x) { return maximum(x[0], x[1]); }, {randn64({2, 3}, 14), randn64({2, 1}, 15)});
  EXPECT_GRADCHECK([](const V& x) { return 2.0 - x[0] * 3.0 + 1.0 / x[1]; },
                   {randn64({2, 2}, 16), positive64({2, 2}, 17)});
}

TEST(ElementwiseGradcheck, Unary) {
  const Tensor x = randn64({3, 4}, 20);
  const Tensor p = positive64({3, 4}, 21);
  EXPECT_GRADCHECK([](const V& v) { return -v[0]; }, {x});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], 3.0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return pow(v[0], -0.5); }, {p});
  EXPECT_GRADCHECK([](const V& v) { return exp(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return log(v[0]); }, {p});
  EXPECT_GRADCHECK([](const V& v) { return sqrt(v[0]); }, {p});
  EXPECT_GRADCHECK([](const V& v) { return rsqrt(v[0]); }, {p});
  EXPECT_GRADCHECK([](const V& v) { return abs(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return tanh(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return sigmoid(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return logsigmoid(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return softplus(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return softplus(v[0], 2.0, 1.0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return relu(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return silu(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return gelu(v[0]); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return gelu(v[0], GeluApprox::Tanh); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return clamp(v[0], -0.5, 0.5); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return clamp_min(v[0], 0.1); }, {x});
}

TEST(ElementwiseGradcheck, Selection) {
  Generator gen(3);
  Tensor cond = rand({3, 4}, kFloat64, &gen) > 0.5;
  EXPECT_GRADCHECK([cond](const V& v) { return where(cond, v[0], v[1]); }, {randn64({3, 4}, 1), randn64({1, 4}, 2)});
  Tensor mask = rand({1, 4}, kFloat64, &gen) > 0.5;
  EXPECT_GRADCHECK([mask](const V& v) { return masked_fill(v[0], mask, -3.0); }, {randn64({3, 4}, 3)});
}

TEST(Elementwise, ScalarTakesTensorDtype) {
  Tensor a = ones({2}, kFloat64);
  EXPECT_EQ((a * 2.5).dtype(), kFloat64);
  EXPECT_EQ((2.5 + a).to_vector(), (std::vector<double>{3.5, 3.5}));
}

TEST(Elementwise, StableSigmoidFamilyAtExtremes) {
  Tensor x = tensor({-1000.0, 1000.0});
  EXPECT_EQ(sigmoid(x).to_vector(), (std::vector<double>{0.0, 1.0}));
  std::vector<double> ls = logsigmoid(x).to_vector();
  EXPECT_FLOAT_EQ(ls[0], -1000.0f);
  EXPECT_EQ(ls[1], 0.0);
  EXPECT_EQ(softplus(x).to_vector(), (std::vector<double>{0.0, 1000.0}));
}

// gelu's negative tail in float32, forward and backward, against float64 of the same inputs:
// Phi(x) as (1 + erf(x/sqrt2))/2 cancels there (erf(-5/sqrt2) = -0.9999994) and was off by up to
// 10% at x = -5; from erfc it keeps float32's precision.
TEST(Elementwise, GeluKeepsItsNegativeTailInFloat32) {
  const Tensor x64 = tensor({-3.0, -4.0, -5.0, -6.5, -8.0}, kFloat64);
  Tensor x = x64.to(kFloat32).requires_grad_(), xr = x64.clone().requires_grad_();
  Tensor y = gelu(x), yr = gelu(xr);
  y.sum().backward();
  yr.sum().backward();
  const std::vector<double> a = y.to_vector(), e = yr.to_vector(), ga = x.grad().to_vector(), ge = xr.grad().to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], e[i], 1e-5 * std::fabs(e[i])) << "gelu(" << x64.to_vector()[i] << ")";
    EXPECT_NEAR(ga[i], ge[i], 1e-5 * std::fabs(ge[i])) << "gelu'(" << x64.to_vector()[i] << ")";
  }
}

TEST(Elementwise, InPlaceHelpers) {
  Tensor a = ones({2, 3});
  add_(a, tensor({1.0, 2.0, 3.0}), 2.0);
  EXPECT_EQ(a.to_vector(), (std::vector<double>{3, 5, 7, 3, 5, 7}));
  mul_(a, 0.5);
  EXPECT_EQ(a.to_vector(), (std::vector<double>{1.5, 2.5, 3.5, 1.5, 2.5, 3.5}));
}

TEST(ElementwiseErrors, Messages) {
  EXPECT_XG_ERROR(add(ones({2, 3}), ones({4})), "add: shapes [2,3] and [4] cannot be broadcast (dim -1: 3 vs 4)");
  EXPECT_XG_ERROR(mul(ones({2}), ones({2}, kFloat64)), "mul: dtype mismatch, float32 [2] and float64 [2]");
  EXPECT_XG_ERROR(exp(ones({2}, kInt64)), "exp: expected a float32, float64 or bfloat16 tensor, got int64");
  EXPECT_XG_ERROR(where(ones({2}), ones({2}), ones({2})), "where: condition must be a bool tensor, got float32");
  EXPECT_XG_ERROR(masked_fill(ones({3}), ones({2, 3}) > 0.0, 1.0), "does not broadcast to the input's shape [3]");
  EXPECT_XG_ERROR(masked_fill(ones({3}), ones({3}), 1.0), "masked_fill: mask must be a bool tensor, got float32");
  EXPECT_XG_ERROR(clamp(ones({2}), kNoBound, kNoBound), "clamp: at least one of min and max");
}

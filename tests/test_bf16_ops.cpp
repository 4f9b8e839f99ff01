// Every op that reads bfloat16 tensors, besides the products (test_bf16.cpp), against PyTorch
// 1.13's own bf16 CPU kernels (tests/fixtures/gen_bf16_ops.py) and against float64 of the same
// rounded inputs: the output and the gradient of each input, from one bf16 upstream.
//
// xgrad reads bf16, computes in float32 and rounds each result once. So do most of torch's
// kernels, and there the two agree to the bit or within one bf16 ulp (a float32 result on the
// other side of a rounding boundary). Where torch's formula rounds several times (a gradient
// such as div's -g a / b^2, written as bf16 ops; transformers' RMS norm, rounded before the
// weight), they can be further apart; then float64 decides: xgrad must be within one ulp of
// the exact value, or no further from it than torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/torch_fixture.hpp"

namespace bf16_ops_tests {

using namespace xg;
using xg::test::fixture;

// The bf16 spacing at |v| (subnormals: the smallest normal's).
double ulp_at(double v) {
  const double a = std::max(std::fabs(v), 1.1754943508222875e-38);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

struct OpCase {
  const char* name;
  int inputs;
  std::function<Tensor(const std::vector<Tensor>&)> op;
  // Sums over a row or a tensor (reductions, norms, softmax's gradients): an element's error
  // is weighed against one ulp of the largest |value| as well as its own, since a sum that
  // cancels to near zero keeps the rounding of its terms.
  bool row_sums = false;
};

const std::vector<OpCase>& cases() {
  using V = std::vector<Tensor>;
  static const std::vector<OpCase> all = {
      {"add", 2, [](const V& x) { return add(x[0], x[1]); }},
      {"add_broadcast", 2, [](const V& x) { return add(x[0], x[1]); }, true},
      {"sub", 2, [](const V& x) { return sub(x[0], x[1]); }},
      {"mul", 2, [](const V& x) { return mul(x[0], x[1]); }},
      {"mul_broadcast", 2, [](const V& x) { return mul(x[0], x[1]); }, true},
      {"div", 2, [](const V& x) { return div(x[0], x[1]); }},
      {"neg", 1, [](const V& x) { return neg(x[0]); }},
      {"pow", 1, [](const V& x) { return pow(x[0], 2.5); }},
      {"exp", 1, [](const V& x) { return exp(x[0]); }},
      {"log", 1, [](const V& x) { return log(x[0]); }},
      {"sqrt", 1, [](const V& x) { return sqrt(x[0]); }},
      {"rsqrt", 1, [](const V& x) { return rsqrt(x[0]); }},
      {"abs", 1, [](const V& x) { return abs(x[0]); }},
      {"tanh", 1, [](const V& x) { return tanh(x[0]); }},
      {"sigmoid", 1, [](const V& x) { return sigmoid(x[0]); }},
      {"logsigmoid", 1, [](const V& x) { return logsigmoid(x[0]); }},
      {"softplus", 1, [](const V& x) { return softplus(x[0], 2.0, 5.0); }},
      {"relu", 1, [](const V& x) { return relu(x[0]); }},
      {"silu", 1, [](const V& x) { return silu(x[0]); }},
      {"swiglu", 2, [](const V& x) { return swiglu(x[0], x[1]); }},
      {"gelu", 1, [](const V& x) { return gelu(x[0]); }},
      {"gelu_tanh", 1, [](const V& x) { return gelu(x[0], GeluApprox::Tanh); }},
      {"clamp", 1, [](const V& x) { return clamp(x[0], -0.5, 0.75); }},
      {"minimum", 2, [](const V& x) { return minimum(x[0], x[1]); }},
      {"maximum", 2, [](const V& x) { return maximum(x[0], x[1]); }},
      {"where", 3, [](const V& x) { return where(x[0], x[1], x[2]); }},
      {"masked_fill", 2, [](const V& x) { return masked_fill(x[0], x[1], -2.0); }},
      {"embedding", 2, [](const V& x) { return embedding(x[0], x[1]); }, true},
      {"index_select", 2, [](const V& x) { return index_select(x[0], 0, x[1]); }, true},
      {"gather", 2, [](const V& x) { return gather(x[0], 1, x[1]); }, true},
      {"cat", 2, [](const V& x) { return cat({x[0], x[1]}, 1); }},
      {"expand", 1, [](const V& x) { return expand(x[0], {6, 37}); }, true},
      {"transpose", 1, [](const V& x) { return transpose(x[0], 0, 1); }},
      {"sum_all", 1, [](const V& x) { return x[0].sum(); }, true},
      {"sum_rows", 1, [](const V& x) { return x[0].sum(1); }, true},
      {"mean_rows", 1, [](const V& x) { return x[0].mean(1); }, true},
      {"mean_cols", 1, [](const V& x) { return x[0].mean(0, true); }, true},
      {"var_rows", 1, [](const V& x) { return var(x[0], {1}); }, true},
      {"softmax", 1, [](const V& x) { return softmax(x[0], -1); }, true},
      {"log_softmax", 1, [](const V& x) { return log_softmax(x[0], 0); }, true},
      {"layer_norm", 3, [](const V& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }, true},
      {"rms_norm", 2, [](const V& x) { return rms_norm(x[0], x[1], 1e-6); }, true},
  };
  return all;
}

// The case's inputs from the fixture in `dtype` (bool masks and int64 indices as they are),
// each float one a leaf that requires grad.
std::vector<Tensor> inputs(const TensorMap& fx, const OpCase& c, Dtype dtype) {
  std::vector<Tensor> xs;
  for (int i = 0; i < c.inputs; ++i) {
    const Tensor& t = fx.at(std::string(c.name) + ".in" + std::to_string(i));
    xs.push_back(t.dtype() == kBool || t.dtype() == kInt64 ? t : t.to(dtype).requires_grad_());
  }
  return xs;
}

// Element by element: xgrad's bf16 result `ours` against torch's bf16 result and the float64
// one. Fails, naming the element, where ours is more than `torch_ulps` from torch's and, at
// the same time, more than one ulp from float64 and further from it than torch's.
::testing::AssertionResult agrees(const Tensor& ours, const Tensor& torch, const Tensor& exact, bool row_sums,
                                  double torch_ulps) {
  if (ours.dtype() != kBFloat16) return ::testing::AssertionFailure() << "dtype " << dtype_name(ours.dtype());
  if (ours.shape() != torch.shape()) return ::testing::AssertionFailure() << "shape differs from torch's";
  const std::vector<double> o = ours.to_vector(), t = torch.to_vector(), e = exact.to_vector();
  double big = 0;
  for (double v : e) big = std::max(big, std::fabs(v));
  for (std::size_t i = 0; i < o.size(); ++i) {
    const double unit = row_sums ? std::max(ulp_at(e[i]), ulp_at(big)) : ulp_at(e[i]);
    const double from_torch = std::fabs(o[i] - t[i]), err = std::fabs(o[i] - e[i]), torch_err = std::fabs(t[i] - e[i]);
    if (from_torch <= torch_ulps * unit) continue;
    if (err <= unit || err <= torch_err) continue;
    return ::testing::AssertionFailure() << "element " << i << ": xgrad " << o[i] << ", torch " << t[i] << ", float64 "
                                         << e[i] << " (one bf16 ulp: " << unit << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(Bf16Ops, EveryOpThatReadsBf16MatchesTorchsBf16KernelsAndFloat64) {
  const TensorMap& fx = fixture("bf16_ops");
  for (const OpCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const std::string key = c.name;
    std::vector<Tensor> x = inputs(fx, c, kBFloat16), x64 = inputs(fx, c, kFloat64);
    const Tensor up = fx.at(key + ".upstream");
    Tensor y;
    try {  // an op that refuses bf16 fails here by name, and the other cases still run
      y = c.op(x);
      y.backward(up.to(kBFloat16));
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    Tensor y64 = c.op(x64);
    y64.backward(up.to(kFloat64));
    // The forward rounds a float32 result once: within one ulp of torch's, which does the same.
    EXPECT_TRUE(agrees(y, fx.at(key + ".out"), y64, c.row_sums, 1.0)) << "output";
    for (int i = 0; i < c.inputs; ++i) {
      if (x[i].dtype() == kBool || x[i].dtype() == kInt64) continue;
      SCOPED_TRACE("gradient of input " + std::to_string(i));
      ASSERT_TRUE(x[i].grad().defined());
      EXPECT_TRUE(agrees(x[i].grad(), fx.at(key + ".grad" + std::to_string(i)), x64[i].grad(), c.row_sums, 1.0));
    }
  }
}

// The fixture covers what the tests above run, and the test must be able to fail: a result off
// by two ulps where torch and float64 agree is caught.
TEST(Bf16Ops, AResultTwoUlpsOffIsCaught) {
  const TensorMap& fx = fixture("bf16_ops");
  for (const OpCase& c : cases()) EXPECT_TRUE(fx.count(std::string(c.name) + ".out")) << c.name;
  const Tensor torch = fx.at("exp.out").to(kBFloat16), exact = torch.to(kFloat64);
  std::vector<double> v = torch.to_vector();
  v[3] += 2 * ulp_at(v[3]);
  const Tensor off = from_vector(v, torch.shape(), kBFloat16);
  EXPECT_FALSE(agrees(off, torch, exact, false, 1.0));
  EXPECT_TRUE(agrees(torch, torch, exact, false, 1.0));
}

}  // namespace bf16_ops_tests

// Tests for autograd/gradcheck.cpp: it passes correct gradients and catches wrong ones.
#include "autograd/gradcheck.hpp"

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using V = std::vector<Tensor>;

namespace {

// y = x * 3 with a deliberately wrong backward (2 instead of 3).
Tensor wrong_triple(const Tensor& x) {
  Tensor out = x.detach().clone();
  mul_(out, 3.0);
  return record(out, {x}, "wrong_triple", [](const Tensor& g, const Tensor&, const V&) { return V{g * 2.0}; });
}

// y = x^T for a 2x2 x, but backward forgets to transpose: invisible with a sum() upstream.
Tensor wrong_transpose(const Tensor& x) {
  const double* p = x.data<double>();
  Tensor out = from_vector({p[0], p[2], p[1], p[3]}, {2, 2}, kFloat64);
  return record(out, {x}, "wrong_transpose", [](const Tensor& g, const Tensor&, const V&) { return V{g}; });
}

}  // namespace

TEST(Gradcheck, PassesACorrectGradient) {
  EXPECT_GRADCHECK([](const V& v) { return v[0] * v[0] * 0.5 + exp(v[1]) * v[0]; },
                   {test::randn64({3}, 1), test::randn64({3}, 2)});
}

TEST(Gradcheck, CatchesAWrongGradientAndReportsIt) {
  GradcheckResult r = gradcheck([](const V& v) { return wrong_triple(v[0]); }, {test::randn64({4}, 3)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("input 0 of shape [4], flat index 0"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("analytic"), std::string::npos);
}

TEST(Gradcheck, RandomUpstreamCatchesATransposedGradient) {
  GradcheckResult r = gradcheck([](const V& v) { return wrong_transpose(v[0]); }, {test::randn64({2, 2}, 4)});
  EXPECT_FALSE(r.ok) << "a transposed gradient went unnoticed";
}

TEST(Gradcheck, LeavesNonGradInputsAlone) {
  Tensor c = tensor({1.0, 2.0}, kFloat64);  // a constant: not perturbed, not checked
  EXPECT_GRADCHECK([](const V& v) { return v[0] * v[1]; }, {test::randn64({2}, 5), c});
}

TEST(GradcheckErrors, NeedsFloat64) {
  EXPECT_XG_ERROR(gradcheck([](const V& v) { return v[0] * 2.0; }, {ones({2}).requires_grad_()}),
                  "gradcheck: input 0 is float32; central differences need float64 inputs");
  EXPECT_XG_ERROR(gradcheck([](const V& v) { return v[0] * 2.0; }, {ones({2}, kFloat64)}),
                  "gradcheck: no input requires grad");
}

// autograd/swiglu.cpp: the fused silu(gate) * up matches PyTorch (values and both input
// gradients, float32 and float64), passes a float64 gradient check, equals the two-op
// composite on the large parallel path, and names the shapes it cannot take.
#include "autograd/swiglu.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using xg::test::expect_matches_torch;
using xg::test::randn64;
using V = std::vector<Tensor>;

TEST(SwigluTorch, MatchesSiluTimesUp) {
  expect_matches_torch("swiglu", "small", [](const V& x) { return swiglu(x[0], x[1]); });
  expect_matches_torch("swiglu", "saturated", [](const V& x) { return swiglu(x[0], x[1]); });
}

TEST(Swiglu, Gradcheck) {
  // 37 elements: vector batches and a scalar tail.
  EXPECT_GRADCHECK([](const V& x) { return swiglu(x[0], x[1]); }, {randn64({37}, 1), randn64({37}, 2)});
  EXPECT_GRADCHECK([](const V& x) { return swiglu(x[0], x[0]); }, {randn64({2, 5}, 3)});  // one input twice
}

TEST(Swiglu, LargeEqualsTheTwoOpComposite) {
  // 2^16 + 3 elements: the parallel chunks and a ragged end.
  Generator gen(4);
  Tensor gate = (randn({65539}, kFloat32, &gen) * 4.0).detach().requires_grad_();
  Tensor up = randn({65539}, kFloat32, &gen).requires_grad_();
  Tensor g = randn({65539}, kFloat32, &gen);
  swiglu(gate, up).backward(g);
  const Tensor fused = swiglu(gate, up), dgate = gate.grad(), dup = up.grad();
  gate.zero_grad();
  up.zero_grad();
  const Tensor composite = silu(gate) * up;
  composite.backward(g);
  auto close = [](const Tensor& a, const Tensor& b, const char* what) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float x = a.data<float>()[i], y = b.data<float>()[i];
      ASSERT_NEAR(x, y, 1e-6f + 1e-5f * std::abs(y)) << what << " at " << i;
    }
  };
  close(fused, composite, "value");
  close(dgate, gate.grad(), "d gate");
  close(dup, up.grad(), "d up");
}

TEST(Swiglu, BadInputsNameTheShapes) {
  EXPECT_XG_ERROR(swiglu(zeros({2, 3}), zeros({3, 2})),
                  "swiglu: gate and up must have the same shape and dtype, got float32 [2,3] and float32 [3,2]");
  EXPECT_XG_ERROR(swiglu(zeros({2}), zeros({2}, kFloat64)), "got float32 [2] and float64 [2]");
  EXPECT_XG_ERROR(swiglu(zeros({2}, kInt64), zeros({2}, kInt64)), "swiglu");
}

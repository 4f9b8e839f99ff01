// Tests for losses/linear_token_logprobs.cpp: per-token log-probs of the head's linear a block
// of rows at a time equal token_logprobs(linear(h, W)) in value and gradients (frozen head and
// trained head), gradient-checked, for float32 heads in bf16 and q8_0 too.
#include "autograd/gradcheck.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "losses/linear_token_logprobs.hpp"
#include "finetune/objectives.hpp"
#include "losses/logprobs.hpp"
#include "nn/decoder.hpp"
#include "tests/head_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace linear_logprobs_tests {

using namespace xg;
using namespace xg::losses;

void expect_near(const Tensor& a, const Tensor& b, double tol) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << i;
}

// Per-token upstream gradients, as DPO's and GRPO's sums weigh the tokens.
Tensor upstream(const Shape& s) { return test::randn64(s, 31); }

TEST(LossesLinearTokenLogprobs, EqualsTheHeadThenTokenLogprobsInBlocksOfAnySize) {
  const Tensor targets = tensor_from_ints({3, -100, 0, 6, 2, 5, 1, 8, -100, 4}, {2, 5}, kInt64);
  for (bool head_trains : {false, true})
    for (int64_t block : {1, 3, 10, 0}) {
      SCOPED_TRACE(::testing::Message() << "head trains " << head_trains << ", block " << block);
      Tensor h1 = test::randn64({2, 5, 4}, 21).requires_grad_(), w1 = test::randn64({9, 4}, 22).requires_grad_(head_trains);
      Tensor h2 = h1.detach().clone().requires_grad_(), w2 = w1.detach().clone().requires_grad_(head_trains);
      const Tensor a = linear_token_logprobs(h1, w1, targets, -100, block);
      const Tensor b = token_logprobs(linear(h2, w2), targets);
      ASSERT_EQ(a.shape(), (Shape{2, 5}));
      expect_near(a, b, 1e-12);
      EXPECT_EQ(a.to_vector()[1], 0.0) << "an ignored target's log-prob is 0";
      const Tensor g = upstream({2, 5});
      a.backward(g);
      b.backward(g);
      expect_near(h1.grad(), h2.grad(), 1e-12);
      if (head_trains) expect_near(w1.grad(), w2.grad(), 1e-12);
      else EXPECT_FALSE(w1.grad().defined());
    }
}

// PPO's tempered log-probs, log softmax(h W^T / T), go through the head as (h / T) W^T.
TEST(LossesLinearTokenLogprobs, ScaledRowsAreATemperature) {
  const Tensor targets = tensor_from_ints({2, 0, 5, -100}, {4}, kInt64);
  Tensor h1 = test::randn64({4, 3}, 25).requires_grad_(), h2 = h1.detach().clone().requires_grad_();
  const Tensor w = test::randn64({6, 3}, 26);
  const Tensor a = linear_token_logprobs(h1 * (1.0 / 0.7), w, targets);
  const Tensor b = token_logprobs(linear(h2, w) * (1.0 / 0.7), targets);
  expect_near(a, b, 1e-12);
  const Tensor g = upstream({4});
  a.backward(g);
  b.backward(g);
  expect_near(h1.grad(), h2.grad(), 1e-12);
}

TEST(LossesLinearTokenLogprobs, GradientChecksWithAFrozenAndATrainedHead) {
  const Tensor targets = tensor_from_ints({1, 0, -100, 4, 2}, {5}, kInt64);
  Tensor h = test::randn64({5, 3}, 23).requires_grad_(), w = test::randn64({6, 3}, 24).requires_grad_();
  auto f = [&](const std::vector<Tensor>& x) { return sum(linear_token_logprobs(x[0], x[1], targets, -100, 2) * upstream({5})); };
  EXPECT_TRUE(gradcheck(f, {h, w}));
  const Tensor frozen = w.detach();
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return f({x[0], frozen}); }, {h}));
}

// The products follow autocast and the weight's storage as linear's do: float32 rows against a
// bf16 or q8_0 head give token_logprobs of the same linear, gradients too.
TEST(LossesLinearTokenLogprobs, LowPrecisionHeadsGiveWhatTheirLinearGives) {
  Generator gen(5);
  const Tensor w32 = randn({40, 32}, kFloat32, &gen), h32 = randn({6, 32}, kFloat32, &gen);
  const Tensor targets = tensor_from_ints({0, 39, 7, -100, 21, 3}, {6}, kInt64);
  for (Dtype d : {kBFloat16, kQ8_0}) {
    SCOPED_TRACE(dtype_name(d));
    const Tensor w = w32.to(d);
    Tensor h1 = h32.detach().clone().requires_grad_(), h2 = h32.detach().clone().requires_grad_();
    const Tensor a = linear_token_logprobs(h1, w, targets, -100, 4);
    const Tensor b = token_logprobs(linear(h2, w), targets);
    expect_near(a, b, 1e-5);
    const Tensor g = upstream({6}).to(kFloat32);
    a.backward(g);
    b.backward(g);
    // q8_0's products run in float32 on the widened tiles; bf16's round their float32 operand,
    // here (softmax - onehot) before the upstream gradient scales it, there the scaled rows:
    // the same bf16 rounding (2^-9 relative) in another place.
    expect_near(h1.grad(), h2.grad(), d == kQ8_0 ? 1e-5 : 1e-2);
  }
}

TEST(LossesLinearTokenLogprobs, ShapesAreCheckedByName) {
  try {
    linear_token_logprobs(ones({4, 3}), ones({6, 3}), tensor_from_ints({0, 1, 2}, {3}, kInt64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "linear_token_logprobs: targets must be int64 [4] (h's shape without its last dim), got int64 [3]");
  }
  try {
    linear_token_logprobs(ones({4, 3}), ones({6, 3}), tensor_from_ints({0, 1, 2, 6}, {4}, kInt64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_token_logprobs"), std::string::npos) << e.what();
  }
}

// DPO's, GRPO's and RLOO's per-token log-probs of a model (finetune::model_token_logprobs) equal
// token_logprobs on its logits, values and every parameter's gradient, for an untied head and
// a tied one, padded rows and packed ones.
TEST(LossesLinearTokenLogprobs, AModelsLogprobsFromItsHiddenStatesEqualThoseOfItsLogits) {
  for (bool tied : {false, true})
    for (bool packed : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tied " << tied << ", packed " << packed);
      manual_seed(9);
      nn::DecoderLM model(test::small_head_lm(tied));
      const Tensor ids = randint(0, 37, {3, 9});
      const Tensor pos = packed ? tensor_from_ints({0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 0, 1, 2,
                                                    3, 4, 5},
                                                   {3, 9}, kInt64)
                                : Tensor();
      Tensor targets = losses::shift_labels(ids);
      targets = where(gt(randn({3, 9}), full({}, 1.0)), full({3, 9}, -100, kInt64), targets);  // some ignored
      const Tensor g = upstream({3, 9}).to(kFloat32);
      ASSERT_TRUE(model.plain_head_weight().defined());
      const Tensor a = losses::token_logprobs(packed ? model.forward_packed(ids, pos) : model(ids), targets);
      a.backward(g);
      const std::vector<std::vector<double>> ga = test::parameter_grads(model);
      model.zero_grad();
      const Tensor b = finetune::model_token_logprobs(model, ids, pos, targets);
      b.backward(g);
      expect_near(b, a, 1e-5);
      test::expect_parameter_grads_near(model, ga);
    }
}

}  // namespace linear_logprobs_tests

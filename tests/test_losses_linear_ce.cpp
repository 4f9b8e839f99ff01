// Tests for losses/linear_cross_entropy.cpp: the head's linear and cross-entropy a block of
// rows at a time equals cross_entropy(linear(h, W)) in value and gradients, gradient-checked.
#include "autograd/gradcheck.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "losses/cross_entropy.hpp"
#include "losses/linear_cross_entropy.hpp"
#include "losses/sft.hpp"
#include "nn/decoder.hpp"
#include "tests/head_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace linear_ce_tests {

using namespace xg;
using namespace xg::losses;

void expect_near(const Tensor& a, const Tensor& b, double tol) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol) << i;
}

TEST(LossesLinearCrossEntropy, EqualsTheHeadThenCrossEntropyInBlocksOfAnySize) {
  const Tensor targets = tensor_from_ints({3, -100, 0, 6, 2, 5, 1}, {7}, kInt64);
  for (Reduction red : {Reduction::Mean, Reduction::Sum})
    for (int64_t block : {1, 2, 3, 7, 0}) {
      Tensor h1 = test::randn64({7, 5}, 21).requires_grad_(), w1 = test::randn64({9, 5}, 22).requires_grad_();
      Tensor h2 = h1.detach().clone().requires_grad_(), w2 = w1.detach().clone().requires_grad_();
      Tensor a = linear_cross_entropy(h1, w1, targets, -100, red, block);
      Tensor b = cross_entropy(linear(h2, w2), targets, -100, red);
      EXPECT_NEAR(a.item(), b.item(), 1e-12) << block;
      (a * 1.7).backward();
      (b * 1.7).backward();
      expect_near(h1.grad(), h2.grad(), 1e-12);
      expect_near(w1.grad(), w2.grad(), 1e-12);
    }
}

TEST(LossesLinearCrossEntropy, GradientChecksAndAFrozenHeadGetsNone) {
  const Tensor targets = tensor_from_ints({1, 0, -100, 4, 2}, {5}, kInt64);
  Tensor h = test::randn64({5, 3}, 23).requires_grad_(), w = test::randn64({6, 3}, 24).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& x) { return linear_cross_entropy(x[0], x[1], targets, -100, Reduction::Mean, 2); },
                        {h, w}));
  Tensor frozen = w.detach();
  Tensor h3 = h.detach().clone().requires_grad_();
  linear_cross_entropy(h3, frozen, targets, -100, Reduction::Mean, 2).backward();
  EXPECT_TRUE(h3.grad().defined());
  EXPECT_FALSE(frozen.grad().defined());
}

TEST(LossesLinearCrossEntropy, ShapesAreCheckedByName) {
  try {
    linear_cross_entropy(ones({4, 3}), ones({6, 2}), tensor_from_ints({0, 1, 2, 3}, {4}, kInt64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "linear_cross_entropy: weight [6,2] must be [V, C] with C = 3 (h is [4,3])");
  }
}

// A model's SFT loss from its hidden states and head matrix equals the loss on its logits,
// for an untied head and a tied one; a soft-capped head has no plain matrix.
TEST(LossesLinearCrossEntropy, SftFromTheHiddenStatesEqualsSftOnTheLogits) {
  for (bool tied : {false, true}) {
    manual_seed(7);
    nn::DecoderLM model(test::small_head_lm(tied));
    const Tensor ids = randint(0, 37, {3, 9});
    const Tensor prompt = tensor_from_ints({2, 0, 4}, {3}, kInt64);
    const Tensor w = model.plain_head_weight();
    ASSERT_TRUE(w.defined());
    Tensor a = losses::sft_loss(model(ids), ids, prompt);
    a.backward();
    const std::vector<std::vector<double>> ga = test::parameter_grads(model);
    model.zero_grad();
    Tensor b = losses::sft_loss_from_hidden(model.hidden(ids), w, ids, prompt);
    b.backward();
    EXPECT_NEAR(a.item(), b.item(), 1e-6 * std::abs(a.item())) << tied;
    test::expect_parameter_grads_near(model, ga);
  }
  nn::LMConfig capped;
  capped.vocab_size = 11;
  capped.n_layers = 1;
  capped.block = nn::BlockConfig::llama(16, 4, 2);
  capped.final_logit_softcap = 30;
  EXPECT_FALSE(nn::DecoderLM(capped).plain_head_weight().defined());
}

}  // namespace linear_ce_tests

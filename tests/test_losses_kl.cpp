// Tests for losses/kl.cpp: a plain-PyTorch KL(p || q) of two logit sets and F.kl_div against
// PyTorch, float64 gradient checks (both arguments), huge logits, zero targets, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/softmax.hpp"
#include "losses/kl.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

TEST(LossesKlTorch, PlainPyTorchKlDivergence) {
  expect_matches_torch("losses", "kl_seed", [](const V& x) { return kl_divergence(x[0], x[1]); });
  // the same inputs' PyTorch batchmean kl_div equals the plain-PyTorch value
  expect_matches_torch("losses", "kl_seed_batchmean", [](const V& x) { return kl_divergence(x[0], x[1]); });
  expect_matches_torch("losses", "kl_seed_3d", [](const V& x) { return kl_divergence(x[0], x[1]); });
  expect_matches_torch("losses", "kl_seed_huge", [](const V& x) { return kl_divergence(x[0], x[1]); });
}

TEST(LossesKlTorch, KlDivReductions) {
  const std::pair<const char*, Reduction> cases[] = {{"kl_div_none", Reduction::None},
                                                     {"kl_div_mean", Reduction::Mean},
                                                     {"kl_div_sum", Reduction::Sum},
                                                     {"kl_div_batchmean", Reduction::BatchMean}};
  for (const auto& [name, r] : cases) {
    SCOPED_TRACE(name);
    expect_matches_torch("losses", name, [r = r](const V& x) { return kl_div(x[0], x[1], r); });
  }
  expect_matches_torch("losses", "kl_div_log_target",
                       [](const V& x) { return kl_div(x[0], x[1], Reduction::Sum, true); });
  // zeros in the target contribute 0 (PyTorch: the same value; its target gradient is NaN there)
  expect_matches_torch("losses", "kl_div_zero_target",
                       [](const V& x) { return kl_div(x[0], x[1], Reduction::BatchMean); });
}

TEST(LossesKl, Gradcheck) {
  EXPECT_GRADCHECK([](const V& in) { return kl_divergence(in[0], in[1]); }, {randn64({3, 5}, 1), randn64({3, 5}, 2)});
  EXPECT_GRADCHECK([](const V& in) { return kl_divergence(in[0], in[1]); },
                   {randn64({2, 3, 4}, 3), randn64({2, 3, 4}, 4)});
  for (bool log_target : {false, true}) {
    // input: log-probs; target: probs (or log-probs), all positive probabilities
    Tensor x = log_softmax(randn64({3, 4}, 5), -1).detach().requires_grad_();
    Tensor t = (log_target ? log_softmax(randn64({3, 4}, 6), -1) : softmax(randn64({3, 4}, 6), -1)).detach();
    t.requires_grad_();
    EXPECT_GRADCHECK([log_target](const V& in) { return kl_div(in[0], in[1], Reduction::None, log_target); }, {x, t});
    EXPECT_GRADCHECK([log_target](const V& in) { return kl_div(in[0], in[1], Reduction::BatchMean, log_target); },
                     {x, t});
  }
}

TEST(LossesKl, ZeroTargetHasFiniteGradient) {
  Tensor x = log_softmax(randn64({2, 3}, 7), -1).detach().requires_grad_();
  Tensor t = tensor({{0.5, 0.0, 0.5}, {0.2, 0.3, 0.5}}, kFloat64).requires_grad_();
  Tensor loss = kl_div(x, t, Reduction::Sum);
  loss.backward();
  EXPECT_TRUE(isfinite_all(t.grad()));
  EXPECT_EQ(t.grad().to_vector()[1], 0.0);
  EXPECT_EQ(x.grad().to_vector()[1], 0.0);  // -t = 0
}

TEST(LossesKl, Errors) {
  EXPECT_XG_ERROR(kl_divergence(randn64({3, 5}, 1), randn64({3, 4}, 2)),
                  "kl_divergence: p_logits [3,5] and q_logits [3,4] must have the same shape");
  EXPECT_XG_ERROR(kl_divergence(randn64({3, 5}, 1), randn64({3, 5}, 2).to(kFloat32)), "q_logits is float32");
  EXPECT_XG_ERROR(kl_div(randn64({2, 2}, 1), randn64({4}, 2)),
                  "kl_div: input [2,2] and target [4] must have the same shape");
  EXPECT_XG_ERROR(kl_div(zeros({2}, kInt64), zeros({2}, kInt64)), "kl_div: input must be a float32 or float64 tensor");
}

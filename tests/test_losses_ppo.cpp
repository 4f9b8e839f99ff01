// Tests for losses/ppo.cpp: a plain-PyTorch PPO clipped surrogate (Schulman et al. 2017),
// TRL's value loss, entropy bonus, GAE and rollout advantages (ppo_advantages) against
// PyTorch, log-ratios of +-50, gradient checks, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "losses/ppo.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

TEST(LossesPpoTorch, ClipLoss) {
  expect_matches_torch("losses", "ppo_seed", [](const V& x) { return ppo_clip_loss(x[0], x[1], x[2]); });
  expect_matches_torch("losses", "ppo_masked", [](const V& x) { return ppo_clip_loss(x[0], x[1], x[2], 0.2, x[3]); });
  // log-ratios of +-50: finite, and equal to PyTorch (ratios up to 5e21)
  expect_matches_torch("losses", "ppo_extreme", [](const V& x) { return ppo_clip_loss(x[0], x[1], x[2], 0.2); });
}

TEST(LossesPpoTorch, ValueLossEntropyBonusGae) {
  expect_matches_torch("losses", "ppo_value", [](const V& x) { return ppo_value_loss(x[0], x[1], x[2], 0.2, x[3]); });
  expect_matches_torch("losses", "ppo_entropy_bonus", [](const V& x) { return ppo_entropy_bonus(x[0], x[1]); });
  expect_matches_torch("losses", "gae_advantages",
                       [](const V& x) { return compute_gae(x[0], x[1], 0.99, 0.95).advantages; });
  expect_matches_torch("losses", "gae_returns", [](const V& x) { return compute_gae(x[0], x[1], 0.99, 0.95).returns; });
  expect_matches_torch("losses", "gae_1d", [](const V& x) { return compute_gae(x[0], x[1]).advantages; });
}

TEST(LossesPpo, GaeByHand) {
  // T = 2, gamma = 0.5, lam = 0.5: delta1 = r1 - v1 = 1 - 2 = -1; A1 = -1;
  // delta0 = r0 + 0.5 v1 - v0 = 1 + 1 - 0.5 = 1.5; A0 = 1.5 + 0.25 * -1 = 1.25
  Gae g = compute_gae(tensor({1.0, 1.0}, kFloat64), tensor({0.5, 2.0}, kFloat64), 0.5, 0.5);
  EXPECT_EQ(g.advantages.to_vector(), (std::vector<double>{1.25, -1.0}));
  EXPECT_EQ(g.returns.to_vector(), (std::vector<double>{1.75, 1.0}));
  EXPECT_FALSE(g.advantages.requires_grad());
}

TEST(LossesPpo, ClipStopsTheGradientOutsideTheTrustRegion) {
  // ratio e^1 > 1.2 with A > 0: the clipped term wins, no gradient; ratio e^-1 < 0.8 with A > 0: unclipped wins
  Tensor old_lp = tensor({0.0, 0.0}, kFloat64);
  Tensor new_lp = tensor({1.0, -1.0}, kFloat64).requires_grad_();
  Tensor adv = tensor({1.0, 1.0}, kFloat64);
  Tensor loss = ppo_clip_loss(old_lp, new_lp, adv);
  loss.backward();
  EXPECT_NEAR(loss.item(), -(1.2 + std::exp(-1.0)) / 2, 1e-15);
  EXPECT_EQ(new_lp.grad().to_vector()[0], 0.0);
  EXPECT_NEAR(new_lp.grad().to_vector()[1], -std::exp(-1.0) / 2, 1e-15);
}

TEST(LossesPpo, Gradcheck) {
  Tensor old_lp = randn64({3, 4}, 1);
  Tensor new_lp = (old_lp + randn64({3, 4}, 2) * 0.3).detach().requires_grad_();
  Tensor mask = tensor({{1, 1, 1, 0}, {1, 1, 0, 0}, {1, 1, 1, 1}}, kFloat64);
  EXPECT_GRADCHECK([](const V& x) { return ppo_clip_loss(x[0], x[1], x[2], 0.2); },
                   {old_lp, new_lp, randn64({3, 4}, 3)});
  EXPECT_GRADCHECK([&](const V& x) { return ppo_clip_loss(x[0], x[1], x[2], 0.2, mask); },
                   {old_lp, new_lp, randn64({3, 4}, 4)});
  Tensor v_old = randn64({3, 4}, 5);
  Tensor v_new = (v_old + randn64({3, 4}, 6) * 0.3).detach().requires_grad_();
  EXPECT_GRADCHECK([&](const V& x) { return ppo_value_loss(x[0], x[1], x[2], 0.2, mask); },
                   {v_new, v_old, randn64({3, 4}, 7)});
  EXPECT_GRADCHECK([&](const V& x) { return ppo_entropy_bonus(x[0], mask); }, {randn64({3, 4, 5}, 8)});
}

TEST(LossesPpo, Errors) {
  Tensor a = randn64({4}, 1), b = randn64({5}, 2);
  EXPECT_XG_ERROR(ppo_clip_loss(a, b, a),
                  "ppo_clip_loss: old_log_probs [4] and new_log_probs [5] must have the same shape");
  EXPECT_XG_ERROR(ppo_clip_loss(a, a, b), "ppo_clip_loss: old_log_probs [4] and advantages [5]");
  EXPECT_XG_ERROR(ppo_clip_loss(a, a, a, 0.2, ones({5}, kBool)), "ppo_clip_loss: mask [5] must have the shape [4]");
  EXPECT_XG_ERROR(ppo_clip_loss(a, a, a, -0.1), "clip_epsilon must be >= 0");
  EXPECT_XG_ERROR(ppo_value_loss(a, a, b), "ppo_value_loss: new_values [4] and returns [5] must have the same shape");
  EXPECT_XG_ERROR(compute_gae(a, b), "compute_gae: rewards [4] and values [5] must have the same shape");
  EXPECT_XG_ERROR(compute_gae(randn64({2, 2, 2}, 3), randn64({2, 2, 2}, 4)),
                  "compute_gae: rewards must be [T] or [B, T]");
}

TEST(LossesPpoTorch, RolloutAdvantagesAreTrlsSteps4To6) {
  // tests/fixtures/gen_ppo.py: completions of 7, 3, 1 and 5 tokens in a [4, 7] layout
  for (const char* part : {"rewards", "advantages", "returns"}) {
    const std::string p = part;
    auto pick = [p](const PpoAdvantages& a) {
      return p == "rewards" ? a.rewards : p == "advantages" ? a.advantages : a.returns;
    };
    expect_matches_torch("ppo", "rollout_" + p,
                         [&](const V& x) { return pick(ppo_advantages(x[0], x[1], x[2], x[3], x[4])); });
    expect_matches_torch("ppo", "discounted_" + p,
                         [&](const V& x) { return pick(ppo_advantages(x[0], x[1], x[2], x[3], x[4], 0.2, 0.9, 0.8)); });
  }
}

TEST(LossesPpo, RolloutAdvantagesByHand) {
  // One completion of 2 tokens, kl_coef 0.5, gamma = lam = 1: rewards = -0.5 kl + score on the last;
  // kl = (-1 - -2, -1 - -1) = (1, 0): rewards (-0.5, 3); values (1, 2): A1 = 3 - 2 = 1,
  // A0 = -0.5 + 2 - 1 + 1 = 1.5; returns (2.5, 3); the padded third column stays 0.
  Tensor lp = tensor({{-1.0, -1.0, 0.0}}, kFloat64), ref = tensor({{-2.0, -1.0, 0.0}}, kFloat64);
  Tensor values = tensor({{1.0, 2.0, 7.0}}, kFloat64), mask = tensor({{1.0, 1.0, 0.0}}, kFloat64);
  PpoAdvantages a = ppo_advantages(lp, ref, values, tensor({3.0}, kFloat64), mask, 0.5, 1.0, 1.0);
  EXPECT_EQ(a.rewards.to_vector(), (std::vector<double>{-0.5, 3.0, 0.0}));
  EXPECT_EQ(a.returns.to_vector(), (std::vector<double>{2.5, 3.0, 0.0}));
  // whitened over the two kept tokens (1.5, 1): mean 1.25, unbiased std sqrt(0.125)
  const std::vector<double> adv = a.advantages.to_vector();
  EXPECT_NEAR(adv[0], 0.25 / std::sqrt(0.125 + 1e-8), 1e-12);
  EXPECT_NEAR(adv[1], -0.25 / std::sqrt(0.125 + 1e-8), 1e-12);
  EXPECT_EQ(adv[2], 0.0);
}

TEST(LossesPpo, RolloutAdvantagesErrors) {
  Tensor x = randn64({2, 3}, 1), mask = tensor({{1.0, 1.0, 0.0}, {0.0, 0.0, 0.0}}, kFloat64);
  EXPECT_XG_ERROR(ppo_advantages(x, x, x, randn64({2}, 2), mask), "ppo_advantages: row 1 of mask keeps no token");
  EXPECT_XG_ERROR(ppo_advantages(x, x, x, randn64({3}, 2), ones({2, 3}, kFloat64)),
                  "ppo_advantages: scores must be float64 [2], got float64 [3]");
  EXPECT_XG_ERROR(ppo_advantages(x, x, x, randn64({2}, 2), ones({2, 3}, kFloat64), 0.05, 1.5),
                  "expected kl_coef >= 0 and gamma, lam in [0, 1], got 0.05, 1.5, 0.95");
}

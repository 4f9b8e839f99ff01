// Tests for losses/grpo.cpp: plain-PyTorch group advantages, grpo_loss and
// compute_kl_penalty (Shao et al. 2024; tests/fixtures/gen_losses.py) and TRL's token-level
// normalisers against PyTorch, equal-reward groups, log-ratios of +-50, the old == new
// property, gradient accumulation, gradient checks, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "losses/grpo.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

// grpo_in = [old, new, adv [B], ref_logps, mask]: TRL's per-token loss with k3 KL, beta 0.04.
test::Fn token_grpo(GrpoLossType type, int64_t max_len = 0, double num_items = 0) {
  return [=](const V& x) {
    GrpoOptions o;
    o.completion_mask = x[4];
    o.loss_type = type;
    o.max_completion_length = max_len;
    o.num_items_in_batch = num_items;
    return grpo_loss(x[0], x[1], x[2], 0.2, 0.04, compute_kl_penalty(x[1], x[3], Tensor(), Reduction::None), o);
  };
}

}  // namespace

TEST(LossesGrpoTorch, Advantages) {
  expect_matches_torch("losses", "grpo_adv", [](const V& x) { return compute_grpo_advantages(x[0]); });
  expect_matches_torch("losses", "grpo_adv_flat", [](const V& x) { return compute_grpo_advantages(x[0], 4); });
  expect_matches_torch("losses", "grpo_adv_equal", [](const V& x) { return compute_grpo_advantages(x[0]); });
}

TEST(LossesGrpo, EqualRewardsGiveExactlyZeroAdvantages) {
  // Seven rewards of 0.1: (r - mean) / (std + 1e-8) in float32 gives -0.745 each (the mean is
  // off by one rounding, divided by 1e-8); here exactly 0, with a zero gradient, in both dtypes.
  for (Dtype dt : {kFloat32, kFloat64}) {
    Tensor rr = cat({full({1, 7}, 0.1, dt), full({1, 7}, -3.7, dt)}, 0).requires_grad_();
    Tensor a = compute_grpo_advantages(rr);
    for (double v : a.to_vector()) EXPECT_EQ(v, 0.0);
    EXPECT_TRUE(isfinite_all(a));
    sum(a * a + a).backward();
    for (double g : rr.grad().to_vector()) EXPECT_EQ(g, 0.0);
  }
}

TEST(LossesGrpoTorch, PlainPyTorchLossAndKl) {
  expect_matches_torch("losses", "grpo_seed", [](const V& x) { return grpo_loss(x[0], x[1], x[2]); });
  expect_matches_torch("losses", "grpo_seed_kl",
                       [](const V& x) { return grpo_loss(x[0], x[1], x[2], 0.2, 0.04, x[3]); });
  expect_matches_torch("losses", "grpo_extreme",
                       [](const V& x) { return grpo_loss(x[0], x[1], x[2], 0.2, 0.04, x[3]); });
  expect_matches_torch("losses", "kl_penalty_seed", [](const V& x) { return compute_kl_penalty(x[0], x[1]); });
  expect_matches_torch("losses", "kl_penalty_masked", [](const V& x) { return compute_kl_penalty(x[0], x[1], x[2]); });
  expect_matches_torch("losses", "kl_penalty_none",
                       [](const V& x) { return compute_kl_penalty(x[0], x[1], Tensor(), Reduction::None); });
  // log-ratios of +-50: exp(50) - 50 - 1, finite in float32
  expect_matches_torch("losses", "kl_penalty_extreme", [](const V& x) { return compute_kl_penalty(x[0], x[1]); });
}

TEST(LossesGrpoTorch, TokenLevelNormalisers) {
  expect_matches_torch("losses", "grpo_token_grpo", token_grpo(GrpoLossType::Grpo));
  expect_matches_torch("losses", "grpo_token_bnpo", token_grpo(GrpoLossType::Bnpo));
  expect_matches_torch("losses", "grpo_token_dr_grpo", token_grpo(GrpoLossType::DrGrpo, 6));
  expect_matches_torch("losses", "grpo_token_dapo", token_grpo(GrpoLossType::Dapo, 0, 20));
}

// With old == new the ratio is 1: the loss is -mean(A) (+ beta KL), ~0 because advantages
// are centred per group, but the gradient is -A / n per token, not 0.
TEST(LossesGrpo, OldEqualsNewLossIsZeroButGradientIsNot) {
  const int64_t B = 2, G = 4, T = 5;
  Generator gen(3);
  Tensor rewards = randn({B, G}, kFloat64, &gen);
  Tensor adv = reshape(compute_grpo_advantages(rewards), {B * G});
  Tensor logp = randn({B * G, T}, kFloat64, &gen);
  Tensor new_lp = logp.clone().detach().requires_grad_();
  std::vector<double> mv(static_cast<std::size_t>(B * G * T), 1.0);
  for (int64_t i = 0; i < B * G; ++i)
    for (int64_t t = 1 + i % T; t < T; ++t) mv[static_cast<std::size_t>(i * T + t)] = 0;  // lengths 1..5
  Tensor mask = from_vector(mv, {B * G, T}, kFloat64);
  GrpoOptions o;
  o.completion_mask = mask;
  Tensor loss = grpo_loss(logp.detach(), new_lp, adv, 0.2, 0.0, Tensor(), o);
  EXPECT_NEAR(loss.item(), 0.0, 1e-15);
  loss.backward();
  std::vector<double> g = new_lp.grad().to_vector(), a = adv.to_vector();
  double norm = 0;
  for (int64_t i = 0; i < B * G; ++i) {
    const double n = static_cast<double>(1 + i % T);
    for (int64_t t = 0; t < T; ++t) {
      const double expect = mv[static_cast<std::size_t>(i * T + t)] * -a[static_cast<std::size_t>(i)] / n / (B * G);
      EXPECT_NEAR(g[static_cast<std::size_t>(i * T + t)], expect, 1e-15);
      norm += expect * expect;
    }
  }
  EXPECT_GT(std::sqrt(norm), 0.1);
}

// The token-normalised losses over k micro-batches with the right normaliser equal the
// loss over the whole batch, and so do the accumulated gradients.
TEST(LossesGrpo, GradientAccumulationInvariance) {
  const int64_t B = 6, T = 4, k = 3, mb = B / k;
  Tensor old_lp = randn64({B, T}, 11).detach();
  Tensor new_lp = (old_lp + randn64({B, T}, 12) * 0.3).detach().requires_grad_();
  Tensor adv = randn64({B}, 13).detach();
  Tensor ref = randn64({B, T}, 14).detach();
  Tensor mask = tensor({{1, 1, 1, 1}, {1, 1, 0, 0}, {1, 0, 0, 0}, {1, 1, 1, 0}, {0, 0, 0, 0}, {1, 1, 0, 0}}, kFloat64);
  const double n_tokens = 12;
  struct Case {
    GrpoLossType type;
    double scale;  // what each micro-batch loss is multiplied by before it is accumulated
  };
  for (Case c :
       {Case{GrpoLossType::Grpo, 1.0 / k}, Case{GrpoLossType::DrGrpo, 1.0 / k}, Case{GrpoLossType::Dapo, 1.0}}) {
    SCOPED_TRACE(static_cast<int>(c.type));
    auto loss_of = [&](int64_t start, int64_t len) {
      GrpoOptions o;
      o.completion_mask = narrow(mask, 0, start, len);
      o.loss_type = c.type;
      o.max_completion_length = 8;
      o.num_items_in_batch = n_tokens;
      Tensor nl = narrow(new_lp, 0, start, len);
      Tensor kl = compute_kl_penalty(nl, narrow(ref, 0, start, len), Tensor(), Reduction::None);
      return grpo_loss(narrow(old_lp, 0, start, len), nl, narrow(adv, 0, start, len), 0.2, 0.04, kl, o);
    };
    new_lp.zero_grad();
    Tensor whole = loss_of(0, B);
    whole.backward();
    Tensor g_whole = new_lp.grad().clone();
    new_lp.zero_grad();
    double acc = 0;
    for (int64_t i = 0; i < k; ++i) {
      Tensor part = loss_of(i * mb, mb) * c.scale;
      part.backward();
      acc += part.item();
    }
    EXPECT_NEAR(acc, whole.item(), 1e-12);
    EXPECT_TRUE(test::tensors_close(new_lp.grad(), g_whole, 1e-12, 1e-14));
  }
}

TEST(LossesGrpo, Gradcheck) {
  EXPECT_GRADCHECK([](const V& x) { return compute_grpo_advantages(x[0]); }, {randn64({3, 5}, 1)});
  EXPECT_GRADCHECK([](const V& x) { return compute_grpo_advantages(x[0], 3); }, {randn64({6}, 2)});
  Tensor old_lp = randn64({4, 3}, 3);
  Tensor new_lp = (old_lp + randn64({4, 3}, 4) * 0.3).detach().requires_grad_();
  Tensor mask = tensor({{1, 1, 1}, {1, 0, 0}, {1, 1, 0}, {0, 0, 0}}, kBool);
  for (GrpoLossType type : {GrpoLossType::Grpo, GrpoLossType::Bnpo, GrpoLossType::DrGrpo, GrpoLossType::Dapo}) {
    SCOPED_TRACE(static_cast<int>(type));
    GrpoOptions o;
    o.completion_mask = mask;
    o.loss_type = type;
    // every float input: old, new, per-sequence advantages, per-token KL
    EXPECT_GRADCHECK([&](const V& x) { return grpo_loss(x[0], x[1], x[2], 0.2, 0.04, x[3], o); },
                     {old_lp, new_lp, randn64({4}, 5), randn64({4, 3}, 6)});
  }
  // the 1-d form (one log-prob per sequence), and the KL penalty with respect to both log-probs
  EXPECT_GRADCHECK([](const V& x) { return grpo_loss(x[0], x[1], x[2], 0.2, 0.04, x[3]); },
                   {randn64({5}, 7), randn64({5}, 8), randn64({5}, 9), randn64({5}, 10)});
  EXPECT_GRADCHECK([](const V& x) { return compute_kl_penalty(x[0], x[1]); }, {randn64({6}, 11), randn64({6}, 12)});
  EXPECT_GRADCHECK([&](const V& x) { return compute_kl_penalty(x[0], x[1], mask, Reduction::Sum); },
                   {randn64({4, 3}, 13), randn64({4, 3}, 14)});
}

TEST(LossesGrpo, Errors) {
  EXPECT_XG_ERROR(compute_grpo_advantages(randn64({10}, 1), 4),
                  "compute_grpo_advantages: 10 rewards [10] do not split into groups of 4 (group size mismatch)");
  EXPECT_XG_ERROR(compute_grpo_advantages(randn64({3, 1}, 2)),
                  "groups of 1 completion; the unbiased std needs at least 2");
  EXPECT_XG_ERROR(compute_grpo_advantages(randn64({12}, 3)), "compute_grpo_advantages: rewards must be [B, G]");
  Tensor lp = randn64({4, 3}, 4);
  EXPECT_XG_ERROR(grpo_loss(lp, randn64({4, 2}, 5), randn64({4}, 6)),
                  "grpo_loss: old_log_probs [4,3] and new_log_probs [4,2] must have the same shape");
  EXPECT_XG_ERROR(grpo_loss(lp, lp, randn64({3}, 7)),
                  "grpo_loss: advantages [3] do not match the log-probs [4,3] (expected [4,3] or [4] per sequence)");
  EXPECT_XG_ERROR(grpo_loss(lp, lp, randn64({4}, 8), 0.2, 0.1, randn64({4}, 9)),
                  "grpo_loss: ref_kl [4] must have the log-probs' shape [4,3]");
  GrpoOptions o;
  o.completion_mask = ones({3, 4}, kBool);
  EXPECT_XG_ERROR(grpo_loss(lp, lp, randn64({4}, 8), 0.2, 0.1, Tensor(), o),
                  "grpo_loss: completion_mask [3,4] must have the log-probs' shape [4,3]");
  EXPECT_XG_ERROR(compute_kl_penalty(lp, randn64({3}, 10)),
                  "compute_kl_penalty: log_probs [4,3] and ref_log_probs [3] must have the same shape");
}

namespace rloo_tests {

TEST(LossesRloo, AdvantagesAreEachRewardMinusTheMeanOfTheOthers) {
  const Tensor r = randn64({3, 5}, 11);
  const std::vector<double> rv = r.to_vector(), a = compute_rloo_advantages(r).to_vector();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 5; ++i) {
      double others = 0;  // the definition, summed over j != i
      for (int64_t j = 0; j < 5; ++j)
        if (j != i) others += rv[b * 5 + j];
      EXPECT_NEAR(a[b * 5 + i], rv[b * 5 + i] - others / 4, 1e-14) << b << "," << i;
    }
}

TEST(LossesRloo, EqualRewardsGiveExactlyZeroAndTheGradientChecks) {
  for (Dtype dt : {kFloat32, kFloat64})
    for (double v : compute_rloo_advantages(full({2, 7}, 0.1, dt)).to_vector()) EXPECT_EQ(v, 0.0);
  Tensor r = randn64({2, 4}, 12).requires_grad_();
  EXPECT_TRUE(gradcheck([](const V& x) { return sum(compute_rloo_advantages(x[0]) * compute_rloo_advantages(x[0]).exp()); },
                        {r}));
}

TEST(LossesRloo, AGroupOfOneIsRefusedByName) {
  try {
    compute_rloo_advantages(ones({3, 1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compute_rloo_advantages: a group needs at least 2 completions"), std::string::npos)
        << e.what();
  }
}

}  // namespace rloo_tests

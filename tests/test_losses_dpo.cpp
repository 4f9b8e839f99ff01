// Tests for losses/dpo.cpp: a plain-PyTorch dpo_loss with label smoothing (Rafailov et al.
// 2023; tests/fixtures/gen_losses.py) and TRL's robust / hinge / ipo variants against
// PyTorch, the logged metrics, log-ratios of +-50, gradient checks, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "losses/dpo.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

test::Fn dpo(double beta, double ls, DpoLossType type) {
  return [=](const V& x) { return dpo_loss(x[0], x[1], x[2], x[3], beta, ls, type).loss; };
}

}  // namespace

TEST(LossesDpoTorch, PlainPyTorchAndTrlVariants) {
  expect_matches_torch("losses", "dpo_seed", [](const V& x) { return dpo_loss(x[0], x[1], x[2], x[3]).loss; });
  expect_matches_torch("losses", "dpo_seed_ls", dpo(0.5, 0.2, DpoLossType::Sigmoid));
  expect_matches_torch("losses", "dpo_robust", dpo(0.3, 0.1, DpoLossType::Robust));
  expect_matches_torch("losses", "dpo_hinge", dpo(0.5, 0.0, DpoLossType::Hinge));
  expect_matches_torch("losses", "dpo_ipo", dpo(0.2, 0.0, DpoLossType::Ipo));
}

TEST(LossesDpoTorch, ExtremeLogRatiosStayFinite) {
  expect_matches_torch("losses", "dpo_extreme", dpo(1.0, 0.1, DpoLossType::Sigmoid));
  expect_matches_torch("losses", "dpo_extreme_robust", dpo(1.0, 0.1, DpoLossType::Robust));
  const TensorMap& fx = test::fixture("losses");
  V in;
  for (int i = 0; i < 4; ++i)
    in.push_back(fx.at("dpo_extreme.f32.in" + std::to_string(i)).clone().detach().requires_grad_());
  Tensor loss = dpo_loss(in[0], in[1], in[2], in[3], 1.0, 0.0).loss;
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item()));
  for (const Tensor& t : in) EXPECT_TRUE(isfinite_all(t.grad()));
}

TEST(LossesDpoTorch, Metrics) {
  auto metric = [](int which) {
    return [which](const V& x) {
      DpoOutput o = dpo_loss(x[0], x[1], x[2], x[3], 0.1);
      const Tensor* m[] = {&o.chosen_rewards, &o.rejected_rewards, &o.reward_margin, &o.reward_accuracy};
      EXPECT_FALSE(m[which]->requires_grad());
      return *m[which];
    };
  };
  expect_matches_torch("losses", "dpo_chosen_rewards", metric(0));
  expect_matches_torch("losses", "dpo_rejected_rewards", metric(1));
  expect_matches_torch("losses", "dpo_margin", metric(2));
  expect_matches_torch("losses", "dpo_accuracy", metric(3));
}

TEST(LossesDpo, Gradcheck) {
  for (DpoLossType type : {DpoLossType::Sigmoid, DpoLossType::Robust, DpoLossType::Hinge, DpoLossType::Ipo}) {
    SCOPED_TRACE(static_cast<int>(type));
    V in;
    for (uint64_t s = 0; s < 4; ++s) in.push_back(randn64({6}, 10 + s));
    EXPECT_GRADCHECK([type](const V& x) { return dpo_loss(x[0], x[1], x[2], x[3], 0.7, 0.15, type).loss; }, in);
  }
}

TEST(LossesDpo, LabelSmoothingZeroIsTheOriginalDpo) {
  Tensor pc = tensor({-1.0, -2.0}, kFloat64), pr = tensor({-3.0, -1.5}, kFloat64);
  Tensor rc = tensor({-1.5, -2.0}, kFloat64), rr = tensor({-2.5, -2.0}, kFloat64);
  // z = (pc - pr) - (rc - rr) = {2 - 1, -0.5 - 0} = {1, -0.5}; loss = mean(log(1 + exp(-beta z)))
  const double beta = 0.5;
  const double expect = (std::log1p(std::exp(-0.5)) + std::log1p(std::exp(0.25))) / 2;
  EXPECT_NEAR(dpo_loss(pc, pr, rc, rr, beta).loss.item(), expect, 1e-15);
  DpoOutput o = dpo_loss(pc, pr, rc, rr, beta);
  EXPECT_EQ(o.reward_accuracy.item(), 0.5);
  EXPECT_NEAR(o.reward_margin.item(), beta * 0.25, 1e-15);
}

TEST(LossesDpo, Errors) {
  Tensor a = randn64({4}, 1), b = randn64({3}, 2);
  EXPECT_XG_ERROR(dpo_loss(a, b, a, a),
                  "dpo_loss: policy_chosen_logps [4] and policy_rejected_logps [3] must have the same shape");
  EXPECT_XG_ERROR(dpo_loss(a, a, a, b), "dpo_loss: policy_chosen_logps [4] and ref_rejected_logps [3]");
  EXPECT_XG_ERROR(dpo_loss(a, a, a, a, 0.0), "dpo_loss: beta must be > 0, got 0");
  EXPECT_XG_ERROR(dpo_loss(a, a, a, a, 0.1, 0.5, DpoLossType::Robust), "needs label_smoothing < 0.5, got 0.5");
  EXPECT_XG_ERROR(dpo_loss(a, a, a, a, 0.1, -0.1), "label_smoothing must be in [0, 1]");
}

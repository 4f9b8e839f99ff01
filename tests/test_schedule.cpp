// Tests for optim/schedule.cpp: each schedule against torch's LambdaLR (with the same
// formula) or against torch's own CosineAnnealingLR / LinearLR / StepLR, at every step, for
// two groups with their own base lr; LambdaLR's state; bad arguments.
#include <cmath>

#include "optim/schedule.hpp"
#include "tests/optim_test_util.hpp"

using namespace xg;
using namespace xg::optim;
using xg::test::fx_tensor;

namespace {

// An optimizer with two groups, base lrs 0.1 and 0.02 (as in gen_optim.py's schedules()).
struct TwoGroups {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  SGD opt{std::vector<ParamGroup<SGDOptions>>{{{a}, SGDOptions{0.1}}, {{b}, SGDOptions{0.02}}}};
};

// Steps a LambdaLR over `schedule` and checks the groups' lrs against sched.<name> at
// steps [0, steps) (all of the fixture's rows by default).
void expect_lrs(const std::string& name, const Schedule& schedule, int64_t steps = -1) {
  TwoGroups t;
  LambdaLR sched(t.opt, schedule);
  const Tensor lrs = fx_tensor("sched." + name);
  if (steps < 0) steps = lrs.size(0);
  const std::vector<double> v = lrs.to_vector();
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t g = 0; g < 2; ++g) {
      EXPECT_NEAR(t.opt.lr(g), v[s * 2 + g], 1e-15) << name << " step " << s << " group " << g;
      EXPECT_NEAR(sched.get_lr()[g], v[s * 2 + g], 1e-15);
    }
    t.opt.step();
    sched.step();
  }
}

}  // namespace

TEST(Schedule, ConstantMatchesTorch) { expect_lrs("constant", constant_schedule()); }

TEST(Schedule, LinearWarmupMatchesTorchLambdaLR) { expect_lrs("warmup", linear_warmup(5)); }

TEST(Schedule, CosineWithWarmupAndFloorMatchesTorchLambdaLR) {
  expect_lrs("cosine_warmup_floor", cosine_with_warmup(5, 25, 0.1));
}

TEST(Schedule, LinearWarmupDecayMatchesTorchLambdaLR) { expect_lrs("linear_warmup_decay", linear_decay(4, 24)); }

// Without warmup, the cosine is torch's CosineAnnealingLR up to T_max; after it, torch's
// rises again while ours holds the floor.
TEST(Schedule, CosineIsTorchsCosineAnnealingLR) {
  expect_lrs("cosine_annealing", cosine_with_warmup(0, 25), 26);
  const Schedule f = cosine_with_warmup(0, 25);
  for (int64_t s = 25; s < 40; ++s) EXPECT_EQ(f(s), 0.0);
  // with a floor: eta_min = 0.1 * base lr
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, SGDOptions{0.1});
  LambdaLR sched(opt, cosine_with_warmup(0, 25, 0.1));
  const std::vector<double> v = fx_tensor("sched.cosine_annealing_floor").to_vector();
  for (std::size_t s = 0; s < v.size(); ++s, sched.step()) EXPECT_NEAR(opt.lr(0), v[s], 1e-15) << "step " << s;
  EXPECT_NEAR(cosine_with_warmup(0, 25, 0.1)(100), 0.1, 1e-15);
}

TEST(Schedule, LinearDecayIsTorchsLinearLR) { expect_lrs("linear_lr", linear_decay(0, 20, 0.2)); }

TEST(Schedule, StepDecayIsTorchsStepLR) { expect_lrs("step_lr", step_decay(7, 0.5)); }

TEST(Schedule, Values) {
  const Schedule w = linear_warmup(4);
  EXPECT_EQ(w(0), 0.0);
  EXPECT_EQ(w(2), 0.5);
  EXPECT_EQ(w(4), 1.0);
  EXPECT_EQ(linear_warmup(0)(0), 1.0);
  const Schedule c = cosine_with_warmup(10, 110, 0.2);
  EXPECT_EQ(c(5), 0.5);
  EXPECT_NEAR(c(60), 0.2 + 0.8 * 0.5, 1e-15);  // half way: cos(pi/2) = 0
  EXPECT_NEAR(c(110), 0.2, 1e-15);
  const Schedule l = linear_decay(0, 10, 0.5);
  EXPECT_NEAR(l(5), 0.75, 1e-15);
  EXPECT_EQ(l(20), 0.5);
  EXPECT_NEAR(step_decay(3, 0.1)(7), 0.01, 1e-17);
}

TEST(LambdaLR, OneScheduleAGroupAndTheStateToResume) {
  TwoGroups t;
  LambdaLR sched(t.opt, std::vector<Schedule>{linear_warmup(2), step_decay(1, 0.5)});
  EXPECT_EQ(sched.get_lr(), (std::vector<double>{0.0, 0.02}));
  sched.step();
  sched.step();
  sched.step();
  EXPECT_EQ(sched.last_step(), 3);
  EXPECT_EQ(sched.get_lr(), (std::vector<double>{0.1, 0.02 / 8}));
  EXPECT_EQ(t.opt.lr(1), 0.02 / 8);
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{0.1, 0.02}));

  TwoGroups fresh;
  fresh.opt.set_lr(0, 7.0);  // base lrs come from the state, not from the optimizer
  LambdaLR resumed(fresh.opt, std::vector<Schedule>{linear_warmup(2), step_decay(1, 0.5)});
  resumed.load_state_dict(sched.state_dict());
  EXPECT_EQ(resumed.last_step(), 3);
  EXPECT_EQ(fresh.opt.lr(0), 0.1);
  EXPECT_EQ(fresh.opt.lr(1), 0.02 / 8);
  resumed.step();
  sched.step();
  EXPECT_EQ(resumed.get_lr(), sched.get_lr());
}

TEST(Schedule, RejectsBadArguments) {
  EXPECT_XG_ERROR(linear_warmup(-1), "linear_warmup: invalid warmup_steps = -1");
  EXPECT_XG_ERROR(cosine_with_warmup(10, 5), "cosine_with_warmup: invalid total_steps = 5 (must be > 0 and >= warmup");
  EXPECT_XG_ERROR(cosine_with_warmup(0, 0), "invalid total_steps = 0");
  EXPECT_XG_ERROR(cosine_with_warmup(0, 10, 1.5), "cosine_with_warmup: invalid min_ratio = 1.5");
  EXPECT_XG_ERROR(linear_decay(0, 10, -0.1), "linear_decay: invalid end_ratio = -0.1");
  EXPECT_XG_ERROR(step_decay(0), "step_decay: invalid step_size = 0");
  EXPECT_XG_ERROR(step_decay(3, -1), "step_decay: invalid gamma = -1");
  EXPECT_XG_ERROR(cosine_with_warmup(1, 10)(-1), "cosine_with_warmup: step -1 is negative");
  TwoGroups t;
  EXPECT_XG_ERROR(LambdaLR(t.opt, std::vector<Schedule>{constant_schedule()}),
                  "LambdaLR: got 1 schedules for 2 parameter groups of SGD");
  EXPECT_XG_ERROR(LambdaLR(t.opt, Schedule()), "LambdaLR: the schedule of group 0 is empty");
  LambdaLR sched(t.opt, constant_schedule());
  t.opt.add_param_group({{zeros({1}).requires_grad_()}, SGDOptions{0.1}});
  EXPECT_XG_ERROR(sched.step(), "LambdaLR: the optimizer now has 3 parameter groups, the scheduler was made for 2");
  EXPECT_XG_ERROR(sched.load_state_dict({}), "needs 'last_step' and 'base_lrs'");
}

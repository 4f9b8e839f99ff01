// Tests for optim/sgd.cpp: torch.optim.SGD's trajectories (momentum, dampening, Nesterov,
// weight decay, maximize, groups), the fused kernel on big parameters, and bad options.
#include <cmath>

#include "autograd/random.hpp"
#include "optim/sgd.hpp"
#include "tests/optim_test_util.hpp"

using namespace xg;
using namespace xg::optim;
using xg::test::expect_trajectory;
using xg::test::MLP;

namespace {

// An SGD over the whole MLP with options `o` (one group).
xg::test::MakeOptimizer sgd(SGDOptions o) {
  return [o](MLP& m) { return std::make_unique<SGD>(m.parameters(), o); };
}

SGDOptions opts(double lr, double momentum = 0, double dampening = 0, double weight_decay = 0, bool nesterov = false,
                bool maximize = false) {
  return SGDOptions{lr, momentum, dampening, weight_decay, nesterov, maximize};
}

}  // namespace

// Each case mirrors CASES in tests/fixtures/gen_optim.py.
TEST(SGD, MatchesTorchPlain) {
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("sgd", dt, sgd(opts(0.1)));
}

TEST(SGD, MatchesTorchMomentum) {
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("sgd_momentum", dt, sgd(opts(0.05, 0.9)));
}

TEST(SGD, MatchesTorchDampeningAndWeightDecay) {
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("sgd_dampening_wd", dt, sgd(opts(0.05, 0.9, 0.3, 0.01)));
}

TEST(SGD, MatchesTorchNesterovWithWeightDecay) {
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("sgd_nesterov_wd", dt, sgd(opts(0.05, 0.9, 0, 0.01, true)));
}

TEST(SGD, MatchesTorchMaximize) {
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("sgd_maximize", dt, sgd(opts(0.02, 0.5, 0, 0, false, true)));
}

TEST(SGD, MatchesTorchParamGroupsWithTheirOwnOptions) {
  for (Dtype dt : {kFloat64, kFloat32}) {
    expect_trajectory("sgd_groups", dt, [](MLP& m) {
      return std::make_unique<SGD>(std::vector<ParamGroup<SGDOptions>>{
          {m.fc1->parameters(), opts(0.1, 0.9)}, {m.fc2->parameters(), opts(0.02, 0.8, 0, 0.1, true)}});
    });
  }
}

TEST(SGD, MatchesTorchWithLinearDecayAndClipping) {
  for (Dtype dt : {kFloat64, kFloat32}) {
    expect_trajectory(
        "sgd_linear_decay_clip", dt, sgd(opts(0.2, 0.9)),
        [](Optimizer& o) { return std::make_unique<LambdaLR>(o, linear_decay(2, xg::test::kSteps)); }, 0.3);
  }
}

// A parameter bigger than one chunk and than the parallel threshold, so the update runs
// split over threads; checked against the formula computed element by element in double.
TEST(SGD, FusedKernelOnABigParameterMatchesTheFormula) {
  const int64_t n = 100003;  // not a multiple of the chunk or the vector width
  for (Dtype dt : {kFloat64, kFloat32}) {
    Tensor p = randn({n}, dt).requires_grad_();
    const std::vector<double> p0 = p.to_vector();
    const SGDOptions o = opts(0.1, 0.9, 0.25, 0.01, false);
    SGD opt({p}, o);
    std::vector<double> ref = p0, buf(n, 0.0);
    for (int step = 0; step < 3; ++step) {
      Tensor g = randn({n}, dt);
      p.set_grad(g);
      const std::vector<double> gv = g.to_vector();
      for (int64_t i = 0; i < n; ++i) {
        const double d = gv[i] + o.weight_decay * ref[i];
        buf[i] = step == 0 ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
        ref[i] -= o.lr * buf[i];
      }
      opt.step();
    }
    const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
    EXPECT_TRUE(xg::test::tensors_close(p, from_vector(ref, {n}, dt), tol, tol)) << dtype_name(dt);
    EXPECT_TRUE(
        xg::test::tensors_close(opt.state(0)->buffers.at("momentum_buffer"), from_vector(buf, {n}, dt), tol, tol));
  }
}

TEST(SGD, KeepsAMomentumBufferOnlyWithMomentum) {
  Tensor a = ones({3}, kFloat64).requires_grad_(), b = ones({2}, kFloat64).requires_grad_();
  SGD plain({a}, opts(0.1));
  SGD heavy({b}, opts(0.1, 0.9));
  a.set_grad(full({3}, 2.0, kFloat64));
  b.set_grad(full({2}, 2.0, kFloat64));
  plain.step();
  heavy.step();
  EXPECT_TRUE(plain.state(0)->buffers.empty());
  EXPECT_EQ(plain.state(0)->step, 1);
  ASSERT_TRUE(heavy.state(0)->buffers.count("momentum_buffer"));
  // First step: buf = g, p = 1 - 0.1 * 2
  EXPECT_EQ(heavy.state(0)->buffers.at("momentum_buffer").to_vector(), (std::vector<double>{2, 2}));
  EXPECT_EQ(b.to_vector(), (std::vector<double>{0.8, 0.8}));
  // Second step: buf = 0.9 * 2 + 2 = 3.8, p = 0.8 - 0.38
  heavy.step();
  EXPECT_NEAR(b.to_vector()[0], 0.42, 1e-15);
}

TEST(SGD, RejectsBadOptions) {
  Tensor p = zeros({2}).requires_grad_();
  EXPECT_XG_ERROR(SGD({p}, SGDOptions{}), "SGD: lr is required");
  EXPECT_XG_ERROR(SGD({p}, opts(-0.1)), "SGD: invalid lr = -0.1 (must be >= 0)");
  EXPECT_XG_ERROR(SGD({p}, opts(0.1, -0.5)), "SGD: invalid momentum = -0.5");
  EXPECT_XG_ERROR(SGD({p}, opts(0.1, 0.9, 0, -1e-4)), "SGD: invalid weight_decay = -0.0001 (must be >= 0)");
  EXPECT_XG_ERROR(SGD({p}, opts(0.1, 0.9, 1.5)), "SGD: invalid dampening = 1.5");
  EXPECT_XG_ERROR(SGD({p}, opts(0.1, 0, 0, 0, true)), "SGD: invalid nesterov = true (Nesterov momentum requires");
  EXPECT_XG_ERROR(SGD({p}, opts(0.1, 0.9, 0.1, 0, true)), "requires momentum > 0 and dampening = 0");
  // Options changed between steps are checked at the next step.
  SGD opt({p}, opts(0.1));
  opt.options().momentum = -1;
  EXPECT_XG_ERROR(opt.step(), "SGD: invalid momentum = -1");
}

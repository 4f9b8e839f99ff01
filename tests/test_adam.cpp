// Tests for optim/adam.cpp: torch.optim.Adam / AdamW trajectories (L2 and decoupled weight
// decay, amsgrad, maximize, groups with a schedule and clipping), the fused kernel on big
// parameters, state buffers, and bad options.
#include <cmath>

#include "autograd/random.hpp"
#include "optim/adam.hpp"
#include "tests/optim_test_util.hpp"

using namespace xg;
using namespace xg::optim;
using xg::test::expect_trajectory;
using xg::test::MLP;

namespace {

template <class Opt, class Options>
xg::test::MakeOptimizer make(Options o) {
  return [o](MLP& m) { return std::make_unique<Opt>(m.parameters(), o); };
}

AdamOptions adam(double lr, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8, double wd = 0,
                 bool amsgrad = false, bool maximize = false) {
  return AdamOptions{lr, betas, eps, wd, amsgrad, maximize};
}

AdamWOptions adamw(double lr, std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8, double wd = 1e-2,
                   bool amsgrad = false, bool maximize = false) {
  return AdamWOptions{lr, betas, eps, wd, amsgrad, maximize};
}

// Element-by-element Adam/AdamW in double: torch's formula, for the big-parameter test.
void reference_step(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                    std::vector<double>& v, std::vector<double>& vmax, int t, double lr, double b1, double b2,
                    double eps, double wd, bool decoupled, bool amsgrad) {
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (std::size_t i = 0; i < p.size(); ++i) {
    double gi = g[i];
    if (decoupled) {
      p[i] *= 1 - lr * wd;
    } else {
      gi += wd * p[i];
    }
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    vmax[i] = std::max(vmax[i], v[i]);
    const double vd = amsgrad ? vmax[i] : v[i];
    p[i] -= lr / bc1 * m[i] / (std::sqrt(vd) / std::sqrt(bc2) + eps);
  }
}

}  // namespace

// Each case mirrors CASES in tests/fixtures/gen_optim.py.
TEST(Adam, MatchesTorchDefaults) {
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("adam", dt, make<Adam>(adam(0.01)));
}

TEST(Adam, MatchesTorchL2WeightDecayBetasEps) {
  for (Dtype dt : {kFloat64, kFloat32})
    expect_trajectory("adam_l2", dt, make<Adam>(adam(0.01, {0.8, 0.99}, 1e-6, 0.05)));
}

TEST(Adam, MatchesTorchAmsgradWithWeightDecay) {
  for (Dtype dt : {kFloat64, kFloat32})
    expect_trajectory("adam_amsgrad_wd", dt, make<Adam>(adam(0.02, {0.9, 0.999}, 1e-8, 0.05, true)));
}

TEST(Adam, MatchesTorchMaximize) {
  for (Dtype dt : {kFloat64, kFloat32})
    expect_trajectory("adam_maximize", dt, make<Adam>(adam(0.01, {0.9, 0.999}, 1e-8, 0, false, true)));
}

TEST(AdamW, MatchesTorchDefaults) {
  EXPECT_EQ(AdamWOptions{}.weight_decay, 1e-2);  // torch's AdamW default, unlike Adam's 0
  EXPECT_EQ(AdamOptions{}.weight_decay, 0.0);
  for (Dtype dt : {kFloat64, kFloat32}) expect_trajectory("adamw", dt, make<AdamW>(adamw(0.01)));
}

TEST(AdamW, MatchesTorchAmsgradDecoupledDecay) {
  for (Dtype dt : {kFloat64, kFloat32})
    expect_trajectory("adamw_amsgrad", dt, make<AdamW>(adamw(0.02, {0.9, 0.95}, 1e-8, 0.1, true)));
}

// Decay / no-decay groups from one helper call, warmup + cosine with a floor, clipping.
TEST(AdamW, MatchesTorchWithDecayGroupsCosineScheduleAndClipping) {
  for (Dtype dt : {kFloat64, kFloat32}) {
    expect_trajectory(
        "adamw_groups_cosine_clip", dt,
        [](MLP& m) {
          auto groups = weight_decay_groups(m.named_parameters(), adamw(0.05, {0.9, 0.999}, 1e-8, 0.1));
          return std::make_unique<AdamW>(groups);
        },
        [](Optimizer& o) { return std::make_unique<LambdaLR>(o, cosine_with_warmup(3, xg::test::kSteps, 0.1)); },
        0.5);
  }
}

// Bigger than the parallel threshold: the chunked, vectorised update equals the formula.
TEST(AdamW, FusedKernelOnBigParametersMatchesTheFormula) {
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      for (Dtype dt : {kFloat64, kFloat32}) {
        const int64_t n = 70001, k = 37;  // a big and a small parameter, odd sizes
        Tensor a = randn({n}, dt).requires_grad_(), b = randn({k}, dt).requires_grad_();
        const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
        std::unique_ptr<Optimizer> opt;
        if (decoupled) {
          opt = std::make_unique<AdamW>(std::vector<Tensor>{a, b}, adamw(lr, {b1, b2}, eps, wd, amsgrad));
        } else {
          opt = std::make_unique<Adam>(std::vector<Tensor>{a, b}, adam(lr, {b1, b2}, eps, wd, amsgrad));
        }
        std::vector<double> ra = a.to_vector(), ma(n), va(n), xa(n), rb = b.to_vector(), mb(k), vb(k), xb(k);
        for (int t = 1; t <= 3; ++t) {
          Tensor ga = randn({n}, dt), gb = randn({k}, dt);
          a.set_grad(ga);
          b.set_grad(gb);
          opt->step();
          reference_step(ra, ga.to_vector(), ma, va, xa, t, lr, b1, b2, eps, wd, decoupled, amsgrad);
          reference_step(rb, gb.to_vector(), mb, vb, xb, t, lr, b1, b2, eps, wd, decoupled, amsgrad);
        }
        const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
        EXPECT_TRUE(xg::test::tensors_close(a, from_vector(ra, {n}, dt), tol, tol))
            << "decoupled " << decoupled << " amsgrad " << amsgrad << " " << dtype_name(dt);
        EXPECT_TRUE(xg::test::tensors_close(b, from_vector(rb, {k}, dt), tol, tol));
        EXPECT_TRUE(
            xg::test::tensors_close(opt->state(0)->buffers.at("exp_avg_sq"), from_vector(va, {n}, dt), tol, tol));
        EXPECT_EQ(opt->state(1)->step, 3);
      }
    }
  }
}

TEST(Adam, StateHoldsTorchsBuffersAndTheStepCount) {
  Tensor p = ones({2, 2}, kFloat64).requires_grad_(), q = ones({3}, kFloat64).requires_grad_();
  Adam opt({p, q}, adam(0.1, {0.9, 0.999}, 1e-8, 0, true));
  EXPECT_EQ(opt.state(0), nullptr);
  p.set_grad(full({2, 2}, 0.5, kFloat64));
  opt.step();
  opt.step();
  ASSERT_NE(opt.state(0), nullptr);
  EXPECT_EQ(opt.state(0)->step, 2);
  std::vector<std::string> names;
  for (const auto& [name, buf] : opt.state(0)->buffers) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}));
  // m after two steps of a constant gradient 0.5: 0.5 (1 - 0.9^2)
  EXPECT_NEAR(opt.state(0)->buffers.at("exp_avg").to_vector()[3], 0.5 * (1 - 0.81), 1e-15);
  // q had no gradient: skipped, as torch skips it, with no state and no change
  EXPECT_EQ(opt.state(1), nullptr);
  EXPECT_EQ(q.to_vector(), (std::vector<double>{1, 1, 1}));
}

// With a constant gradient Adam's first step moves each element by lr (m / sqrt(v) = sign g).
TEST(Adam, FirstStepMovesByLr) {
  Tensor p = zeros({3}, kFloat64).requires_grad_();
  Adam opt({p}, adam(0.1, {0.9, 0.999}, 1e-12));
  p.set_grad(from_vector({2.0, -3.0, 1e-3}, {3}, kFloat64));
  opt.step();
  const std::vector<double> v = p.to_vector();
  EXPECT_NEAR(v[0], -0.1, 1e-9);
  EXPECT_NEAR(v[1], 0.1, 1e-9);
  EXPECT_NEAR(v[2], -0.1, 1e-7);
}

TEST(Adam, RejectsBadOptionsNamingThem) {
  Tensor p = zeros({2}).requires_grad_();
  EXPECT_XG_ERROR(Adam({p}, adam(-1e-3)), "Adam: invalid lr = -0.001 (must be >= 0)");
  EXPECT_XG_ERROR(Adam({p}, adam(1e-3, {1.0, 0.999})), "Adam: invalid betas[0] = 1 (must be in [0, 1))");
  EXPECT_XG_ERROR(Adam({p}, adam(1e-3, {-0.1, 0.999})), "Adam: invalid betas[0] = -0.1");
  EXPECT_XG_ERROR(Adam({p}, adam(1e-3, {0.9, 1.5})), "Adam: invalid betas[1] = 1.5 (must be in [0, 1))");
  EXPECT_XG_ERROR(Adam({p}, adam(1e-3, {0.9, 0.999}, 0)), "Adam: invalid eps = 0 (must be > 0)");
  EXPECT_XG_ERROR(Adam({p}, adam(1e-3, {0.9, 0.999}, -1e-8)), "Adam: invalid eps");
  EXPECT_XG_ERROR(Adam({p}, adam(1e-3, {0.9, 0.999}, 1e-8, -0.1)), "Adam: invalid weight_decay = -0.1");
  EXPECT_XG_ERROR(AdamW({p}, adamw(-1)), "AdamW: invalid lr = -1");
  EXPECT_XG_ERROR(AdamW({p}, adamw(1e-3, {0.9, 1.0})), "AdamW: invalid betas[1] = 1");
  EXPECT_XG_ERROR(AdamW({p}, adamw(1e-3, {0.9, 0.999}, 1e-8, -0.01)), "AdamW: invalid weight_decay = -0.01");
  // In a second group, and when changed between steps.
  EXPECT_XG_ERROR(AdamW(std::vector<ParamGroup<AdamWOptions>>{
                      {{p}, adamw(1e-3)}, {{zeros({1}).requires_grad_()}, adamw(1e-3, {0.9, 0.999}, 0)}}),
                  "AdamW: invalid eps = 0");
  AdamW opt({p});
  opt.options().betas.first = 1;
  EXPECT_XG_ERROR(opt.step(), "AdamW: invalid betas[0] = 1");
}

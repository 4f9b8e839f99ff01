// Tests for optim/clip.cpp: clip_grad_norm_ / clip_grad_value_ against
// torch.nn.utils.clip_grad_norm_ / clip_grad_value_, non-finite norms, big gradients.
#include <cmath>

#include "autograd/random.hpp"
#include "optim/clip.hpp"
#include "tests/optim_test_util.hpp"

using namespace xg;
using namespace xg::optim;
using xg::test::fx_tensor;

namespace {

// Parameters whose gradients are the fixture's clip.g0..g2, in `dtype`.
std::vector<Tensor> params_with_fixture_grads(Dtype dtype) {
  std::vector<Tensor> ps;
  for (int k = 0; k < 3; ++k) {
    Tensor g = fx_tensor("clip.g" + std::to_string(k)).to(dtype).clone();  // to() may share the cached fixture
    Tensor p = zeros(g.shape(), dtype).requires_grad_();
    p.set_grad(g);
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

TEST(ClipGradNorm, MatchesTorch) {
  const std::vector<std::tuple<std::string, double, double>> cases = {{"l2", 2.0, 1.5}, {"l2_noclip", 2.0, 100.0},
                                                                      {"l1", 1.0, 4.0}, {"inf", kInf, 0.7},
                                                                      {"l3", 3.0, 2.0}, {"lhalf", 0.5, 10.0}};
  for (const auto& [name, norm_type, max_norm] : cases) {
    for (Dtype dt : {kFloat64, kFloat32}) {
      const double tol = dt == kFloat64 ? 1e-12 : 1e-6;
      std::vector<Tensor> ps = params_with_fixture_grads(dt);
      const double total = clip_grad_norm_(ps, max_norm, norm_type);
      const double expected = fx_tensor("clip." + name + ".total").item();
      EXPECT_NEAR(total, expected, tol * std::max(1.0, expected)) << name;
      for (int k = 0; k < 3; ++k) {
        const Tensor want = fx_tensor("clip." + name + ".g" + std::to_string(k)).to(dt);
        EXPECT_TRUE(xg::test::tensors_close(ps[k].grad(), want, tol, tol))
            << name << " g" << k << " " << dtype_name(dt);
      }
    }
  }
}

TEST(ClipGradNorm, ScalesToMaxNorm) {
  Tensor p = zeros({2}, kFloat64).requires_grad_();
  p.set_grad(from_vector({3.0, 4.0}, {2}, kFloat64));
  EXPECT_EQ(clip_grad_norm_({p}, 1.0), 5.0);
  const double c = 1.0 / (5.0 + 1e-6);  // torch's coefficient: max_norm / (total + 1e-6)
  EXPECT_EQ(p.grad().to_vector(), (std::vector<double>{3 * c, 4 * c}));
}

TEST(ClipGradNorm, SkipsParametersWithoutGradients) {
  Tensor a = zeros({2}, kFloat64).requires_grad_(), b = zeros({3}, kFloat64).requires_grad_();
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0), 0.0);  // none has a gradient
  a.set_grad(from_vector({0.0, 2.0}, {2}, kFloat64));
  EXPECT_EQ(clip_grad_norm_({a, b}, 1.0, kInf), 2.0);
  EXPECT_FALSE(b.grad().defined());
  EXPECT_NEAR(a.grad().to_vector()[1], 1.0, 1e-6);
}

TEST(ClipGradNorm, NonFiniteNorms) {
  Tensor p = zeros({3}).requires_grad_();
  p.set_grad(from_vector({1.0, NAN, 2.0}, {3}, kFloat32));
  EXPECT_XG_ERROR(clip_grad_norm_({p}, 1.0, 2.0, true),
                  "clip_grad_norm_: the total norm of order 2 of the gradients is "
                  "non-finite (nan)");
  EXPECT_XG_ERROR(clip_grad_norm_({p}, 1.0, kInf, true), "is non-finite");
  // Without the flag, as torch: the norm is NaN and so are the clipped gradients.
  EXPECT_TRUE(std::isnan(clip_grad_norm_({p}, 1.0)));
  EXPECT_TRUE(std::isnan(p.grad().to_vector()[0]));
  Tensor q = zeros({2}).requires_grad_();
  q.set_grad(from_vector({INFINITY, 1.0}, {2}, kFloat32));
  EXPECT_XG_ERROR(clip_grad_norm_({q}, 1.0, 2.0, true), "non-finite (inf)");
}

// Many chunks on several threads: the same total as a plain sum in double, on any run.
TEST(ClipGradNorm, BigGradientsSumInDouble) {
  std::vector<Tensor> ps;
  double sum = 0;
  for (int64_t n : {100000, 3, 65537}) {
    Tensor p = zeros({n}).requires_grad_();
    p.set_grad(randn({n}));
    for (double v : p.grad().to_vector()) sum += v * v;
    ps.push_back(p);
  }
  const double total = clip_grad_norm_(ps, 1e9);
  EXPECT_NEAR(total, std::sqrt(sum), 1e-12 * std::sqrt(sum));
  EXPECT_EQ(clip_grad_norm_(ps, 1e9), total);  // bitwise repeatable
}

TEST(ClipGradNorm, RejectsBadArguments) {
  Tensor p = zeros({2}).requires_grad_();
  EXPECT_XG_ERROR(clip_grad_norm_({p}, 1.0, 0.0), "clip_grad_norm_: invalid norm_type = 0 (must be > 0, or inf)");
  EXPECT_XG_ERROR(clip_grad_norm_({p}, -1.0), "clip_grad_norm_: invalid max_norm = -1");
  EXPECT_XG_ERROR(clip_grad_value_({p}, -0.5), "clip_grad_value_: invalid clip_value = -0.5");
}

TEST(ClipGradValue, MatchesTorch) {
  for (Dtype dt : {kFloat64, kFloat32}) {
    std::vector<Tensor> ps = params_with_fixture_grads(dt);
    clip_grad_value_(ps, 0.8);
    for (int k = 0; k < 3; ++k) {
      const Tensor want = fx_tensor("clip.value.g" + std::to_string(k)).to(dt);
      EXPECT_TRUE(xg::test::tensors_close(ps[k].grad(), want, 0, 0)) << "g" << k;
    }
  }
}

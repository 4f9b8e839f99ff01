// Tests for nn/norm.cpp: the LayerNorm and RMSNorm modules against PyTorch (same weights),
// float64 gradient checks, bad input, and worked examples (LayerNorm and RMSNorm of
// [1, 3, 5, 7] by hand; outputs printed to 4 decimals by hand-written PyTorch norms).
#include "nn/norm.hpp"

#include <cmath>

#include "autograd/reduce.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using nn::LayerNorm;
using nn::RMSNorm;
using test::expect_module_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

// Expects `t` to equal `expected` to within tol elementwise (worked examples give 4 decimals).
void expect_values(const Tensor& t, const std::vector<double>& expected, double tol) {
  std::vector<double> v = t.to_vector();
  ASSERT_EQ(v.size(), expected.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], tol) << "index " << i;
}

// Fills a float64 module parameter with random values (in place: the module keeps the handle).
void randomise(Tensor p, uint64_t seed) { p.copy_(randn64(p.shape(), seed).detach()); }

}  // namespace

// --- against PyTorch ----------------------------------------------------------------------

TEST(NNNormTorch, LayerNorm) {
  LayerNorm ln8(8), ln7(7), ln5(5, 1e-2);
  auto fn = [](const LayerNorm& m) { return [&m](const V& x) { return m(x[0]); }; };
  expect_module_matches_torch("nn_norm", "layernorm", ln8, fn(ln8));
  expect_module_matches_torch("nn_norm", "layernorm_2d", ln7, fn(ln7));
  expect_module_matches_torch("nn_norm", "layernorm_eps", ln5, fn(ln5));
  LayerNorm plain(6, 1e-5, false);
  expect_module_matches_torch("nn_norm", "layernorm_no_affine", plain, fn(plain));
}

TEST(NNNormTorch, RMSNormModule) {
  // gen_nn_norm.py's RMSNorm: x / sqrt(mean(x^2) + eps) * weight, the parameter named
  // "weight" (hand-written code often calls it gamma).
  RMSNorm r8(8), r7(7), r6(6, 1e-8);
  auto fn = [](const RMSNorm& m) { return [&m](const V& x) { return m(x[0]); }; };
  expect_module_matches_torch("nn_norm", "rmsnorm", r8, fn(r8));
  expect_module_matches_torch("nn_norm", "rmsnorm_2d", r7, fn(r7));
  expect_module_matches_torch("nn_norm", "rmsnorm_eps_1e-8", r6, fn(r6));
}

// --- parameters, defaults, repr -----------------------------------------------------------

TEST(NNNorm, LayerNormParametersAsPyTorch) {
  LayerNorm ln(8);
  EXPECT_EQ(ln.dim(), 8);
  EXPECT_EQ(ln.eps(), 1e-5);
  nn::NamedTensors params = ln.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(ln.weight().shape(), Shape{8});
  EXPECT_EQ(ln.weight().to_vector(), std::vector<double>(8, 1.0));
  // NOTE: hand-written LayerNorms sometimes start beta at ones; PyTorch (and xgrad) start it
  // at zeros.
  EXPECT_EQ(ln.bias().to_vector(), std::vector<double>(8, 0.0));
  EXPECT_TRUE(ln.weight().requires_grad());
  EXPECT_EQ(ln.repr(), "LayerNorm(dim=8, eps=1e-05, elementwise_affine=true)");

  LayerNorm plain(4, 1e-3, false);
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_FALSE(plain.weight().defined());
  EXPECT_FALSE(plain.bias().defined());
  EXPECT_EQ(plain.eps(), 1e-3);
  EXPECT_EQ(plain.repr(), "LayerNorm(dim=4, eps=0.001, elementwise_affine=false)");
}

TEST(NNNorm, RMSNormParametersAsLLaMA) {
  RMSNorm rms(8);
  EXPECT_EQ(rms.dim(), 8);
  EXPECT_EQ(rms.eps(), 1e-6);  // LLaMA's default
  nn::NamedTensors params = rms.named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(rms.weight().to_vector(), std::vector<double>(8, 1.0));
  EXPECT_EQ(rms.repr(), "RMSNorm(dim=8, eps=1e-06)");
  EXPECT_EQ(RMSNorm(6, 1e-8).eps(), 1e-8);
}

TEST(NNNorm, FollowsTheModuleDtype) {
  LayerNorm ln(4);
  RMSNorm rms(4);
  ln.to(kFloat64);
  rms.to(kFloat64);
  Tensor x = randn64({3, 4}, 1).detach();
  EXPECT_EQ(ln(x).dtype(), kFloat64);
  EXPECT_EQ(rms(x).dtype(), kFloat64);
  EXPECT_XG_ERROR(ln(x.to(kFloat32)), "layer_norm: dtype mismatch, x float32 [3,4] and weight float64 [4]");
}

// --- gradient checks ----------------------------------------------------------------------

TEST(NNNormGradcheck, LayerNorm) {
  LayerNorm ln(5);
  ln.to(kFloat64);
  randomise(ln.weight(), 2);
  randomise(ln.bias(), 3);
  auto fn = [&ln](const V& v) { return ln(v[0]); };
  EXPECT_GRADCHECK(fn, {randn64({2, 3, 5}, 4), ln.weight(), ln.bias()});
  EXPECT_GRADCHECK(fn, {randn64({4, 5}, 5), ln.weight(), ln.bias()});
  LayerNorm plain(5, 1e-5, false);
  plain.to(kFloat64);
  EXPECT_GRADCHECK([&plain](const V& v) { return plain(v[0]); }, {randn64({2, 3, 5}, 6)});
}

TEST(NNNormGradcheck, RMSNorm) {
  RMSNorm rms(5);
  rms.to(kFloat64);
  randomise(rms.weight(), 7);
  auto fn = [&rms](const V& v) { return rms(v[0]); };
  EXPECT_GRADCHECK(fn, {randn64({2, 3, 5}, 8), rms.weight()});
  EXPECT_GRADCHECK(fn, {randn64({4, 5}, 9), rms.weight()});
}

// --- bad input ----------------------------------------------------------------------------

TEST(NNNormErrors, WrongLastDim) {
  EXPECT_XG_ERROR(LayerNorm(8)(zeros({2, 3, 7})), "LayerNorm(dim=8): expected input [..., 8], got [2,3,7]");
  EXPECT_XG_ERROR(RMSNorm(8)(zeros({2, 3, 7})), "RMSNorm(dim=8): expected input [..., 8], got [2,3,7]");
  EXPECT_XG_ERROR(LayerNorm(8)(scalar_tensor(1.0)), "LayerNorm(dim=8): expected input [..., 8], got []");
  EXPECT_XG_ERROR(RMSNorm(4)(zeros({4, 3})), "RMSNorm(dim=4): expected input [..., 4], got [4,3]");
}

TEST(NNNormErrors, BadOptions) {
  EXPECT_XG_ERROR(LayerNorm(0), "LayerNorm: dim must be positive, got 0");
  EXPECT_XG_ERROR(RMSNorm(-3), "RMSNorm: dim must be positive, got -3");
  EXPECT_XG_ERROR(LayerNorm(4, -1e-5), "LayerNorm(dim=4): eps must be a finite number >= 0, got -1e-05");
  EXPECT_XG_ERROR(RMSNorm(4, NAN), "RMSNorm(dim=4): eps must be a finite number >= 0, got nan");
}

// --- worked examples ------------------------------------------------------------------------

TEST(NNNormWorked, LayerNormByHandOn1357) {
  // x = [1, 3, 5, 7]: mean 4, variance (divided by N) 5, sigma 2.2361,
  // normalised [-1.3416, -0.4472, 0.4472, 1.3416] with mean 0 and std 1; with gamma = 1
  // and beta = 0 (the initial values) LayerNorm outputs exactly that.
  Tensor x = tensor({1.0, 3.0, 5.0, 7.0});
  EXPECT_DOUBLE_EQ(mean(x).item(), 4.0);
  EXPECT_DOUBLE_EQ(var(x, {}, 0).item(), 5.0);
  EXPECT_NEAR(std::sqrt(var(x, {}, 0).item()), 2.2361, 5e-5);
  const std::vector<double> normalised{-1.3416, -0.4472, 0.4472, 1.3416};
  Tensor y = LayerNorm(4, 1e-5, false)(x);  // nn.LayerNorm(4, elementwise_affine=False)
  expect_values(y, normalised, 5e-5);
  EXPECT_NEAR(mean(y).item(), 0.0, 5e-5);
  EXPECT_NEAR(std::sqrt(var(y, {}, 0).item()), 1.0, 5e-5);
  expect_values(LayerNorm(4)(x), normalised, 5e-5);
}

TEST(NNNormWorked, RMSNormByHandOn1357) {
  // mean of squares (1 + 9 + 25 + 49) / 4 = 21, RMS 4.5826, output
  // [0.2182, 0.6547, 1.0911, 1.5275] whose RMS is 1 and whose mean is 0.8729, not 0.
  Tensor x = tensor({1.0, 3.0, 5.0, 7.0});
  EXPECT_DOUBLE_EQ(mean(x * x).item(), 21.0);
  EXPECT_NEAR(std::sqrt(mean(x * x).item()), 4.5826, 5e-5);
  Tensor y = RMSNorm(4)(x);
  expect_values(y, {0.2182, 0.6547, 1.0911, 1.5275}, 5e-5);
  EXPECT_NEAR(std::sqrt(mean(y * y).item()), 1.0, 5e-5);
  EXPECT_NEAR(mean(y).item(), 0.8729, 5e-5);
  // the LayerNorm result on the same x differs: it is centred
  EXPECT_NEAR(mean(LayerNorm(4, 1e-5, false)(x)).item(), 0.0, 1e-6);
}

TEST(NNNormWorked, RMSNormOutputHasUnitRMSAndHalfTheParameters) {
  // d_model = 8, a [2, 4, 8] batch of randn * 3: the output keeps the
  // shape and each row has RMS ~ 1; LayerNorm has gamma(8) + beta(8) = 16 parameters,
  // RMSNorm gamma(8) = 8.
  const int64_t d_model = 8;
  RMSNorm rmsn(d_model);
  LayerNorm ln(d_model);
  Generator gen(42);
  Tensor batch = randn({2, 4, d_model}, kFloat32, &gen) * 3.0;
  Tensor out = rmsn(batch);
  EXPECT_EQ(out.shape(), (Shape{2, 4, 8}));
  EXPECT_EQ(ln(batch).shape(), (Shape{2, 4, 8}));
  std::vector<double> row_rms = sqrt(mean(out * out, {-1})).to_vector();
  ASSERT_EQ(row_rms.size(), 8u);
  for (double r : row_rms) EXPECT_NEAR(r, 1.0, 1e-4);
  EXPECT_EQ(ln.num_parameters(), 16);
  EXPECT_EQ(rmsn.num_parameters(), 8);
}

TEST(NNNormWorked, PrintedOutputsOfHandWrittenNorms) {
  // x and out as printed (4 decimals) by a hand-written LayerNorm(6) whose beta starts at ones
  // (the slip above): with our bias set to ones the outputs match, and with PyTorch's zeros
  // they are 1 lower.
  Tensor x = tensor({{{1.2764, -0.1716, 0.2268, -0.4756, -1.7076, -0.6254},
                      {0.7817, -0.4869, 0.8618, -0.5067, 0.0978, -0.3469}},
                     {{-1.6539, -1.1373, -0.4134, -1.0421, 0.1656, 2.2103},
                      {1.7681, 0.8299, -0.9012, -0.3458, -0.2297, -1.5390}}});
  const std::vector<double> printed{2.6883,  1.0827, 1.5245, 0.7456,  -0.6205, 0.5795, 2.2537, 0.0289,
                                    2.3943,  -0.0058, 1.0544, 0.2744, -0.0602, 0.3479, 0.9198, 0.4231,
                                    1.3771,  2.9923, 2.6848, 1.8246,  0.2376,  0.7467, 0.8533, -0.3471};
  LayerNorm ln(6);
  std::vector<double> shifted;
  for (double v : printed) shifted.push_back(v - 1);
  expect_values(ln(x), shifted, 2e-4);
  ln.bias().fill_(1.0);
  expect_values(ln(x), printed, 2e-4);

  // The same for a hand-written RMSNorm(6) with eps = 1e-8.
  Tensor x2 = tensor({{{0.0966, 0.9523, 1.3856, -0.5899, -0.0432, -0.8740},
                       {-0.1539, 2.0977, -1.1415, -0.1885, 0.8163, 0.4271}},
                      {{-1.6803, -1.3997, 0.1455, 0.0500, -0.0594, 0.5897},
                       {-0.1727, -0.9613, -0.1581, -1.0434, -0.2535, 0.0951}}});
  expect_values(RMSNorm(6, 1e-8)(x2), {0.1190,  1.1737,  1.7078,  -0.7270, -0.0533, -1.0772, -0.1466, 1.9984,
                                       -1.0874, -0.1796, 0.7776,  0.4069,  -1.8124, -1.5097, 0.1570,  0.0539,
                                       -0.0641, 0.6361,  -0.2891, -1.6093, -0.2646, -1.7467, -0.4244, 0.1592},
                2e-4);
}

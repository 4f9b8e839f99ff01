// Tests for autograd/norm.cpp: layer_norm and rms_norm against PyTorch, float64 gradient
// checks, the multithreaded paths against a composition of primitive ops, errors.
#include "autograd/norm.hpp"

#include <omp.h>

#include <cstring>

#include "autograd/elementwise.hpp"
#include "autograd/reduce.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

// The same norms composed from primitive ops (each with its own backward).
Tensor layer_norm_ref(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor y = (x - mean(x, {-1}, true)) * rsqrt(var(x, {-1}, 0, true) + eps);
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

Tensor rms_norm_ref(const Tensor& x, const Tensor& w, double eps) {
  Tensor y = x * rsqrt(mean(x * x, {-1}, true) + eps);
  return w.defined() ? y * w : y;
}

// A float64 leaf that does not require grad (data, not a parameter).
Tensor data64(const Shape& s, uint64_t seed) { return randn64(s, seed).detach(); }

// Runs fn on fresh copies of `inputs` (requires_grad as given) and returns the output and
// the gradients of every input that requires grad, for the upstream gradient `up`.
V run_with_grads(const std::function<Tensor(const V&)>& fn, const V& inputs, const Tensor& up) {
  V leaves;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone();
    if (t.requires_grad()) c.requires_grad_(true);
    leaves.push_back(c);
  }
  Tensor out = fn(leaves);
  V result{out.detach()};
  out.backward(up);
  for (const Tensor& l : leaves)
    if (l.requires_grad()) result.push_back(l.grad());
  return result;
}

// Large inputs (the OpenMP paths) against the composition of primitive ops: output and gradients.
void expect_matches_reference(const std::function<Tensor(const V&)>& fused, const std::function<Tensor(const V&)>& ref,
                              const V& inputs, double rtol, double atol) {
  Generator gen(77);
  Tensor up = randn(inputs[0].shape(), inputs[0].dtype(), &gen);
  V a = run_with_grads(fused, inputs, up), e = run_with_grads(ref, inputs, up);
  ASSERT_EQ(a.size(), e.size());
  for (std::size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(test::tensors_close(a[k], e[k], rtol, atol)) << (k == 0 ? "output" : "gradient ") << k;
}

}  // namespace

// --- values against PyTorch ---------------------------------------------------------------

TEST(NormTorch, LayerNormAffine) {
  auto fn = [](const V& x) { return layer_norm(x[0], x[1], x[2]); };
  expect_matches_torch("norm", "layer_norm_affine_3d", fn);
  expect_matches_torch("norm", "layer_norm_affine_2d", fn);
  expect_matches_torch("norm", "layer_norm_offset", fn);
  expect_matches_torch("norm", "layer_norm_long_row", fn);
  expect_matches_torch("norm", "layer_norm_many_rows", fn);
  expect_matches_torch("norm", "layer_norm_eps", [](const V& x) { return layer_norm(x[0], x[1], x[2], 0.1); });
}

TEST(NormTorch, LayerNormWithoutAffine) {
  auto fn = [](const V& x) { return layer_norm(x[0]); };
  expect_matches_torch("norm", "layer_norm_plain_3d", fn);
  expect_matches_torch("norm", "layer_norm_plain_1d", fn);
  expect_matches_torch("norm", "layer_norm_weight_only", [](const V& x) { return layer_norm(x[0], x[1]); });
  expect_matches_torch("norm", "layer_norm_bias_only", [](const V& x) { return layer_norm(x[0], Tensor(), x[1]); });
}

TEST(NormTorch, LayerNormGradientsOfSomeInputs) {
  // dweight and dbias without dx, and dx without dweight / dbias.
  auto fn = [](const V& x) { return layer_norm(x[0], x[1], x[2]); };
  expect_matches_torch("norm", "layer_norm_param_grads_only", fn);
  expect_matches_torch("norm", "layer_norm_x_grad_only", fn);
}

TEST(NormTorch, RMSNormFormula) {
  auto fn = [](const V& x) { return rms_norm(x[0], x[1]); };
  expect_matches_torch("norm", "rms_norm_weight_3d", fn);
  expect_matches_torch("norm", "rms_norm_weight_2d", fn);
  expect_matches_torch("norm", "rms_norm_long_row", fn);
  expect_matches_torch("norm", "rms_norm_many_rows", fn);
  expect_matches_torch("norm", "rms_norm_weight_grad_only", fn);
  expect_matches_torch("norm", "rms_norm_eps", [](const V& x) { return rms_norm(x[0], x[1], 0.1); });
  expect_matches_torch("norm", "rms_norm_eps_1e-8", [](const V& x) { return rms_norm(x[0], x[1], 1e-8); });
}

TEST(NormTorch, RMSNormWithoutWeight) {
  auto fn = [](const V& x) { return rms_norm(x[0]); };
  expect_matches_torch("norm", "rms_norm_plain_3d", fn);
  expect_matches_torch("norm", "rms_norm_plain_1d", fn);
}

// --- gradient checks ----------------------------------------------------------------------

TEST(NormGradcheck, LayerNorm) {
  auto affine = [](const V& x) { return layer_norm(x[0], x[1], x[2]); };
  EXPECT_GRADCHECK(affine, {randn64({2, 3, 5}, 1), randn64({5}, 2), randn64({5}, 3)});
  EXPECT_GRADCHECK(affine, {randn64({4, 6}, 4), randn64({6}, 5), randn64({6}, 6)});
  EXPECT_GRADCHECK(affine, {randn64({7}, 7), randn64({7}, 8), randn64({7}, 9)});
  auto plain = [](const V& x) { return layer_norm(x[0]); };
  EXPECT_GRADCHECK(plain, {randn64({2, 3, 5}, 10)});
  EXPECT_GRADCHECK(plain, {randn64({4, 6}, 11)});
  EXPECT_GRADCHECK([](const V& x) { return layer_norm(x[0], x[1]); }, {randn64({3, 4}, 12), randn64({4}, 13)});
  EXPECT_GRADCHECK([](const V& x) { return layer_norm(x[0], Tensor(), x[1]); },
                   {randn64({3, 4}, 14), randn64({4}, 15)});
  EXPECT_GRADCHECK([](const V& x) { return layer_norm(x[0], x[1], x[2], 0.5); },
                   {randn64({3, 4}, 16), randn64({4}, 17), randn64({4}, 18)});
}

TEST(NormGradcheck, RMSNorm) {
  auto weighted = [](const V& x) { return rms_norm(x[0], x[1]); };
  EXPECT_GRADCHECK(weighted, {randn64({2, 3, 5}, 21), randn64({5}, 22)});
  EXPECT_GRADCHECK(weighted, {randn64({4, 6}, 23), randn64({6}, 24)});
  EXPECT_GRADCHECK(weighted, {randn64({7}, 25), randn64({7}, 26)});
  auto plain = [](const V& x) { return rms_norm(x[0]); };
  EXPECT_GRADCHECK(plain, {randn64({2, 3, 5}, 27)});
  EXPECT_GRADCHECK(plain, {randn64({4, 6}, 28)});
  EXPECT_GRADCHECK([](const V& x) { return rms_norm(x[0], x[1], 0.5); }, {randn64({3, 4}, 29), randn64({4}, 30)});
}

TEST(NormGradcheck, ParametersOnlyOnTheParallelPath) {
  // 4096 x 8 = 32768 elements: the backward splits rows into blocks whose dweight/dbias
  // partials are combined; x is data, so only the 8 + 8 parameters are perturbed.
  EXPECT_GRADCHECK([](const V& x) { return layer_norm(x[0], x[1], x[2]); },
                   {data64({4096, 8}, 31), randn64({8}, 32), randn64({8}, 33)});
  EXPECT_GRADCHECK([](const V& x) { return rms_norm(x[0], x[1]); }, {data64({4096, 8}, 34), randn64({8}, 35)});
}

// --- the multithreaded paths --------------------------------------------------------------

TEST(Norm, LargeInputsMatchPrimitiveOps) {
  // many short rows, two long rows, an uneven split of rows into blocks; float64 and float32
  for (const Shape& s : std::vector<Shape>{{4096, 8}, {2, 20000}, {3, 12000}, {40, 1000}, {2, 5, 4000}}) {
    SCOPED_TRACE(shape_str(s));
    const int64_t C = s.back();
    for (Dtype dt : {kFloat64, kFloat32}) {
      const bool f64 = dt == kFloat64;
      const double rtol = f64 ? 1e-10 : 1e-4, atol = f64 ? 1e-10 : 1e-4;
      Tensor x = randn64(s, 41).to(dt).detach().requires_grad_(true);
      Tensor w = randn64({C}, 42).to(dt).detach().requires_grad_(true);
      Tensor b = randn64({C}, 43).to(dt).detach().requires_grad_(true);
      expect_matches_reference([](const V& v) { return layer_norm(v[0], v[1], v[2]); },
                               [](const V& v) { return layer_norm_ref(v[0], v[1], v[2], 1e-5); }, {x, w, b}, rtol,
                               atol);
      expect_matches_reference([](const V& v) { return rms_norm(v[0], v[1]); },
                               [](const V& v) { return rms_norm_ref(v[0], v[1], 1e-6); }, {x, w}, rtol, atol);
      expect_matches_reference([](const V& v) { return layer_norm(v[0]); },
                               [](const V& v) { return layer_norm_ref(v[0], Tensor(), Tensor(), 1e-5); }, {x}, rtol,
                               atol);
      expect_matches_reference([](const V& v) { return rms_norm(v[0]); },
                               [](const V& v) { return rms_norm_ref(v[0], Tensor(), 1e-6); }, {x}, rtol, atol);
    }
  }
}

TEST(Norm, ParallelBackwardIsTheSameOnAnyThreadCount) {
  // dweight / dbias are summed in an order fixed by the shape: bitwise equal with 1 and 2
  // threads, for many short rows (row blocks) and for few long rows (column chunks).
  for (const Shape& s : std::vector<Shape>{{2048, 64}, {4, 20000}}) {
    SCOPED_TRACE(shape_str(s));
    Generator gen(5);
    Tensor x = randn(s, kFloat32, &gen);
    Tensor up = randn(s, kFloat32, &gen);
    auto grads = [&](int threads) {
      const test::OmpThreadsScope scope(threads);
      Tensor w = ones({s[1]}).requires_grad_(true), b = zeros({s[1]}).requires_grad_(true);
      Tensor xl = x.clone().requires_grad_(true);
      layer_norm(xl, w, b).backward(up);
      Tensor w2 = ones({s[1]}).requires_grad_(true);
      rms_norm(x, w2).backward(up);
      return V{xl.grad(), w.grad(), b.grad(), w2.grad()};
    };
    V one = grads(1), two = grads(2);
    for (std::size_t k = 0; k < one.size(); ++k) {
      ASSERT_EQ(one[k].numel(), two[k].numel());
      EXPECT_EQ(0, std::memcmp(one[k].raw_data(), two[k].raw_data(), one[k].numel() * sizeof(float))) << "grad " << k;
    }
  }
}

// --- behaviour ----------------------------------------------------------------------------

TEST(Norm, NormalisesEachRow) {
  // layer_norm rows have mean 0 and biased variance 1 / (1 + eps / var); rms_norm rows have RMS 1.
  Tensor x = randn64({6, 50}, 51).detach() * 3.0 + 2.0;
  std::vector<double> ln = layer_norm(x, Tensor(), Tensor(), 0).to_vector();
  std::vector<double> rms = rms_norm(x, Tensor(), 0).to_vector();
  for (int r = 0; r < 6; ++r) {
    double s = 0, ss = 0, rs = 0;
    for (int i = 0; i < 50; ++i) {
      s += ln[r * 50 + i];
      ss += ln[r * 50 + i] * ln[r * 50 + i];
      rs += rms[r * 50 + i] * rms[r * 50 + i];
    }
    EXPECT_NEAR(s / 50, 0, 1e-12) << "row " << r;
    EXPECT_NEAR(ss / 50, 1, 1e-12) << "row " << r;
    EXPECT_NEAR(rs / 50, 1, 1e-12) << "row " << r;
  }
}

TEST(Norm, RowsFarFromZeroKeepTheirDigits) {
  // float64, mean 1e6 and std 1e-3: a one-pass E[x^2] - E[x]^2 variance cancels entirely.
  Tensor x = (randn64({4, 64}, 52).detach() * 1e-3 + 1e6);
  std::vector<double> y = layer_norm(x, Tensor(), Tensor(), 0).to_vector();
  for (int r = 0; r < 4; ++r) {
    double s = 0, ss = 0;
    for (int i = 0; i < 64; ++i) {
      s += y[r * 64 + i];
      ss += y[r * 64 + i] * y[r * 64 + i];
    }
    EXPECT_NEAR(s / 64, 0, 1e-6) << "row " << r;  // the mean of 1e6-sized numbers is off by ~1e-10
    EXPECT_NEAR(ss / 64, 1, 1e-6) << "row " << r;
  }
  // float32, mean 100 and std 0.1: the output and gradients agree with float64 on the same
  // (float32) numbers to float32 precision, though x - float(mean) alone would lose 2 digits.
  Tensor x32 = (randn64({3, 16}, 53).detach() * 0.1 + 100).to(kFloat32);
  Tensor w32 = randn64({16}, 54).detach().to(kFloat32), b32 = randn64({16}, 55).detach().to(kFloat32);
  auto fn = [](const V& v) { return layer_norm(v[0], v[1], v[2]); };
  Tensor up = randn64({3, 16}, 56).detach();
  V a = run_with_grads(fn, {x32.requires_grad_(true), w32.requires_grad_(true), b32.requires_grad_(true)},
                       up.to(kFloat32));
  auto leaf64 = [](const Tensor& t) { return t.to(kFloat64).detach().requires_grad_(true); };
  V e = run_with_grads(fn, {leaf64(x32), leaf64(w32), leaf64(b32)}, up);
  ASSERT_EQ(a.size(), 4u);
  for (std::size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(test::tensors_close(a[k].to(kFloat64), e[k], 1e-5, 1e-6)) << (k == 0 ? "output" : "gradient ") << k;
}

TEST(Norm, ConstantRowIsZeroNotNaN) {
  // var = 0: eps keeps the division finite, and (x - mean) = 0 gives 0 (as PyTorch).
  Tensor x = full({2, 4}, 3.0, kFloat64).requires_grad_(true);
  Tensor y = layer_norm(x, Tensor(), Tensor(), 1e-5);
  for (double v : y.to_vector()) EXPECT_EQ(v, 0.0);
  y.backward(ones({2, 4}, kFloat64));
  EXPECT_TRUE(isfinite_all(x.grad()));
  Tensor z = rms_norm(zeros({2, 4}, kFloat64), Tensor(), 1e-6);
  for (double v : z.to_vector()) EXPECT_EQ(v, 0.0);
}

TEST(Norm, RecordsOneFusedNode) {
  Tensor x = randn64({2, 3}, 61);
  EXPECT_STREQ(layer_norm(x).op_name(), "layer_norm");
  EXPECT_STREQ(rms_norm(x).op_name(), "rms_norm");
  NoGradGuard guard;
  EXPECT_FALSE(layer_norm(x).requires_grad());
  EXPECT_FALSE(rms_norm(x).requires_grad());
}

// --- errors -------------------------------------------------------------------------------

TEST(NormErrors, BadShapes) {
  Tensor x = zeros({2, 3, 8});
  EXPECT_XG_ERROR(layer_norm(x, ones({7})),
                  "layer_norm: weight must have shape [8] (the last dim of x [2,3,8]), got [7]");
  EXPECT_XG_ERROR(layer_norm(x, ones({8}), zeros({2, 8})),
                  "layer_norm: bias must have shape [8] (the last dim of x [2,3,8]), got [2,8]");
  EXPECT_XG_ERROR(rms_norm(x, ones({3})), "rms_norm: weight must have shape [8] (the last dim of x [2,3,8]), got [3]");
  EXPECT_XG_ERROR(layer_norm(scalar_tensor(1.0)), "layer_norm: expected x with at least 1 dim");
  EXPECT_XG_ERROR(rms_norm(scalar_tensor(1.0)), "rms_norm: expected x with at least 1 dim");
}

TEST(NormErrors, BadDtypes) {
  EXPECT_XG_ERROR(layer_norm(zeros({2, 8}), ones({8}, kFloat64)),
                  "layer_norm: dtype mismatch, x float32 [2,8] and weight float64 [8]");
  EXPECT_XG_ERROR(rms_norm(zeros({2, 8}, kFloat64), ones({8})),
                  "rms_norm: dtype mismatch, x float64 [2,8] and weight float32 [8]");
  EXPECT_XG_ERROR(layer_norm(arange(8)), "layer_norm: expected a float32, float64 or bfloat16 x, got int64 [8]");
  EXPECT_XG_ERROR(rms_norm(arange(8)), "rms_norm: expected a float32, float64 or bfloat16 x, got int64 [8]");
}

TEST(NormErrors, BadEps) {
  EXPECT_XG_ERROR(layer_norm(zeros({2, 8}), Tensor(), Tensor(), -1),
                  "layer_norm: eps must be a finite number >= 0, got -1");
  EXPECT_XG_ERROR(rms_norm(zeros({2, 8}), Tensor(), -0.5), "rms_norm: eps must be a finite number >= 0, got -0.5");
}

// Tests for autograd/reduce.cpp: PyTorch values, float64 gradient checks, errors.
#include "autograd/reduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/elementwise.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using xg::test::kInf;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {


Tensor randn32(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, kFloat32, &gen);
}

// Reference reductions of x viewed as [O, R, I] over R, in double: f(values of one output).
template <class F>
std::vector<double> naive(const Tensor& x, int64_t O, int64_t R, int64_t I, F f) {
  std::vector<double> v = x.to_vector(), out;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      std::vector<double> row;
      for (int64_t r = 0; r < R; ++r) row.push_back(v[static_cast<std::size_t>((o * R + r) * I + i)]);
      out.push_back(f(row));
    }
  return out;
}

double vsum(const std::vector<double>& r) {
  double s = 0;
  for (double v : r) s += v;
  return s;
}
double vmax(const std::vector<double>& r) { return *std::max_element(r.begin(), r.end()); }
double vmin(const std::vector<double>& r) { return *std::min_element(r.begin(), r.end()); }
double vargmax(const std::vector<double>& r) {
  return static_cast<double>(std::max_element(r.begin(), r.end()) - r.begin());
}
double vlse(const std::vector<double>& r) {
  double m = vmax(r), s = 0;
  for (double v : r) s += std::exp(v - m);
  return m + std::log(s);
}

void expect_near_all(const std::vector<double>& a, const std::vector<double>& e, double tol) {
  ASSERT_EQ(a.size(), e.size());
  for (std::size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], e[k], tol * std::max(1.0, std::abs(e[k]))) << k;
}

}  // namespace

// --- values against PyTorch ---------------------------------------------------------------

TEST(ReduceTorch, Sum) {
  expect_matches_torch("reduce", "sum_all", [](const V& x) { return sum(x[0]); });
  expect_matches_torch("reduce", "sum_last", [](const V& x) { return sum(x[0], {-1}); });
  expect_matches_torch("reduce", "sum_first_keep", [](const V& x) { return sum(x[0], {0}, true); });
  expect_matches_torch("reduce", "sum_middle", [](const V& x) { return sum(x[0], {1}); });
  expect_matches_torch("reduce", "sum_01", [](const V& x) { return sum(x[0], {0, 1}); });
  expect_matches_torch("reduce", "sum_02_keep", [](const V& x) { return sum(x[0], {0, -1}, true); });
  expect_matches_torch("reduce", "sum_13", [](const V& x) { return sum(x[0], {1, 3}); });
}

TEST(ReduceTorch, Mean) {
  expect_matches_torch("reduce", "mean_all", [](const V& x) { return mean(x[0]); });
  expect_matches_torch("reduce", "mean_last_keep", [](const V& x) { return mean(x[0], {-1}, true); });
  expect_matches_torch("reduce", "mean_02", [](const V& x) { return mean(x[0], {0, 2}); });
  expect_matches_torch("reduce", "mean_neg", [](const V& x) { return mean(x[0], {-2}); });
}

TEST(ReduceTorch, VarStd) {
  expect_matches_torch("reduce", "var_all", [](const V& x) { return var(x[0]); });
  expect_matches_torch("reduce", "var_last_biased", [](const V& x) { return var(x[0], {-1}, 0); });
  expect_matches_torch("reduce", "var_02_keep", [](const V& x) { return var(x[0], {0, 2}, 1, true); });
  expect_matches_torch("reduce", "std_all_biased", [](const V& x) { return xg::std(x[0], {}, 0); });
  expect_matches_torch("reduce", "std_first", [](const V& x) { return xg::std(x[0], {0}); });
  expect_matches_torch("reduce", "std_neg_keep", [](const V& x) { return xg::std(x[0], {-2}, 0, true); });
}

TEST(ReduceTorch, AmaxAminWithTies) {
  expect_matches_torch("reduce", "amax_last", [](const V& x) { return amax(x[0], {-1}); });
  expect_matches_torch("reduce", "amax_first_keep", [](const V& x) { return amax(x[0], {0}, true); });
  expect_matches_torch("reduce", "amax_02", [](const V& x) { return amax(x[0], {0, 2}); });
  expect_matches_torch("reduce", "amax_all", [](const V& x) { return amax(x[0]); });
  expect_matches_torch("reduce", "amin_12", [](const V& x) { return amin(x[0], {1, -1}); });
  expect_matches_torch("reduce", "amin_middle_keep", [](const V& x) { return amin(x[0], {1}, true); });
}

TEST(ReduceTorch, FullMaxMin) {
  expect_matches_torch("reduce", "max_full", [](const V& x) { return xg::max(x[0]); });
  expect_matches_torch("reduce", "min_full", [](const V& x) { return xg::min(x[0]); });
  expect_matches_torch("reduce", "max_full_unique", [](const V& x) { return xg::max(x[0]); });
}

TEST(ReduceTorch, MaxMinAlongDim) {
  expect_matches_torch("reduce", "max_dim_last", [](const V& x) { return xg::max(x[0], -1).values; });
  expect_matches_torch("reduce", "max_dim_last_idx", [](const V& x) { return xg::max(x[0], -1).indices; });
  expect_matches_torch("reduce", "max_dim_middle_keep", [](const V& x) { return xg::max(x[0], 1, true).values; });
  expect_matches_torch("reduce", "max_dim_middle_keep_idx",
                       [](const V& x) { return xg::max(x[0], 1, true).indices; });
  expect_matches_torch("reduce", "min_dim_first", [](const V& x) { return xg::min(x[0], 0).values; });
  expect_matches_torch("reduce", "min_dim_first_idx", [](const V& x) { return xg::min(x[0], 0).indices; });
  expect_matches_torch("reduce", "max_dim_unique", [](const V& x) { return xg::max(x[0], -2).values; });
}

TEST(ReduceTorch, Logsumexp) {
  expect_matches_torch("reduce", "logsumexp_last", [](const V& x) { return logsumexp(x[0], {-1}); });
  expect_matches_torch("reduce", "logsumexp_first_keep", [](const V& x) { return logsumexp(x[0], {0}, true); });
  expect_matches_torch("reduce", "logsumexp_02", [](const V& x) { return logsumexp(x[0], {0, 2}); });
  expect_matches_torch("reduce", "logsumexp_large", [](const V& x) { return logsumexp(x[0], {-1}); });
  expect_matches_torch("reduce", "logsumexp_neginf", [](const V& x) { return logsumexp(x[0], {-1}); });
  expect_matches_torch("reduce", "logsumexp_all_neginf", [](const V& x) { return logsumexp(x[0], {-1}); });
}

// Inputs large enough for the multithreaded paths (split rows, split columns), checked
// against plain double loops.
TEST(Reduce, LargeInputsMatchNaiveLoops) {
  Tensor rows = randn32({4, 20000}, 1);  // few long rows: each split into chunks
  expect_near_all(sum(rows, {-1}).to_vector(), naive(rows, 4, 20000, 1, vsum), 1e-6);
  EXPECT_EQ(amax(rows, {1}).to_vector(), naive(rows, 4, 20000, 1, vmax));
  EXPECT_EQ(xg::max(rows, 1).indices.to_vector(), naive(rows, 4, 20000, 1, vargmax));
  expect_near_all(logsumexp(rows, {-1}).to_vector(), naive(rows, 4, 20000, 1, vlse), 1e-6);
  Tensor cols = randn32({3000, 40}, 2);  // reduce across rows: R split over threads
  expect_near_all(sum(cols, {0}).to_vector(), naive(cols, 1, 3000, 40, vsum), 1e-6);
  EXPECT_EQ(amin(cols, {0}).to_vector(), naive(cols, 1, 3000, 40, vmin));
  EXPECT_EQ(xg::max(cols, 0).indices.to_vector(), naive(cols, 1, 3000, 40, vargmax));
  expect_near_all(logsumexp(cols, {0}).to_vector(), naive(cols, 1, 3000, 40, vlse), 1e-6);
  Tensor flat = randn32({70000}, 3);  // full reduction of one long row
  expect_near_all(sum(flat).to_vector(), naive(flat, 1, 70000, 1, vsum), 1e-6);
  Tensor many = randn32({300, 200}, 4);  // many rows, one per task
  expect_near_all(mean(many, {1}).to_vector(), naive(many, 300, 200, 1, [](const std::vector<double>& r) {
                    return vsum(r) / 200;
                  }), 1e-6);
}

TEST(Reduce, LargeInputsBackward) {
  Tensor x = randn32({4, 20000}, 5).requires_grad_();
  Tensor g = randn32({4}, 6);
  Tensor out = logsumexp(x, {1});
  backward({out}, {g});
  std::vector<double> xv = x.to_vector(), gv = g.to_vector(), ov = out.to_vector(), dx = x.grad().to_vector();
  for (std::size_t k = 0; k < xv.size(); k += 997)
    ASSERT_NEAR(dx[k], gv[k / 20000] * std::exp(xv[k] - ov[k / 20000]), 1e-6) << k;
  Tensor y = randn32({70000}, 7).requires_grad_();
  backward({mean(y)});
  std::vector<double> dy = y.grad().to_vector();
  for (double v : dy) ASSERT_FLOAT_EQ(v, 1.0f / 70000);
}

// --- hand-checked values and semantics -------------------------------------------------------

TEST(Reduce, ShapesAndKeepdim) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_EQ(sum(x).shape(), (Shape{}));
  EXPECT_EQ(sum(x, {}, true).shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(sum(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {-1, 0}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(amax(x, {0, 2}).shape(), (Shape{3}));
  EXPECT_EQ(xg::max(x, 1).indices.shape(), (Shape{2, 4}));
  EXPECT_EQ(xg::max(x, 1).indices.dtype(), kInt64);
  EXPECT_EQ(xg::max(x, 1, true).values.shape(), (Shape{2, 1, 4}));
}

TEST(Reduce, SimpleValues) {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}}, kFloat64);
  EXPECT_EQ(sum(x, {0}).to_vector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum(x, {1}).to_vector(), (std::vector<double>{6, 15}));
  EXPECT_EQ(mean(x).item(), 3.5);
  EXPECT_EQ(var(x, {1}).to_vector(), (std::vector<double>{1, 1}));
  EXPECT_DOUBLE_EQ(var(x, {1}, 0).to_vector()[0], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(xg::std(x, {0}, 0).to_vector()[2], 1.5);
  EXPECT_EQ(amin(x, {0}).to_vector(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(xg::max(x).item(), 6.0);
  EXPECT_EQ(xg::min(x, 1).indices.to_vector(), (std::vector<double>{0, 0}));
}

TEST(Reduce, ZeroDimAndEmpty) {
  Tensor s = scalar_tensor(3.0, kFloat64);
  EXPECT_EQ(sum(s, {0}).item(), 3.0);
  EXPECT_EQ(sum(s, {-1}).shape(), (Shape{}));
  EXPECT_EQ(amax(s).item(), 3.0);
  Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e, {0}).to_vector(), (std::vector<double>{0, 0, 0}));
  EXPECT_TRUE(std::isnan(mean(e, {0}).to_vector()[1]));
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));
}

TEST(Reduce, FloatSumAccumulatesInDouble) {
  // 2^24 + 1 + 1 + ... in float32 would stall at 2^24; a double accumulator does not.
  std::vector<double> v(1001, 1.0);
  v[0] = 16777216.0;
  Tensor x = from_vector(v, {1001});
  EXPECT_EQ(sum(x).item(), 16777216.0 + 1000.0);
}

TEST(Reduce, LogsumexpStableAndNegInf) {
  Tensor x = tensor({{1000, 1000}, {-kInf, -kInf}}, kFloat32);
  Tensor out = logsumexp(x, {1});
  EXPECT_FLOAT_EQ(out.to_vector()[0], 1000 + std::log(2.0f));
  EXPECT_EQ(out.to_vector()[1], -kInf);
}

TEST(Reduce, MaxDimGradientGoesToFirstIndexOnly) {
  Tensor x = tensor({{2, 5, 5}, {7, 7, 1}}, kFloat64).requires_grad_();
  ValuesIndices m = xg::max(x, 1);
  EXPECT_EQ(m.indices.to_vector(), (std::vector<double>{1, 0}));
  backward({m.values}, {tensor({10, 20}, kFloat64)});
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 10, 0, 20, 0, 0}));
}

TEST(Reduce, NanPropagatesLikeTorch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({{1, nan, 3, nan}, {4, 2, 8, 0}}, kFloat32);
  ValuesIndices m = xg::max(x, 1);
  EXPECT_TRUE(std::isnan(m.values.to_vector()[0]));
  EXPECT_EQ(m.values.to_vector()[1], 8.0);
  EXPECT_EQ(m.indices.to_vector(), (std::vector<double>{1, 2}));
  EXPECT_EQ(xg::min(x, 0).indices.to_vector(), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_TRUE(std::isnan(amax(x, {1}).to_vector()[0]));
  EXPECT_TRUE(std::isnan(amin(x).item()));
  EXPECT_TRUE(std::isnan(sum(x, {1}).to_vector()[0]));
}

TEST(Reduce, AmaxGradientSplitAmongTies) {
  Tensor x = tensor({{2, 5, 5}, {7, 7, 7}}, kFloat64).requires_grad_();
  backward({amax(x, {1})}, {tensor({10, 30}, kFloat64)});
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 5, 5, 10, 10, 10}));
}

// --- gradient checks (float64, central differences) --------------------------------------------

TEST(ReduceGrad, SumMean) {
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0]); }, {randn64({3, 4}, 1)});
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0], {-1}); }, {randn64({3, 4, 5}, 2)});
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0], {0}, true); }, {randn64({3, 4, 5}, 3)});
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0], {0, 2}); }, {randn64({3, 4, 5}, 4)});
  EXPECT_GRADCHECK([](const V& x) { return mean(x[0], {1, -1}, true); }, {randn64({2, 3, 4, 5}, 5)});
  EXPECT_GRADCHECK([](const V& x) { return mean(x[0], {1}); }, {randn64({3, 4, 5}, 6)});
}

TEST(ReduceGrad, VarStd) {
  EXPECT_GRADCHECK([](const V& x) { return var(x[0]); }, {randn64({3, 4}, 7)});
  EXPECT_GRADCHECK([](const V& x) { return var(x[0], {0, 2}, 0, true); }, {randn64({3, 4, 5}, 8)});
  EXPECT_GRADCHECK([](const V& x) { return xg::std(x[0], {-1}); }, {randn64({3, 4}, 9)});
  EXPECT_GRADCHECK([](const V& x) { return xg::std(x[0], {}, 0); }, {randn64({3, 4}, 10)});
}

TEST(ReduceGrad, MaxMin) {
  // randn values are distinct, so the extremes are differentiable points.
  EXPECT_GRADCHECK([](const V& x) { return amax(x[0], {-1}); }, {randn64({3, 5}, 11)});
  EXPECT_GRADCHECK([](const V& x) { return amin(x[0], {0, 2}, true); }, {randn64({3, 4, 5}, 12)});
  EXPECT_GRADCHECK([](const V& x) { return xg::max(x[0]); }, {randn64({3, 4}, 13)});
  EXPECT_GRADCHECK([](const V& x) { return xg::min(x[0]); }, {randn64({3, 4}, 14)});
  EXPECT_GRADCHECK([](const V& x) { return xg::max(x[0], 1).values; }, {randn64({3, 4, 5}, 15)});
  EXPECT_GRADCHECK([](const V& x) { return xg::min(x[0], -1, true).values; }, {randn64({3, 4}, 16)});
}

TEST(ReduceGrad, Logsumexp) {
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], {-1}); }, {randn64({3, 5}, 17)});
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], {0}, true); }, {randn64({3, 4, 5}, 18)});
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], {0, 2}); }, {randn64({3, 4, 5}, 19)});
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], {}); }, {randn64({2, 3}, 20)});
}

// --- errors -------------------------------------------------------------------------------------

TEST(ReduceErrors, DimOutOfRange) {
  Tensor x = zeros({2, 3});
  EXPECT_XG_ERROR(sum(x, {3}), "sum: dim 3 out of range for a 2-d tensor of shape [2,3]");
  EXPECT_XG_ERROR(mean(x, {-3}), "mean: dim -3 out of range");
  EXPECT_XG_ERROR(amax(x, {2}), "amax: dim 2 out of range");
  EXPECT_XG_ERROR(xg::max(x, 5), "max: dim 5 out of range");
  EXPECT_XG_ERROR(logsumexp(x, {7}), "logsumexp: dim 7 out of range");
  EXPECT_XG_ERROR(var(x, {2}), "var: dim 2 out of range");
  EXPECT_XG_ERROR(xg::std(x, {-5}), "std: dim -5 out of range");
}

TEST(ReduceErrors, DuplicateDims) {
  Tensor x = zeros({2, 3});
  EXPECT_XG_ERROR(sum(x, {1, -1}), "sum: dim 1 appears more than once in the dims [1,-1]");
  EXPECT_XG_ERROR(amin(x, {0, 0}), "amin: dim 0 appears more than once");
}

TEST(ReduceErrors, NonFloatInput) {
  Tensor i = arange(6);
  EXPECT_XG_ERROR(sum(i), "sum: expected a float32, float64 or bfloat16 tensor, got int64");
  EXPECT_XG_ERROR(xg::max(i, 0), "max: expected a float32, float64 or bfloat16 tensor, got int64");
  EXPECT_XG_ERROR(logsumexp(i, {0}), "logsumexp: expected a float32, float64 or bfloat16 tensor, got int64");
}

TEST(ReduceErrors, ExtremeOfNothing) {
  Tensor e = zeros({0, 3});
  EXPECT_XG_ERROR(amax(e, {0}), "amax: cannot reduce over a dim of size 0");
  EXPECT_XG_ERROR(xg::max(e), "max: cannot reduce over a dim of size 0");
  EXPECT_XG_ERROR(xg::min(e, 0), "min: cannot reduce over dim 0 of size 0");
}

// Tests for autograd/softmax.cpp: PyTorch values, float64 gradient checks, errors.
#include "autograd/softmax.hpp"

#include <cmath>
#include <utility>
#include <limits>

#include "autograd/elementwise.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using xg::test::kInf;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {


// Both ops, for the cases the fixture has under "softmax_<case>" and "log_softmax_<case>".
void expect_both(const std::string& suffix, int64_t dim) {
  expect_matches_torch("softmax", "softmax_" + suffix, [dim](const V& x) { return softmax(x[0], dim); });
  expect_matches_torch("softmax", "log_softmax_" + suffix, [dim](const V& x) { return log_softmax(x[0], dim); });
}

// x * scale as a float64 leaf (for gradchecks on large logits).
Tensor scaled64(const Shape& s, uint64_t seed, double scale) {
  Tensor t = (randn64(s, seed) * scale).detach();
  t.requires_grad_(true);
  return t;
}

}  // namespace

// --- values against PyTorch ---------------------------------------------------------------

TEST(SoftmaxTorch, AnyDim) {
  expect_both("last", -1);
  expect_both("first", 0);
  expect_both("middle", 1);
  expect_both("neg2", -2);
  expect_both("1d", 0);
}

TEST(SoftmaxTorch, LargeLogitsStayFinite) {
  // The classic overflow example: logits [10, 5, 100] * 100, and values up to 1e4.
  expect_both("large", -1);
  expect_both("huge", -1);
  expect_both("huge_dim0", 0);
  for (const char* c : {"softmax_large.f32.in0", "softmax_huge.f32.in0"}) {
    Tensor x = test::fixture("softmax").at(c);
    EXPECT_TRUE(isfinite_all(softmax(x, -1))) << c;
    EXPECT_TRUE(isfinite_all(log_softmax(x, -1))) << c;
  }
}

TEST(SoftmaxTorch, MaskedNegInfEntries) {
  expect_both("masked", -1);
  expect_both("masked_dim0", 0);
}

// Inputs large enough for the multithreaded paths, against plain double loops: forward and
// the fused backward, for dim last (contiguous rows) and dim in the middle (strided).
TEST(Softmax, LargeInputsMatchNaiveLoops) {
  for (bool log : {false, true}) {
    for (const auto& [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{64, 600}, 1}, {{8, 50, 100}, 1}}) {
      SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + shape_str(shape));
      Generator gen(9);
      Tensor x = randn(shape, kFloat32, &gen).requires_grad_();
      Tensor g = randn(shape, kFloat32, &gen);
      Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
      backward({y}, {g});
      const int64_t O = shape[0], D = shape[1], I = shape.size() > 2 ? shape[2] : 1;
      std::vector<double> xv = x.to_vector(), gv = g.to_vector(), yv = y.to_vector(), dx = x.grad().to_vector();
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < I; ++i) {
          auto at = [&](int64_t d) { return static_cast<std::size_t>((o * D + d) * I + i); };
          double m = -kInf, s = 0, gy = 0, gs = 0;
          for (int64_t d = 0; d < D; ++d) m = std::max(m, xv[at(d)]);
          for (int64_t d = 0; d < D; ++d) s += std::exp(xv[at(d)] - m);
          for (int64_t d = 0; d < D; ++d) {
            const double p = std::exp(xv[at(d)] - m) / s;
            gy += gv[at(d)] * p;
            gs += gv[at(d)];
          }
          for (int64_t d = 0; d < D; ++d) {
            const double p = std::exp(xv[at(d)] - m) / s;
            const double ey = log ? std::log(p) : p;
            const double edx = log ? gv[at(d)] - p * gs : p * (gv[at(d)] - gy);
            ASSERT_NEAR(yv[at(d)], ey, 1e-5 * std::max(1.0, std::abs(ey))) << o << "," << d << "," << i;
            ASSERT_NEAR(dx[at(d)], edx, 1e-5 * std::max(1.0, std::abs(edx))) << o << "," << d << "," << i;
          }
        }
    }
  }
}

// --- hand-checked values and semantics -------------------------------------------------------

TEST(Softmax, RowsSumToOneAndMaskedEntriesAreZero) {
  Tensor x = tensor({{1, 2, -kInf}, {-kInf, 0, -kInf}}, kFloat32);
  Tensor y = softmax(x, 1);
  std::vector<double> v = y.to_vector();
  EXPECT_NEAR(v[0] + v[1], 1.0, 1e-6);
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(v[3], 0.0);
  EXPECT_EQ(v[4], 1.0);
  Tensor l = log_softmax(x, 1);
  EXPECT_EQ(l.to_vector()[2], -kInf);
  EXPECT_EQ(l.to_vector()[4], 0.0);
}

TEST(Softmax, AllNegInfRowIsNanAsInTorch) {
  Tensor x = tensor({{-kInf, -kInf}}, kFloat32);
  EXPECT_TRUE(std::isnan(softmax(x, -1).to_vector()[0]));
  EXPECT_TRUE(std::isnan(log_softmax(x, -1).to_vector()[1]));
}

TEST(Softmax, ZeroDimAndEmpty) {
  EXPECT_EQ(softmax(scalar_tensor(5.0), 0).item(), 1.0);
  EXPECT_EQ(log_softmax(scalar_tensor(5.0), -1).item(), 0.0);
  EXPECT_EQ(softmax(zeros({0, 3}), 1).shape(), (Shape{0, 3}));
}

// --- gradient checks (float64, central differences) --------------------------------------------

TEST(SoftmaxGrad, Softmax) {
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], -1); }, {randn64({3, 7}, 1)});
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], 0); }, {randn64({4, 3, 5}, 2)});
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], -2); }, {randn64({2, 5, 3}, 3)});
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], 2); }, {scaled64({2, 3, 9}, 4, 5)});
}

TEST(SoftmaxGrad, LogSoftmax) {
  EXPECT_GRADCHECK([](const V& x) { return log_softmax(x[0], -1); }, {randn64({3, 7}, 5)});
  EXPECT_GRADCHECK([](const V& x) { return log_softmax(x[0], 0); }, {randn64({4, 3, 5}, 6)});
  EXPECT_GRADCHECK([](const V& x) { return log_softmax(x[0], 1); }, {randn64({2, 5, 3}, 7)});
  EXPECT_GRADCHECK([](const V& x) { return log_softmax(x[0], -1); }, {scaled64({2, 3, 9}, 8, 5)});
}

// --- errors -------------------------------------------------------------------------------------

TEST(SoftmaxErrors, DimOutOfRange) {
  EXPECT_XG_ERROR(softmax(zeros({2, 3}), 2), "softmax: dim 2 out of range for a 2-d tensor of shape [2,3]");
  EXPECT_XG_ERROR(log_softmax(zeros({2, 3}), -3), "log_softmax: dim -3 out of range");
}

TEST(SoftmaxErrors, NonFloatInput) {
  EXPECT_XG_ERROR(softmax(arange(4), 0), "softmax: expected a float32, float64 or bfloat16 tensor, got int64");
  EXPECT_XG_ERROR(log_softmax(arange(4), 0), "log_softmax: expected a float32, float64 or bfloat16 tensor, got int64");
}

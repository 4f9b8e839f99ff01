// Tests for autograd/softmax.cpp: PyTorch values, float64 gradient checks, errors.
#include "autograd/softmax.hpp"

#include <cmath>
#include <limits>

#include "autograd/elementwise.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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
  // The second seed's example: logits [10, 5, 100] * 100, and values up to 1e4.
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

TEST(SoftmaxTorch, ParallelPaths) {
  expect_both("parallel_rows", -1);
  expect_both("parallel_cols", 1);
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
  EXPECT_XG_ERROR(softmax(arange(4), 0), "softmax: expected a float32 or float64 tensor, got int64");
  EXPECT_XG_ERROR(log_softmax(arange(4), 0), "log_softmax: expected a float32 or float64 tensor, got int64");
}

// Tests for nn/init.cpp's orthogonal_: orthonormal rows or columns in every shape and dtype,
// the gain, PyTorch's result for the same normal draw, and its errors; SkipInitGuard.
#include "nn/init.hpp"

#include <algorithm>
#include <cmath>

#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;

namespace {

// w seen as [rows, cols] = [size(0), numel / size(0)]: the largest |G - gain^2 I| over the
// Gram matrix of its shorter side (W^T W when rows >= cols, W W^T otherwise), in double.
double gram_error(const Tensor& w, double gain) {
  const int64_t rows = w.shape()[0], cols = w.numel() / rows;
  const std::vector<double> v = w.to_vector();
  const bool tall = rows >= cols;
  const int64_t n = tall ? cols : rows, len = tall ? rows : cols;
  auto at = [&](int64_t vec, int64_t i) { return tall ? v[i * cols + vec] : v[vec * cols + i]; };
  double worst = 0;
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < n; ++b) {
      double dot = 0;
      for (int64_t i = 0; i < len; ++i) dot += at(a, i) * at(b, i);
      worst = std::max(worst, std::abs(dot - (a == b ? gain * gain : 0.0)));
    }
  return worst;
}

}  // namespace

TEST(NnInitOrthogonal, OrthonormalInEveryShapeAndDtype) {
  for (Dtype dt : {kFloat32, kFloat64}) {
    const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
    for (const Shape& shape : {Shape{3, 5}, Shape{5, 3}, Shape{4, 2, 3}, Shape{4, 4}, Shape{64, 32}, Shape{16, 48}}) {
      Tensor w = empty(shape, dt);
      Generator gen(11);
      init::orthogonal_(w, 1, &gen);
      EXPECT_EQ(w.shape(), shape);
      EXPECT_EQ(w.dtype(), dt);
      EXPECT_LE(gram_error(w, 1), tol) << dtype_name(dt) << " " << shape_str(shape);
    }
  }
}

TEST(NnInitOrthogonal, GainScalesTheOrthogonalMatrix) {
  for (Dtype dt : {kFloat32, kFloat64}) {
    Tensor w1 = empty({6, 4}, dt), w3 = empty({6, 4}, dt);
    Generator g1(5), g3(5);
    init::orthogonal_(w1, 1, &g1);
    init::orthogonal_(w3, 3, &g3);
    EXPECT_LE(gram_error(w3, 3), dt == kFloat32 ? 1e-4 : 1e-11);
    EXPECT_TRUE(test::tensors_close(w3, w1 * 3.0, 0, 0));
  }
}

TEST(NnInitOrthogonal, DrawsFromXgradsGenerator) {
  // orthogonal_ is orthogonal_from of a [rows, cols] normal draw from the generator given.
  Tensor w = empty({4, 2, 3}, kFloat64);
  Generator a(3), b(3);
  init::orthogonal_(w, 1, &a);
  const Tensor expected = init::orthogonal_from(normal({4, 6}, 0, 1, kFloat64, &b)).reshape({4, 2, 3});
  EXPECT_TRUE(test::tensors_close(w, expected, 0, 0));
  // The default generator: the same seed gives the same matrix.
  Tensor u = empty({3, 3}), v = empty({3, 3});
  manual_seed(9);
  init::orthogonal_(u);
  manual_seed(9);
  init::orthogonal_(v);
  EXPECT_TRUE(test::tensors_close(u, v, 0, 0));
}

TEST(NnInitOrthogonalTorch, SameNormalDrawGivesPyTorchsMatrix) {
  // PyTorch's QR then Q times sign(diag(R)): for each case, the normal matrix torch's
  // orthogonal_ drew and the tensor it wrote (gain applied, in the tensor's shape).
  const TensorMap& fx = test::fixture("nn_init");
  for (const char* name : {"tall", "wide", "square", "conv", "gain"}) {
    for (const char* tag : {"f32", "f64"}) {
      const std::string key = std::string(name) + "." + tag + ".";
      const Tensor& out = fx.at(key + "out");
      const double gain = fx.at(key + "gain").to_vector()[0];
      const Tensor q = init::orthogonal_from(fx.at(key + "normal")).reshape(out.shape()) * gain;
      const bool f32 = std::string(tag) == "f32";
      EXPECT_TRUE(test::tensors_close(q, out, 0, f32 ? 1e-5 : 1e-12)) << key;
    }
  }
}

TEST(NnInitOrthogonal, RHasAPositiveDiagonal) {
  // The sign convention itself: with A the taller orientation of the draw and Q what
  // orthogonal_from makes of it, R = Q^T A is upper triangular with R[j, j] > 0 (LAPACK's
  // Householder QR alone leaves negative entries there).
  for (const Shape& shape : {Shape{7, 4}, Shape{4, 7}}) {
    Generator gen(2);
    const Tensor a = normal(shape, 0, 1, kFloat64, &gen);
    const Tensor q = init::orthogonal_from(a);
    const bool wide = shape[0] < shape[1];
    const int64_t m = std::max(shape[0], shape[1]), n = std::min(shape[0], shape[1]);
    const std::vector<double> av = a.to_vector(), qv = q.to_vector();
    // Element (i, j) of the tall [m, n] orientation of a row-major [shape0, shape1] array.
    auto tall = [&](const std::vector<double>& v, int64_t i, int64_t j) { return wide ? v[j * m + i] : v[i * n + j]; };
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double r = 0;
        for (int64_t k = 0; k < m; ++k) r += tall(qv, k, i) * tall(av, k, j);
        if (i > j) {
          EXPECT_NEAR(r, 0, 1e-12) << shape_str(shape) << " R[" << i << "," << j << "]";
        } else if (i == j) {
          EXPECT_GT(r, 0) << shape_str(shape) << " R[" << i << "," << i << "]";
        }
      }
  }
}

TEST(NnInitOrthogonal, EmptyTensorIsLeftAlone) {
  Tensor w = empty({0, 3});
  init::orthogonal_(w);
  EXPECT_EQ(w.shape(), (Shape{0, 3}));
}

TEST(NnInitOrthogonal, Errors) {
  Tensor v = empty({5});
  EXPECT_XG_ERROR(init::orthogonal_(v), "orthogonal_: only tensors with 2 or more dimensions are supported, got [5]");
  Tensor ints = zeros({2, 2}, kInt64);
  EXPECT_XG_ERROR(init::orthogonal_(ints), "orthogonal_: needs float32 or float64, got int64 [2,2]");
  EXPECT_XG_ERROR(init::orthogonal_from(empty({2, 2, 2})),
                  "orthogonal_from: needs a 2-D [rows, cols] matrix, got [2,2,2]");
}

// Under the guard the random initialisers leave the tensor and the generator alone; the
// guard nests and restores; after it, they draw again.
TEST(NnInitSkip, GuardLeavesTensorsAndGeneratorAlone) {
  Generator gen(7), same(7);
  Tensor t = full({4, 6}, 3.0);
  {
    init::SkipInitGuard outer;
    {
      init::SkipInitGuard inner;
      EXPECT_TRUE(init::init_skipped());
    }
    EXPECT_TRUE(init::init_skipped());  // the inner guard restored the outer one's state
    init::normal_(t, 0, 1, &gen);
    init::uniform_(t, -1, 1, &gen);
    init::kaiming_uniform_(t, std::sqrt(5.0), &gen);
    init::xavier_normal_(t, 1, &gen);
    init::orthogonal_(t, 1, &gen);
  }
  EXPECT_FALSE(init::init_skipped());
  EXPECT_EQ(t.to_vector(), std::vector<double>(24, 3.0));
  Tensor a = zeros({4, 6}), b = zeros({4, 6});
  init::normal_(a, 0, 1, &gen);   // the generator was not advanced by the skipped calls
  init::normal_(b, 0, 1, &same);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_NE(a.to_vector(), std::vector<double>(24, 0.0));
}

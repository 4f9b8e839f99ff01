// Tests for autograd/matmul.cpp: matmul (every rank combination of torch.matmul), linear,
// bmm: gradient checks in float64, values against PyTorch, and error messages.
#include <omp.h>

#include <array>

#include "tests/torch_fixture.hpp"

namespace {

using xg::Tensor;
using xg::test::expect_matches_torch;
using xg::test::randn64;
using Ins = std::vector<Tensor>;

Tensor mm(const Ins& in) { return xg::matmul(in[0], in[1]); }
Tensor lin(const Ins& in) { return xg::linear(in[0], in[1], in.size() > 2 ? in[2] : Tensor()); }
Tensor bm(const Ins& in) { return xg::bmm(in[0], in[1]); }

// ---------------------------------------------------------------------------------------
// values and gradients against PyTorch

TEST(MatmulTorch, Ranks) {
  for (const char* c : {"vec_vec", "vec_mat", "mat_vec", "mat_mat", "batch_mat", "mat_batch", "bcast_4d", "vec_batch",
                        "batch_vec", "batch_batch", "bcast_rank"})
    expect_matches_torch("matmul", c, mm);
}

TEST(MatmulTorch, Linear) {
  for (const char* c : {"linear_bias", "linear_nobias", "linear_vec"}) expect_matches_torch("matmul", c, lin);
}

TEST(MatmulTorch, Bmm) { expect_matches_torch("matmul", "bmm", bm); }

// ---------------------------------------------------------------------------------------
// shapes and a hand-computed value

TEST(Matmul, SmallValuesAndShapes) {
  Tensor a = xg::tensor({{1, 2}, {3, 4}});
  Tensor b = xg::tensor({{5, 6}, {7, 8}});
  EXPECT_EQ(xg::matmul(a, b).to_vector(), (std::vector<double>{19, 22, 43, 50}));
  Tensor v = xg::tensor({1, 1});
  EXPECT_EQ(xg::matmul(v, v).shape(), xg::Shape{});
  EXPECT_EQ(xg::matmul(v, v).item(), 2);
  EXPECT_EQ(xg::matmul(v, b).to_vector(), (std::vector<double>{12, 14}));
  EXPECT_EQ(xg::matmul(a, v).to_vector(), (std::vector<double>{3, 7}));
  EXPECT_EQ(xg::matmul(xg::zeros({2, 1, 3, 4}), xg::zeros({1, 5, 4, 6})).shape(), (xg::Shape{2, 5, 3, 6}));
  EXPECT_EQ(xg::matmul(xg::zeros({4}), xg::zeros({2, 4, 3})).shape(), (xg::Shape{2, 3}));
  EXPECT_EQ(xg::matmul(xg::zeros({2, 3, 4}), xg::zeros({4})).shape(), (xg::Shape{2, 3}));
}

TEST(Matmul, EmptyInnerSizeGivesZeros) {
  Tensor out = xg::matmul(xg::ones({2, 0}), xg::ones({0, 3}));
  EXPECT_EQ(out.shape(), (xg::Shape{2, 3}));
  EXPECT_EQ(out.to_vector(), std::vector<double>(6, 0.0));
  EXPECT_EQ(xg::linear(xg::ones({0, 4}), xg::ones({5, 4}), xg::ones({5})).shape(), (xg::Shape{0, 5}));
}

TEST(Matmul, LinearBiasAddsPerRow) {
  Tensor x = xg::tensor({{1, 2}, {3, 4}});
  Tensor w = xg::tensor({{1, 0}, {0, 1}, {1, 1}});
  Tensor b = xg::tensor({10, 20, 30});
  EXPECT_EQ(xg::linear(x, w, b).to_vector(), (std::vector<double>{11, 22, 33, 13, 24, 37}));
}

TEST(Matmul, GradOnlyForInputsThatRequireIt) {
  Tensor a = randn64({3, 4}, 1);
  Tensor b = randn64({4, 2}, 2).detach();
  Tensor y = xg::matmul(a, b);
  y.backward(xg::ones({3, 2}, xg::kFloat64));
  ASSERT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  // da = ones @ b^T: each row is the row sums of b.
  std::vector<double> bv = b.to_vector(), ga = a.grad().to_vector();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(ga[i * 4 + j], bv[j * 2] + bv[j * 2 + 1], 1e-12);
}

// Large products are split into one gemm per thread, over C's rows or columns (matmul.cpp).
// Naive float64 reference: c[i, j] = sum_k a[i, k] b[k, j] for a [n, k] and b [k, m].
std::vector<double> naive_mm(const std::vector<double>& a, const std::vector<double>& b, int64_t n, int64_t k,
                             int64_t m) {
  std::vector<double> c(static_cast<std::size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < m; ++j) c[i * m + j] += a[i * k + p] * b[p * m + j];
  return c;
}

std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-9) << what << " at " << i;
}

TEST(Matmul, SplitAcrossThreadsMatchesNaiveProducts) {
  // Sizes above the split threshold (262,144 multiply-adds), not multiples of 16. Forward,
  // input gradient and weight gradient cover every transpose flag, split by rows and by
  // columns: x [n, k] @ w [m, k]^T with n > m and n < m.
  for (auto [n, k, m] : {std::array<int64_t, 3>{135, 70, 33}, std::array<int64_t, 3>{40, 70, 150},
                         std::array<int64_t, 3>{200, 60, 31}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " k=" << k << " m=" << m);
    const std::vector<double> xv = randn64({n, k}, 51).to_vector(), wv = randn64({m, k}, 52).to_vector(),
                              gv = randn64({n, m}, 53).to_vector();
    const std::vector<double> y_ref = naive_mm(xv, transposed(wv, m, k), n, k, m);   // x w^T
    const std::vector<double> dx_ref = naive_mm(gv, wv, n, m, k);                    // g w
    const std::vector<double> dw_ref = naive_mm(transposed(gv, n, m), xv, m, n, k);  // g^T x
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads");
      Tensor x = xg::from_vector(xv, {n, k}, xg::kFloat64).requires_grad_(true), w = xg::from_vector(wv, {m, k}, xg::kFloat64).requires_grad_(true);
      Tensor y, y2;
      {
        const xg::test::OmpThreadsScope scope(threads);
        y = xg::linear(x, w, Tensor());
        y.backward(xg::from_vector(gv, {n, m}, xg::kFloat64));
        y2 = xg::matmul(x.detach(), xg::transpose(w.detach(), 0, 1));  // the plain a @ b path
      }
      expect_near_all(y.to_vector(), y_ref, "linear");
      expect_near_all(x.grad().to_vector(), dx_ref, "dx");
      expect_near_all(w.grad().to_vector(), dw_ref, "dw");
      expect_near_all(y2.to_vector(), y_ref, "matmul");
    }
  }
}

// A float32 linear of one row (a decoded token) runs on xgrad's matrix-vector kernel
// (detail/gemv.hpp): against float64 sums of the same float32 inputs, for every K around the
// kernel's vector steps (tails of 1 to 2 vectors), with and without a bias, 1-D and [1, K]
// inputs, on 1 and 2 threads (300 x 1000 splits the rows of w over them).
TEST(Matmul, OneRowFloat32LinearMatchesFloat64Sums) {
  for (int64_t k : {1, 5, 15, 16, 17, 31, 32, 33, 47, 64, 100, 1000})
    for (int64_t n : {1, 7, 300}) {
      SCOPED_TRACE(::testing::Message() << "k=" << k << " n=" << n);
      const Tensor x = randn64({k}, 81).to(xg::kFloat32), w = randn64({n, k}, 82).to(xg::kFloat32),
                   b = randn64({n}, 83).to(xg::kFloat32);
      const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
      std::vector<double> want(n), want_bias(n);
      double scale = 0;  // sum of |x_j w_ij|: float32's rounding is relative to it
      for (int64_t i = 0; i < n; ++i) {
        double s = 0, a = 0;
        for (int64_t j = 0; j < k; ++j) {
          s += xv[j] * wv[i * k + j];
          a += std::abs(xv[j] * wv[i * k + j]);
        }
        want[i] = s;
        want_bias[i] = s + bv[i];
        scale = std::max(scale, a + std::abs(bv[i]));
      }
      for (int threads : {1, 2}) {
        const xg::test::OmpThreadsScope scope(threads);
        for (const Tensor& in : {x, xg::reshape(x, {1, k})}) {
          const std::vector<double> got = xg::linear(in, w).to_vector(), got_bias = xg::linear(in, w, b).to_vector();
          ASSERT_EQ(got.size(), static_cast<std::size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-6 * scale) << "row " << i << ", " << threads << " threads";
            ASSERT_NEAR(got_bias[i], want_bias[i], 2e-6 * scale) << "row " << i << " with bias";
          }
        }
      }
    }
}

// linear_cat writes each product into its columns of one result (C's row stride the whole
// width) and reads g's columns in place in backward: sizes above the split threshold, split by
// rows (out 33 < 135 rows) and by columns (out 150), on 1-3 threads, against naive products.
TEST(Matmul, LinearCatWritesEachProductIntoItsColumns) {
  const int64_t n = 135, k = 70;
  const std::array<int64_t, 3> outs = {33, 150, 20};
  const int64_t width = 33 + 150 + 20;
  const std::vector<double> xv = randn64({n, k}, 61).to_vector(), gv = randn64({n, width}, 62).to_vector();
  std::vector<std::vector<double>> wv, bv;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    wv.push_back(randn64({outs[i], k}, 63 + i).to_vector());
    bv.push_back(randn64({outs[i]}, 66 + i).to_vector());
  }
  // References: y = [x w_0^T + b_0, ...], dx = sum_i g_i w_i, dw_i = g_i^T x, db_i = column sums of g_i.
  std::vector<double> y_ref(n * width), dx_ref(n * k, 0.0);
  std::vector<std::vector<double>> dw_ref, db_ref;
  int64_t off = 0;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const int64_t m = outs[i];
    std::vector<double> g_i(n * m), db(m, 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < m; ++c) {
        g_i[r * m + c] = gv[r * width + off + c];
        db[c] += g_i[r * m + c];
      }
    const std::vector<double> y_i = naive_mm(xv, transposed(wv[i], m, k), n, k, m);
    const std::vector<double> dx_i = naive_mm(g_i, wv[i], n, m, k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < m; ++c) y_ref[r * width + off + c] = y_i[r * m + c] + bv[i][c];
    for (int64_t j = 0; j < n * k; ++j) dx_ref[j] += dx_i[j];
    dw_ref.push_back(naive_mm(transposed(g_i, n, m), xv, m, n, k));
    db_ref.push_back(db);
    off += m;
  }
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    Tensor x = xg::from_vector(xv, {n, k}, xg::kFloat64).requires_grad_(true);
    std::vector<Tensor> ws, bs;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      ws.push_back(xg::from_vector(wv[i], {outs[i], k}, xg::kFloat64).requires_grad_(true));
      bs.push_back(xg::from_vector(bv[i], {outs[i]}, xg::kFloat64).requires_grad_(true));
    }
    Tensor y;
    {
      const xg::test::OmpThreadsScope scope(threads);
      y = xg::linear_cat(x, ws, bs);
      y.backward(xg::from_vector(gv, {n, width}, xg::kFloat64));
    }
    ASSERT_EQ(y.shape(), (xg::Shape{n, width}));
    expect_near_all(y.to_vector(), y_ref, "y");
    expect_near_all(x.grad().to_vector(), dx_ref, "dx");
    for (std::size_t i = 0; i < outs.size(); ++i) {
      expect_near_all(ws[i].grad().to_vector(), dw_ref[i], "dw");
      expect_near_all(bs[i].grad().to_vector(), db_ref[i], "db");
    }
  }
}

// ---------------------------------------------------------------------------------------
// gradient checks (float64, random upstream gradient)

TEST(MatmulGrad, Ranks) {
  EXPECT_GRADCHECK(mm, {randn64({5}, 1), randn64({5}, 2)});
  EXPECT_GRADCHECK(mm, {randn64({4}, 3), randn64({4, 3}, 4)});
  EXPECT_GRADCHECK(mm, {randn64({3, 4}, 5), randn64({4}, 6)});
  EXPECT_GRADCHECK(mm, {randn64({3, 4}, 7), randn64({4, 5}, 8)});
}

TEST(MatmulGrad, Batched) {
  EXPECT_GRADCHECK(mm, {randn64({2, 3, 4}, 11), randn64({4, 5}, 12)});         // folded into M
  EXPECT_GRADCHECK(mm, {randn64({3, 4}, 13), randn64({2, 4, 5}, 14)});         // a broadcast
  EXPECT_GRADCHECK(mm, {randn64({2, 1, 3, 4}, 15), randn64({1, 5, 4, 6}, 16)}); // both broadcast
  EXPECT_GRADCHECK(mm, {randn64({4}, 17), randn64({2, 4, 3}, 18)});
  EXPECT_GRADCHECK(mm, {randn64({2, 3, 4}, 19), randn64({4}, 20)});
  EXPECT_GRADCHECK(mm, {randn64({3, 1, 2, 4}, 21), randn64({2, 4, 3}, 22)});   // rank broadcast
  EXPECT_GRADCHECK(mm, {randn64({2, 3, 4}, 23), randn64({2, 4, 5}, 24)});
}

TEST(MatmulGrad, SameTensorBothSides) {
  EXPECT_GRADCHECK([](const Ins& in) { return xg::matmul(in[0], in[0]); }, {randn64({3, 3}, 25)});
}

TEST(MatmulGrad, Linear) {
  EXPECT_GRADCHECK(lin, {randn64({2, 3, 4}, 31), randn64({5, 4}, 32), randn64({5}, 33)});
  EXPECT_GRADCHECK(lin, {randn64({2, 3, 4}, 34), randn64({5, 4}, 35)});
  EXPECT_GRADCHECK(lin, {randn64({4}, 36), randn64({5, 4}, 37), randn64({5}, 38)});
}

TEST(MatmulGrad, LinearCat) {
  EXPECT_GRADCHECK([](const Ins& in) { return xg::linear_cat(in[0], {in[1], in[2]}, {in[3], in[4]}); },
                   {randn64({2, 3, 4}, 71), randn64({5, 4}, 72), randn64({2, 4}, 73), randn64({5}, 74),
                    randn64({2}, 75)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::linear_cat(in[0], {in[1], in[2], in[3]}); },
                   {randn64({3, 4}, 76), randn64({1, 4}, 77), randn64({3, 4}, 78), randn64({2, 4}, 79)});
}

TEST(MatmulGrad, Bmm) { EXPECT_GRADCHECK(bm, {randn64({3, 2, 4}, 41), randn64({3, 4, 5}, 42)}); }

// ---------------------------------------------------------------------------------------
// a weight's gradient over two micro-batches (the engine adds the second into .grad)

// Reference for w.grad after backward of linear(x, w) with upstream g: g^T x, [out, in].
std::vector<double> weight_grad(const Tensor& g, const Tensor& x, int64_t rows, int64_t out, int64_t in) {
  return naive_mm(transposed(g.to_vector(), rows, out), x.to_vector(), out, rows, in);
}

TEST(MatmulAccumulate, LinearWeightGradOfTwoMicroBatchesIsTheirSum) {
  Tensor w = randn64({3, 4}, 51), b = randn64({3}, 52);
  const Tensor x1 = randn64({5, 4}, 53).detach(), x2 = randn64({5, 4}, 54).detach();
  const Tensor g1 = randn64({5, 3}, 55).detach(), g2 = randn64({5, 3}, 56).detach();
  xg::linear(x1, w, b).backward(g1);
  const void* first = w.grad().raw_data();
  xg::linear(x2, w, b).backward(g2);
  EXPECT_EQ(w.grad().raw_data(), first);  // the same .grad buffer, added into in place
  std::vector<double> want = weight_grad(g1, x1, 5, 3, 4), second = weight_grad(g2, x2, 5, 3, 4);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += second[i];
  expect_near_all(w.grad().to_vector(), want, "w.grad");
}

TEST(MatmulAccumulate, MatmulWeightGradOfTwoMicroBatchesIsTheirSum) {
  // x [2, 3, 4] @ w [4, 5] folds the batch into M; w.grad = sum over the rows of x^T g.
  Tensor w = randn64({4, 5}, 61);
  const Tensor x1 = randn64({2, 3, 4}, 62).detach(), x2 = randn64({2, 3, 4}, 63).detach();
  const Tensor g1 = randn64({2, 3, 5}, 64).detach(), g2 = randn64({2, 3, 5}, 65).detach();
  xg::matmul(x1, w).backward(g1);
  xg::matmul(x2, w).backward(g2);
  std::vector<double> want = naive_mm(transposed(x1.to_vector(), 6, 4), g1.to_vector(), 4, 6, 5);
  const std::vector<double> second = naive_mm(transposed(x2.to_vector(), 6, 4), g2.to_vector(), 4, 6, 5);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += second[i];
  expect_near_all(w.grad().to_vector(), want, "w.grad");
}

TEST(MatmulAccumulate, TiedWeightSumsTheProductAndTheOtherUse) {
  // w feeds linear and, in the same graph, w * 2 summed: both gradients reach w.grad, on top
  // of the first backward's.
  Tensor w = randn64({3, 4}, 71);
  const Tensor x = randn64({5, 4}, 72).detach(), g = randn64({5, 3}, 73).detach();
  xg::linear(x, w).backward(g);  // w.grad = g^T x
  Tensor y = xg::linear(x, w);
  xg::backward({y, xg::sum(w * 2.0)}, {g, Tensor()});
  std::vector<double> want = weight_grad(g, x, 5, 3, 4);
  for (double& v : want) v = 2 * v + 2;
  expect_near_all(w.grad().to_vector(), want, "w.grad");
}

TEST(MatmulAccumulate, GradLeavesAnExistingGradAlone) {
  Tensor w = randn64({3, 4}, 81);
  const Tensor x = randn64({5, 4}, 82).detach(), g = randn64({5, 3}, 83).detach();
  xg::linear(x, w).backward(g);
  const std::vector<double> before = w.grad().to_vector();
  const std::vector<Tensor> got = xg::grad({xg::linear(x, w)}, {w}, {g});
  EXPECT_EQ(w.grad().to_vector(), before);
  expect_near_all(got[0].to_vector(), weight_grad(g, x, 5, 3, 4), "xg::grad");
}

TEST(MatmulAccumulate, AHeldGradIsAddedInto) {
  // A handle the caller keeps on w.grad: the engine adds into it, as PyTorch's accumulation
  // does.
  Tensor w = randn64({3, 4}, 91);
  const Tensor x = randn64({5, 4}, 92).detach(), g = randn64({5, 3}, 93).detach();
  xg::linear(x, w).backward(g);
  const Tensor held = w.grad();
  xg::linear(x, w).backward(g);
  std::vector<double> want = weight_grad(g, x, 5, 3, 4);
  for (double& v : want) v *= 2;
  expect_near_all(held.to_vector(), want, "held w.grad");
}

// Two micro-batches' weight gradient in .grad must be, bit for bit, the sum of each computed
// alone: that is what 2 ranks x 1 micro-batch compute (each rank's gradient, then their sum),
// so a run keeps its exact numbers under any ranks x --grad-accum layout and across a resume
// under another one (tests/test_finetune_distributed.cpp). A product adding into .grad itself
// (gemm with beta = 1) breaks it: the library then sums C + AB in its own order (oneDNN, and
// OpenBLAS once it splits K into blocks), not (AB) + C. K here is 2048 rows, blocked by both.
TEST(MatmulAccumulate, TwoMicroBatchesSumBitwiseLikeTwoRanksOnEveryBackend) {
  const xg::test::GemmBackendGuard guard;
  for (xg::GemmBackend backend : {xg::GemmBackend::OpenBLAS, xg::GemmBackend::OneDNN}) {
    xg::set_gemm_backend(backend);
    Tensor w = xg::randn({96, 64}).requires_grad_();
    const Tensor x1 = xg::randn({2048, 64}), x2 = xg::randn({2048, 64});
    const Tensor g1 = xg::randn({2048, 96}), g2 = xg::randn({2048, 96});
    const Tensor alone1 = xg::grad({xg::linear(x1, w)}, {w}, {g1})[0];
    const Tensor alone2 = xg::grad({xg::linear(x2, w)}, {w}, {g2})[0];
    const std::vector<double> a = alone1.to_vector(), b = alone2.to_vector();
    xg::linear(x1, w).backward(g1);
    xg::linear(x2, w).backward(g2);
    const std::vector<double> got = w.grad().to_vector();
    ASSERT_EQ(got.size(), a.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      differ += got[i] != static_cast<double>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
    EXPECT_EQ(differ, 0u) << xg::gemm_backend_name(backend) << ": " << differ << " of " << got.size()
                          << " weight gradients differ from the sum of the two alone";
  }
}

// ---------------------------------------------------------------------------------------
// errors

TEST(MatmulErrors, InnerSizes) {
  try {
    xg::matmul(xg::zeros({2, 3}), xg::zeros({4, 5}));
    ADD_FAILURE() << "no error thrown";
  } catch (const xg::Error& e) {
    EXPECT_STREQ(e.what(), "matmul: cannot multiply [2,3] by [4,5] (inner sizes 3 and 4 differ)");
  }
  EXPECT_XG_ERROR(xg::matmul(xg::zeros({3}), xg::zeros({4})), "cannot multiply [3] by [4] (inner sizes 3 and 4");
  EXPECT_XG_ERROR(xg::matmul(xg::zeros({2, 3, 4}), xg::zeros({5})), "inner sizes 4 and 5 differ");
}

TEST(MatmulErrors, MixedDtypes) {
  EXPECT_XG_ERROR(xg::matmul(xg::zeros({2, 3}), xg::zeros({3, 4}, xg::kFloat64)),
                  "matmul: dtype mismatch, float32 [2,3] and float64 [3,4]");
  EXPECT_XG_ERROR(xg::matmul(xg::zeros({2, 3}, xg::kInt64), xg::zeros({3, 4}, xg::kInt64)),
                  "matmul: expected a float32 or float64 tensor, got int64");
}

TEST(MatmulErrors, ZeroDim) {
  EXPECT_XG_ERROR(xg::matmul(xg::scalar_tensor(2), xg::zeros({3})),
                  "matmul: both arguments need at least 1 dimension, got [] and [3]");
  EXPECT_XG_ERROR(xg::matmul(xg::zeros({3}), xg::scalar_tensor(2)), "at least 1 dimension");
}

TEST(MatmulErrors, BatchDimsDoNotBroadcast) {
  EXPECT_XG_ERROR(xg::matmul(xg::zeros({2, 3, 4}), xg::zeros({3, 4, 5})),
                  "matmul: batch dims [2] of [2,3,4] and [3] of [3,4,5] do not broadcast (2 vs 3)");
}

TEST(MatmulErrors, Linear) {
  EXPECT_XG_ERROR(xg::linear(xg::zeros({2, 3}), xg::zeros({4, 5})),
                  "linear: weight must be [out, in] with in = 3 (the last dim of input [2,3]), got [4,5]");
  EXPECT_XG_ERROR(xg::linear(xg::zeros({2, 3}), xg::zeros({3})), "linear: weight must be [out, in]");
  EXPECT_XG_ERROR(xg::linear(xg::zeros({2, 3}), xg::zeros({4, 3}), xg::zeros({3})),
                  "linear: bias must be [out] = [4] for weight [4,3], got [3]");
  EXPECT_XG_ERROR(xg::linear(xg::zeros({2, 3}), xg::zeros({4, 3}), xg::zeros({1, 4})), "linear: bias must be [out]");
  EXPECT_XG_ERROR(xg::linear(xg::zeros({2, 3}), xg::zeros({4, 3}, xg::kFloat64)), "linear: dtype mismatch");
  EXPECT_XG_ERROR(xg::linear(xg::scalar_tensor(1), xg::zeros({4, 3})), "linear: input needs at least 1 dimension");
}

TEST(MatmulErrors, LinearCat) {
  EXPECT_XG_ERROR(xg::linear_cat(xg::zeros({2, 3}), {}), "linear_cat: needs at least one weight");
  EXPECT_XG_ERROR(xg::linear_cat(xg::zeros({2, 3}), {xg::zeros({4, 3}), xg::zeros({2, 3})}, {xg::zeros({4})}),
                  "linear_cat: 2 weights take 2 biases or none, got 1");
  EXPECT_XG_ERROR(xg::linear_cat(xg::zeros({2, 3}), {xg::zeros({4, 3}), xg::zeros({2, 5})}),
                  "linear_cat: weight must be [out, in] with in = 3 (the last dim of input [2,3]), got [2,5]");
  EXPECT_XG_ERROR(xg::linear_cat(xg::zeros({2, 3}), {xg::zeros({4, 3})}, {xg::zeros({3})}),
                  "linear_cat: bias must be [out] = [4] for weight [4,3], got [3]");
}

TEST(MatmulErrors, Bmm) {
  EXPECT_XG_ERROR(xg::bmm(xg::zeros({2, 3}), xg::zeros({3, 4})), "bmm: expected two 3-D tensors");
  EXPECT_XG_ERROR(xg::bmm(xg::zeros({2, 3, 4}), xg::zeros({3, 4, 5})), "bmm: batch sizes differ: [2,3,4] and [3,4,5]");
  EXPECT_XG_ERROR(xg::bmm(xg::zeros({2, 3, 4}), xg::zeros({2, 5, 6})),
                  "bmm: cannot multiply [2,3,4] by [2,5,6] (inner sizes 4 and 5 differ)");
}

}  // namespace

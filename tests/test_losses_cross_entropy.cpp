// Tests for losses/cross_entropy.cpp: PyTorch values (a plain-PyTorch cross_entropy_loss
// through a max-shifted log-softmax, tests/fixtures/gen_losses.py, and F.cross_entropy with
// every reduction, ignore_index and label smoothing), float64 gradient checks, extreme
// logits, the parallel path, gradient accumulation, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/shape.hpp"
#include "losses/cross_entropy.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using xg::test::ids;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

Reduction reduction_of(const std::string& name) {
  return name == "none" ? Reduction::None : name == "sum" ? Reduction::Sum : Reduction::Mean;
}

// Targets as an int64 tensor.

}  // namespace

// --- values against PyTorch ---------------------------------------------------------------

TEST(LossesCrossEntropyTorch, PlainPyTorchFunction) {
  expect_matches_torch("losses", "ce_seed", [](const V& x) { return cross_entropy(x[0], x[1]); });
}

TEST(LossesCrossEntropyTorch, ReductionsIgnoreIndexAndLabelSmoothing) {
  for (const std::string red : {"mean", "sum", "none"}) {
    SCOPED_TRACE(red);
    const Reduction r = reduction_of(red);
    expect_matches_torch("losses", "ce_" + red, [r](const V& x) { return cross_entropy(x[0], x[1], -100, r); });
    expect_matches_torch("losses", "ce_ls_" + red,
                         [r](const V& x) { return cross_entropy(x[0], x[1], -100, r, 0.15); });
    expect_matches_torch("losses", "ce_3d_" + red, [r](const V& x) { return cross_entropy(x[0], x[1], -100, r); });
  }
  expect_matches_torch("losses", "ce_ignore3", [](const V& x) { return cross_entropy(x[0], x[1], 3); });
  expect_matches_torch("losses", "ce_1d", [](const V& x) { return cross_entropy(x[0], x[1]); });
  // 37 classes: the SIMD body of both dtypes (8 and 16 lanes with AVX-512) and a tail
  expect_matches_torch("losses", "ce_wide",
                       [](const V& x) { return cross_entropy(x[0], x[1], -100, Reduction::None, 0.05); });
}

TEST(LossesCrossEntropyTorch, AllTargetsIgnored) {
  // sum and none: 0 with a zero gradient; mean: NaN (0/0) with a zero gradient, as PyTorch 1.13.
  for (const std::string red : {"mean", "sum", "none"}) {
    SCOPED_TRACE(red);
    const Reduction r = reduction_of(red);
    expect_matches_torch("losses", "ce_all_ignored_" + red,
                         [r](const V& x) { return cross_entropy(x[0], x[1], -100, r, 0.1); });
  }
  Tensor x = randn64({3, 4}, 1);
  Tensor t = ids({-100, -100, -100}, {3});
  Tensor s = cross_entropy(x, t, -100, Reduction::Sum);
  EXPECT_EQ(s.item(), 0.0);
  s.backward();
  for (double g : x.grad().to_vector()) EXPECT_EQ(g, 0.0);
  EXPECT_TRUE(std::isnan(cross_entropy(x, t).item()));
}

TEST(LossesCrossEntropyTorch, HugeLogitsStayFinite) {
  expect_matches_torch("losses", "ce_huge", [](const V& x) { return cross_entropy(x[0], x[1]); });
  expect_matches_torch("losses", "ce_huge_ls",
                       [](const V& x) { return cross_entropy(x[0], x[1], -100, Reduction::Sum, 0.1); });
  Tensor x = test::fixture("losses").at("ce_huge.f32.in0").clone().detach().requires_grad_();
  Tensor loss = cross_entropy(x, test::fixture("losses").at("ce_huge.f32.in1"), -100, Reduction::Mean, 0.1);
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item()));
  EXPECT_TRUE(isfinite_all(x.grad()));
}

// --- gradient checks ------------------------------------------------------------------------

TEST(LossesCrossEntropy, Gradcheck) {
  Tensor t = ids({2, -100, 0, 4, 1, -100}, {6});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
    for (double eps : {0.0, 0.2}) {
      SCOPED_TRACE(std::string(reduction_name(r)) + " eps " + std::to_string(eps));
      EXPECT_GRADCHECK([&](const V& in) { return cross_entropy(in[0], in[1], -100, r, eps); },
                       {randn64({6, 19}, 2), t});
    }
  // [B, T, V] with [B, T] targets, and logits of +-1e4 (19 classes: SIMD body and tail)
  Tensor t3 = ids({0, 3, -100, 6, 2, 1}, {2, 3});
  EXPECT_GRADCHECK([](const V& in) { return cross_entropy(in[0], in[1], -100, Reduction::None, 0.1); },
                   {randn64({2, 3, 19}, 3), t3});
  Tensor huge = (randn64({4, 19}, 4) * 1e4).detach().requires_grad_();
  EXPECT_GRADCHECK([](const V& in) { return cross_entropy(in[0], in[1], -100, Reduction::Mean, 0.1); },
                   {huge, ids({0, 5, 2, 3}, {4})});
}

// Rows large enough for the multithreaded path, against plain double loops.
TEST(LossesCrossEntropy, LargeInputMatchesNaiveLoops) {
  const int64_t N = 64, C = 700;
  Generator gen(5);
  Tensor x = (randn({N, C}, kFloat32, &gen) * 3.0).detach().requires_grad_();
  std::vector<int64_t> tv(N);
  for (int64_t i = 0; i < N; ++i) tv[static_cast<std::size_t>(i)] = i % 7 == 3 ? -100 : (i * 37) % C;
  const double eps = 0.1;
  Tensor loss = cross_entropy(x, ids(tv, {N}), -100, Reduction::Mean, eps);
  loss.backward();
  std::vector<double> xv = x.to_vector(), gv = x.grad().to_vector();
  double total = 0;
  int64_t n = 0;
  std::vector<double> expect_grad(xv.size(), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = tv[static_cast<std::size_t>(i)];
    if (t == -100) continue;
    ++n;
    double m = -INFINITY, s = 0, sx = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, xv[static_cast<std::size_t>(i * C + c)]);
    for (int64_t c = 0; c < C; ++c) {
      s += std::exp(xv[static_cast<std::size_t>(i * C + c)] - m);
      sx += xv[static_cast<std::size_t>(i * C + c)];
    }
    const double lse = m + std::log(s);
    total += (1 - eps) * (lse - xv[static_cast<std::size_t>(i * C + t)]) + eps / C * (C * lse - sx);
    for (int64_t c = 0; c < C; ++c)
      expect_grad[static_cast<std::size_t>(i * C + c)] =
          std::exp(xv[static_cast<std::size_t>(i * C + c)] - lse) - eps / C - (c == t ? 1 - eps : 0.0);
  }
  EXPECT_NEAR(loss.item(), total / n, 1e-5 * total / n);
  for (auto& g : expect_grad) g /= static_cast<double>(n);
  EXPECT_TRUE(test::tensors_close(x.grad(), from_vector(expect_grad, {N, C}), 1e-4, 1e-7));
}

// Sum over micro-batches, each divided by the whole batch's target count, equals the mean
// over the whole batch; so do the accumulated gradients.
TEST(LossesCrossEntropy, GradientAccumulationInvariance) {
  Tensor logits = randn64({8, 6}, 6);
  Tensor t = ids({1, -100, 5, 0, -100, 2, 3, 4}, {8});
  Tensor whole = cross_entropy(logits, t);
  whole.backward();
  Tensor g_whole = logits.grad().clone();
  logits.zero_grad();
  const double n_total = 6;  // targets that are not ignored
  double acc = 0;
  for (int64_t k = 0; k < 4; ++k) {
    Tensor part = cross_entropy(narrow(logits, 0, 2 * k, 2), narrow(t, 0, 2 * k, 2), -100, Reduction::Sum) / n_total;
    part.backward();
    acc += part.item();
  }
  EXPECT_NEAR(acc, whole.item(), 1e-12);
  EXPECT_TRUE(test::tensors_close(logits.grad(), g_whole, 1e-12, 1e-14));
}

// --- errors -----------------------------------------------------------------------------------

TEST(LossesCrossEntropy, Errors) {
  Tensor x = randn64({4, 10}, 7);
  EXPECT_XG_ERROR(cross_entropy(x, ids({1, 2, 3, 12}, {4})),
                  "cross_entropy: target 12 out of range for 10 classes (at position 3");
  EXPECT_XG_ERROR(cross_entropy(x, ids({1, -1, 3, 2}, {4})), "target -1 out of range");
  EXPECT_XG_ERROR(cross_entropy(randn64({2, 3, 10}, 8), ids({1, 2, 3, 4, 5, 99}, {2, 3})),
                  "target 99 out of range for 10 classes (at position [1,2]");
  EXPECT_XG_ERROR(cross_entropy(x, ids({1, 2, 3, 4, 5}, {5})),
                  "cross_entropy: logits [4,10] and targets [5] do not match");
  EXPECT_XG_ERROR(cross_entropy(x, zeros({4}, kFloat64)),
                  "cross_entropy: targets must be int64 class indices, got float64");
  EXPECT_XG_ERROR(cross_entropy(ids({1, 2}, {2}), ids({0}, {})), "cross_entropy: logits must be float32 or float64");
  EXPECT_XG_ERROR(cross_entropy(x, ids({1, 2, 3, 4}, {4}), -100, Reduction::Mean, 1.5),
                  "label_smoothing must be in [0, 1], got 1.5");
  EXPECT_XG_ERROR(cross_entropy(x, ids({1, 2, 3, 4}, {4}), -100, Reduction::BatchMean), "batchmean is only for kl_div");
}

// Tests for losses/logprobs.cpp: token and sequence log-probs (TRL's get_batch_logps without
// the shift) and entropy_from_logits against PyTorch, gradient checks, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/index.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "autograd/softmax.hpp"
#include "losses/cross_entropy.hpp"
#include "losses/logprobs.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

TEST(LossesLogprobsTorch, TokenAndSequence) {
  expect_matches_torch("losses", "token_logprobs", [](const V& x) { return token_logprobs(x[0], x[1]); });
  expect_matches_torch("losses", "seq_logprobs_sum", [](const V& x) { return sequence_logprobs(x[0], x[1], x[2]); });
  expect_matches_torch("losses", "seq_logprobs_avg",
                       [](const V& x) { return sequence_logprobs(x[0], x[1], x[2], true); });
  expect_matches_torch("losses", "seq_logprobs_nomask", [](const V& x) { return sequence_logprobs(x[0], x[1]); });
}

TEST(LossesLogprobsTorch, Entropy) {
  expect_matches_torch("losses", "entropy", [](const V& x) { return entropy_from_logits(x[0]); });
  expect_matches_torch("losses", "entropy_wide", [](const V& x) { return entropy_from_logits(x[0]); });
  expect_matches_torch("losses", "entropy_huge", [](const V& x) { return entropy_from_logits(x[0]); });
  expect_matches_torch("losses", "entropy_neg_inf", [](const V& x) { return entropy_from_logits(x[0]); });
}

TEST(LossesLogprobs, ShiftLabels) {
  Tensor l = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(shift_labels(l).to_vector(), (std::vector<double>{2, 3, -100, 5, 6, -100}));
  // token_logprobs on the unshifted logits with shifted labels == slicing the logits
  Tensor x = randn64({2, 3, 7}, 1);
  Tensor a = token_logprobs(x, shift_labels(l));
  Tensor b = token_logprobs(slice(x, 1, 0, 2), slice(l, 1, 1, 3));
  EXPECT_TRUE(test::tensors_close(slice(a, 1, 0, 2), b, 1e-14, 1e-14));
  EXPECT_EQ(a.to_vector()[2], 0.0);
}

TEST(LossesLogprobs, SequenceLogprobsIsTheMaskedSumOfGatheredLogSoftmax) {
  Tensor x = randn64({2, 4, 5}, 2);
  Tensor l = from_vector(std::vector<int64_t>{0, 4, 2, 1, 3, 3, 0, 2}, {2, 4});
  Tensor m = tensor({{0, 1, 1, 0}, {1, 1, 1, 1}}, kFloat64);
  Tensor expect = sum(squeeze(gather(log_softmax(x, -1), 2, unsqueeze(l, -1)), -1) * m, {-1});
  EXPECT_TRUE(test::tensors_close(sequence_logprobs(x, l, m), expect, 1e-14, 1e-14));
}

TEST(LossesLogprobs, Gradcheck) {
  Tensor l = from_vector(std::vector<int64_t>{0, 4, -100, 1, 3, 3}, {2, 3});
  EXPECT_GRADCHECK([&](const V& in) { return token_logprobs(in[0], l); }, {randn64({2, 3, 5}, 3)});
  Tensor m = tensor({{1, 1, 0}, {0, 1, 1}}, kFloat64);
  for (bool avg : {false, true})
    EXPECT_GRADCHECK([&](const V& in) { return sequence_logprobs(in[0], l, m, avg); }, {randn64({2, 3, 5}, 4)});
  EXPECT_GRADCHECK([](const V& in) { return entropy_from_logits(in[0]); }, {randn64({2, 3, 19}, 5)});
  EXPECT_GRADCHECK([](const V& in) { return entropy_from_logits(in[0]); }, {randn64({21}, 6)});
}

// Rows large enough for the multithreaded entropy path, against plain double loops.
TEST(LossesLogprobs, EntropyLargeInputMatchesNaiveLoops) {
  const int64_t N = 40, C = 1000;
  Generator gen(7);
  Tensor x = (randn({N, C}, kFloat32, &gen) * 2.0).detach().requires_grad_();
  Tensor g = randn({N}, kFloat32, &gen);
  Tensor h = entropy_from_logits(x);
  h.backward(g);
  std::vector<double> xv = x.to_vector(), gv = g.to_vector(), hv(N), dx(xv.size());
  for (int64_t i = 0; i < N; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, xv[static_cast<std::size_t>(i * C + c)]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(xv[static_cast<std::size_t>(i * C + c)] - m);
    double H = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double lp = xv[static_cast<std::size_t>(i * C + c)] - m - std::log(s);
      H -= std::exp(lp) * lp;
    }
    hv[static_cast<std::size_t>(i)] = H;
    for (int64_t c = 0; c < C; ++c) {
      const double lp = xv[static_cast<std::size_t>(i * C + c)] - m - std::log(s);
      dx[static_cast<std::size_t>(i * C + c)] = -gv[static_cast<std::size_t>(i)] * std::exp(lp) * (lp + H);
    }
  }
  EXPECT_TRUE(test::tensors_close(h, from_vector(hv, {N}), 1e-5, 1e-6));
  EXPECT_TRUE(test::tensors_close(x.grad(), from_vector(dx, {N, C}), 1e-4, 1e-6));
}

TEST(LossesLogprobs, Errors) {
  Tensor x = randn64({2, 3, 5}, 1);
  EXPECT_XG_ERROR(token_logprobs(x, from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 7}, {2, 3})),
                  "token_logprobs: target 7 out of range for 5 classes (at position [1,2]");
  EXPECT_XG_ERROR(sequence_logprobs(x, from_vector(std::vector<int64_t>{0, 1, 2, 3}, {2, 2})),
                  "sequence_logprobs: logits [2,3,5] and labels [2,2] do not match");
  EXPECT_XG_ERROR(sequence_logprobs(x, zeros({2, 3}, kInt64), ones({3, 2}, kBool)),
                  "sequence_logprobs: mask [3,2] must have the shape [2,3]");
  EXPECT_XG_ERROR(entropy_from_logits(zeros({2}, kInt64)), "entropy_from_logits: logits must be a float32 or float64");
  EXPECT_XG_ERROR(shift_labels(zeros({2}, kFloat32)), "shift_labels: labels must be an int64 tensor");
}

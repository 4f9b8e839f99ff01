// Tests for losses/sft.cpp: a plain-PyTorch SFT loss (next-token cross-entropy with the
// prompt's labels set to -100) against PyTorch (with padding, prompts as long as the
// sequence, every target masked), gradient checks, gradient accumulation, errors.
#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "losses/sft.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using xg::test::ids;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {
}  // namespace

TEST(LossesSftTorch, PlainPyTorchSftLoss) {
  expect_matches_torch("losses", "sft_seed", [](const V& x) { return sft_loss(x[0], x[1], x[2]); });
  expect_matches_torch("losses", "sft_padding", [](const V& x) { return sft_loss(x[0], x[1], x[2], x[3]); });
  // prompt lengths of T and beyond mask the whole row (a Python slice clamps)
  expect_matches_torch("losses", "sft_long_prompt", [](const V& x) { return sft_loss(x[0], x[1], x[2]); });
  // every target masked: NaN (0/0), as F.cross_entropy's mean over no targets gives
  expect_matches_torch("losses", "sft_all_masked", [](const V& x) { return sft_loss(x[0], x[1], x[2]); });
}

TEST(LossesSft, Labels) {
  Tensor labels = ids({10, 11, 12, 13, 20, 21, 22, 23}, {2, 4});
  Tensor t = sft_labels(labels, ids({2, 0}, {2}), tensor({{1, 1, 1, 0}, {1, 1, 1, 1}}, kFloat32));
  // row 0: prompt 10 11 masked, 13 is padding; row 1: no prompt
  EXPECT_EQ(t.to_vector(), (std::vector<double>{-100, 12, -100, -100, 21, 22, 23, -100}));
}

TEST(LossesSft, Gradcheck) {
  Tensor labels = ids({1, 4, 0, 2, 3, 3, 1, 0, 2, 4}, {2, 5});
  Tensor plen = ids({2, 1}, {2});
  EXPECT_GRADCHECK([&](const V& in) { return sft_loss(in[0], labels, plen); }, {randn64({2, 5, 6}, 1)});
  Tensor pad = tensor({{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}, kFloat64);
  EXPECT_GRADCHECK([&](const V& in) { return sft_loss(in[0], labels, plen, pad, 7.0); }, {randn64({2, 5, 6}, 2)});
}

// Micro-batch losses with the whole batch's target count add up to the whole batch's
// loss, and their accumulated gradient equals its gradient.
TEST(LossesSft, GradientAccumulationInvariance) {
  Tensor logits = randn64({4, 6, 5}, 3);
  Generator gen(4);
  Tensor labels = randint(0, 5, {4, 6}, &gen);
  Tensor plen = ids({1, 3, 0, 5}, {4});
  Tensor whole = sft_loss(logits, labels, plen);
  whole.backward();
  Tensor g_whole = logits.grad().clone();
  logits.zero_grad();
  const double n = sum(ne(sft_labels(labels, plen), full({4, 6}, -100, kInt64)).to(kFloat64)).item();
  EXPECT_EQ(n, 5 + 3 + 5 + 1);
  double acc = 0;
  for (int64_t k = 0; k < 2; ++k) {
    Tensor part =
        sft_loss(narrow(logits, 0, 2 * k, 2), narrow(labels, 0, 2 * k, 2), narrow(plen, 0, 2 * k, 2), Tensor(), n);
    part.backward();
    acc += part.item();
  }
  EXPECT_NEAR(acc, whole.item(), 1e-12);
  EXPECT_TRUE(test::tensors_close(logits.grad(), g_whole, 1e-12, 1e-14));
  // the per-micro-batch mean would not add up (the micro-batches hold 8 and 6 targets)
  const double naive = sft_loss(narrow(logits, 0, 0, 2), narrow(labels, 0, 0, 2), narrow(plen, 0, 0, 2)).item() +
                       sft_loss(narrow(logits, 0, 2, 2), narrow(labels, 0, 2, 2), narrow(plen, 0, 2, 2)).item();
  EXPECT_GT(std::abs(naive / 2 - whole.item()), 1e-6);
}

TEST(LossesSft, Errors) {
  Tensor x = randn64({2, 4, 5}, 1);
  Tensor l = zeros({2, 4}, kInt64);
  EXPECT_XG_ERROR(sft_loss(x, zeros({2, 3}, kInt64), ids({0, 0}, {2})),
                  "sft_loss: logits [2,4,5] and labels [2,3] do not match");
  EXPECT_XG_ERROR(sft_loss(randn64({8, 5}, 2), l, ids({0, 0}, {2})), "sft_loss: logits must be [B, T, V], got [8,5]");
  EXPECT_XG_ERROR(sft_loss(x, l, ids({0, 0, 0}, {3})),
                  "sft_loss: prompt_lengths [3] must have one length per row of labels [2,4]");
  EXPECT_XG_ERROR(sft_loss(x, l, ids({0, -2}, {2})), "sft_loss: prompt_lengths[1] is -2");
  EXPECT_XG_ERROR(sft_loss(x, l.to(kFloat64), ids({0, 0}, {2})), "sft_loss: labels must be an int64 [B, T] tensor");
  EXPECT_XG_ERROR(sft_loss(x, l, ids({0, 0}, {2}), ones({2, 5}, kBool)),
                  "sft_loss: padding_mask [2,5] must have the shape [2,4]");
  EXPECT_XG_ERROR(sft_loss(x, full({2, 4}, 9, kInt64), ids({0, 0}, {2})),
                  "sft_loss: target 9 out of range for 5 classes (at position [0,0]");
}

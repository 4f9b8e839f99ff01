// Tests for losses/masked.cpp: TRL's masked_mean / masked_var / masked_whiten against
// PyTorch, gradient checks, errors.
#include "autograd/elementwise.hpp"
#include "losses/masked.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::losses;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

TEST(LossesMaskedTorch, TrlFunctions) {
  expect_matches_torch("losses", "masked_mean", [](const V& x) { return masked_mean(x[0], x[1]); });
  expect_matches_torch("losses", "masked_mean_dim", [](const V& x) { return masked_mean(x[0], x[1], 1); });
  expect_matches_torch("losses", "masked_var", [](const V& x) { return masked_var(x[0], x[1]); });
  expect_matches_torch("losses", "masked_whiten", [](const V& x) { return masked_whiten(x[0], x[1]); });
  expect_matches_torch("losses", "masked_whiten_keep_mean",
                       [](const V& x) { return masked_whiten(x[0], x[1], false); });
}

TEST(LossesMasked, WhitenedKeptEntriesHaveZeroMeanUnitVariance) {
  Tensor v = randn64({3, 6}, 1) * 4.0 + 3.0;
  Tensor m = tensor({{1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {0, 1, 0, 1, 0, 1}}, kFloat64);
  Tensor w = masked_whiten(v, m);
  EXPECT_NEAR(masked_mean(w, m).item(), 0.0, 1e-12);
  EXPECT_NEAR(masked_var(w, m).item(), 1.0, 1e-6);
  EXPECT_NEAR(masked_sum(ones({3, 6}, kFloat64), m).item(), 12.0, 0);
}

TEST(LossesMasked, Gradcheck) {
  Tensor m = tensor({{1, 0, 1, 1}, {0, 1, 1, 0}}, kBool);
  EXPECT_GRADCHECK([&](const V& in) { return masked_mean(in[0], m); }, {randn64({2, 4}, 2)});
  EXPECT_GRADCHECK([&](const V& in) { return masked_mean(in[0], m, -1); }, {randn64({2, 4}, 3)});
  EXPECT_GRADCHECK([&](const V& in) { return masked_var(in[0], m, false); }, {randn64({2, 4}, 4)});
  EXPECT_GRADCHECK([&](const V& in) { return masked_whiten(in[0], m); }, {randn64({2, 4}, 5)});
}

TEST(LossesMasked, Errors) {
  Tensor v = randn64({2, 3}, 1);
  EXPECT_XG_ERROR(masked_mean(v, ones({3, 2}, kBool)), "masked_mean: mask [3,2] must have the shape [2,3]");
  EXPECT_XG_ERROR(masked_var(v, zeros({2, 3}, kBool)), "masked_var: the mask of shape [2,3] keeps no entry");
  EXPECT_XG_ERROR(masked_whiten(v, tensor({{0, 0, 1}, {0, 0, 0}}, kFloat64)), "keeps a single entry");
  EXPECT_XG_ERROR(masked_sum(zeros({2}, kInt64), ones({2}, kBool)), "masked_sum: values must be a float32 or float64");
}

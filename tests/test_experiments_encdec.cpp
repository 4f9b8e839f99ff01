// Tests of experiments/encdec.cpp: the encoder-decoder of Xiong et al. (2020) at initialisation
// (part 3 of the Pre-Norm vs Post-Norm study): determinism, the expected-loss gradient, the
// decoder's Post-LN / Pre-LN profile shapes, errors.
#include <gtest/gtest.h>

#include "experiments/encdec.hpp"
#include "torch_fixture.hpp"

namespace ex = xg::experiments;

namespace {
ex::EncDecConfig small() {
  ex::EncDecConfig c;
  c.d_model = 32;
  c.n_heads = 2;
  c.batch = 2;
  c.src_len = c.tgt_len = 8;
  c.batches = 4;
  return c;
}
}  // namespace

TEST(ExperimentsEncDec, DeterministicAndOneValuePerLayer) {
  ex::EncDecProfile a = ex::run_encdec(small(), 2, 3), b = ex::run_encdec(small(), 2, 3);
  ASSERT_EQ(a.enc_post.size(), 2u);
  ASSERT_EQ(a.dec_pre_exp.size(), 3u);
  EXPECT_EQ(a.dec_post, b.dec_post);
  EXPECT_EQ(a.enc_pre_exp, b.enc_pre_exp);
  for (double g : a.dec_post) EXPECT_GT(g, 0);
  EXPECT_NE(a.dec_post[0], a.dec_pre[0]);
}

TEST(ExperimentsEncDec, ExpectedGradientOfOneBatchIsTheSingleBatchGradient) {
  ex::EncDecConfig c = small();
  c.batches = 1;
  ex::EncDecProfile p = ex::run_encdec(c, 2, 2);
  EXPECT_EQ(p.dec_post, p.dec_post_exp);
  EXPECT_EQ(p.enc_pre, p.enc_pre_exp);
  c.batches = 8;  // averaging over batches shrinks the noise part: the mean's norm is smaller
  ex::EncDecProfile q = ex::run_encdec(c, 2, 2);
  EXPECT_LT(q.dec_post_exp.back(), q.dec_post.back());
}

// The shape of Xiong et al.'s figure 3 in the decoder: Post-LN's W2 gradient grows toward the
// top, Pre-LN's shrinks (both measured at 6+6 layers).
TEST(ExperimentsEncDec, DecoderPostLnRisesTowardTheTopAndPreLnFalls) {
  ex::EncDecProfile p = ex::run_encdec(small(), 6, 6);
  EXPECT_GT(p.dec_post_exp.back() / p.dec_post_exp.front(), 1.5);
  EXPECT_LT(p.dec_pre_exp.back() / p.dec_pre_exp.front(), 0.9);
}

TEST(ExperimentsEncDec, Errors) {
  EXPECT_XG_ERROR(ex::run_encdec(small(), 0, 2), "at least 1 layer");
  ex::EncDecConfig c = small();
  c.n_heads = 3;
  EXPECT_XG_ERROR(ex::run_encdec(c, 1, 1), "heads 3 must divide d_model 32");
  c = small();
  c.batches = 0;
  EXPECT_XG_ERROR(ex::run_encdec(c, 1, 1), "--xiong-batches");
}

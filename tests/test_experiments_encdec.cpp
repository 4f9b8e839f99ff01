// Tests of experiments/encdec.cpp: the encoder-decoder of Xiong et al. (2020) at initialisation
// (part 3 of the Pre-Norm vs Post-Norm study): determinism, the expected-loss gradient, the
// decoder's Post-LN / Pre-LN profile shapes, the saved state (--xiong-save-init / --xiong-init),
// errors.
#include <gtest/gtest.h>

#include "experiments/encdec.hpp"
#include "io/safetensors.hpp"
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

// Part 3's state written and read back gives the same gradients to the last bit, with and
// without dropout (whose masks come from the seed, not the file).
TEST(ExperimentsEncDec, SavedStateGivesBitIdenticalGradients) {
  for (double dropout : {0.0, 0.1}) {
    ex::EncDecConfig c = small();
    c.dropout = dropout;
    const ex::EncDecState drawn = ex::make_encdec_state(c, 2, 3);
    const std::string path = std::string(XGRAD_BINARY_DIR) + "/test_experiments_encdec_state.safetensors";
    ex::save_encdec_state(path, drawn, c);
    const ex::EncDecState loaded = ex::load_encdec_state(path, c, 2, 3);
    const ex::EncDecProfile a = ex::run_encdec(c, 2, 3), b = ex::run_encdec(c, loaded);
    for (auto v : {&ex::EncDecProfile::enc_post, &ex::EncDecProfile::enc_pre, &ex::EncDecProfile::dec_post,
                          &ex::EncDecProfile::dec_pre, &ex::EncDecProfile::enc_post_exp,
                          &ex::EncDecProfile::enc_pre_exp, &ex::EncDecProfile::dec_post_exp,
                          &ex::EncDecProfile::dec_pre_exp})
      EXPECT_EQ(a.*v, b.*v) << "dropout " << dropout;
    // The file holds the weights by the model's names and the batches as int64 [batches, B, T].
    xg::TensorMap file = xg::io::load_safetensors(path);
    EXPECT_EQ(file.at("src").shape(), (xg::Shape{4, 2, 8}));
    EXPECT_EQ(file.at("labels").dtype(), xg::kInt64);
    EXPECT_EQ(file.at("decoder.2.cross_attn.w_q.weight").shape(), (xg::Shape{32, 32}));
    EXPECT_EQ(file.at("encoder.1.ffn.fc2.weight").shape(), (xg::Shape{32, 128}));
    EXPECT_EQ(file.at("embed.weight").shape(), (xg::Shape{64, 32}));
    EXPECT_EQ(file.count("decoder_norm.bias"), 1u);
  }
  EXPECT_EQ(ex::encdec_state_file(6, 42), "xiong_L6_seed42.safetensors");
}

TEST(ExperimentsEncDec, LoadingAStateThatDoesNotFitIsAnError) {
  ex::EncDecConfig c = small();
  const std::string path = std::string(XGRAD_BINARY_DIR) + "/test_experiments_encdec_bad_state.safetensors";
  ex::save_encdec_state(path, ex::make_encdec_state(c, 2, 2), c);
  EXPECT_XG_ERROR(ex::load_encdec_state(path, c, 3, 2), "no tensor 'encoder.2.");
  ex::EncDecConfig wide = c;
  wide.d_model = 64;
  EXPECT_XG_ERROR(ex::load_encdec_state(path, wide, 2, 2), "has shape [32], the model needs [64]");
  ex::EncDecConfig more = c;
  more.batches = 5;
  EXPECT_XG_ERROR(ex::load_encdec_state(path, more, 2, 2), "tensor 'src' has shape [4,2,8], need [5 or more batches, 2, 8]");
}

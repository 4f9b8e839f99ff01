// experiments/admin.cpp: Admin's profiled omega (Liu et al. 2020) against a hand Post-LN pass,
// and Admin at depth 1 against Post-LN.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/attention.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/random.hpp"
#include "experiments/admin.hpp"
#include "experiments/training.hpp"
#include "nn/position.hpp"

namespace ex = xg::experiments;

namespace {

xg::nn::LMConfig tiny_lm(int64_t layers) {
  xg::nn::LMConfig lc;
  lc.vocab_size = 16;
  lc.n_layers = layers;
  lc.block.d_model = 8;
  xg::nn::MHASpec mha;
  mha.n_heads = 2;
  lc.block.attention = mha;
  lc.block.position = xg::nn::PositionKind::Learned;
  lc.block.max_seq_len = 6;
  return lc;
}

xg::Tensor tokens() {
  std::vector<int64_t> ids{1, 5, 2, 9, 3, 0, 7, 7, 15, 4, 11, 2};
  return xg::from_vector(ids, {2, 6});
}

// Population variance over every entry, in double, written out again (not admin.cpp's helper).
double var_of(const xg::Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double s1 = 0, s2 = 0;
  for (double x : v) {
    s1 += x;
    s2 += x * x;
  }
  const double n = static_cast<double>(v.size());
  return s2 / n - (s1 / n) * (s1 / n);
}

double max_diff(const xg::Tensor& a, const xg::Tensor& b) {
  auto x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

}  // namespace

// omega_i = sqrt(Var x_0 + sum_{j=1}^{i-1} Var f_j), the f_j from a Post-LN pass written here by
// hand from the block's children (and checked to be the block's own Post-LN forward).
TEST(ExperimentsAdmin, OmegaIsTheRootOfTheSummedPostLNVariances) {
  xg::manual_seed(3);
  ex::AdminLM admin(tiny_lm(2));
  const xg::Tensor x = tokens();
  const std::vector<double> vars = admin.profile(x);
  ASSERT_EQ(vars.size(), 5u);  // x_0 and 4 sublayers
  ASSERT_EQ(admin.omega().size(), 4u);

  xg::nn::DecoderLM& lm = admin.lm();
  auto learned = std::dynamic_pointer_cast<xg::nn::LearnedPositionalEmbedding>(lm.pos());
  ASSERT_TRUE(learned);
  xg::Tensor h = learned->forward(lm.tok_embeddings()->forward(x), 0);
  std::vector<double> hand{var_of(h)};
  const xg::AttnMask causal = xg::AttnMask::causal_mask();
  for (std::size_t l = 0; l < 2; ++l) {
    const xg::nn::TransformerBlock& b = *(*lm.layers())[l];
    xg::Tensor a = b.attention()->forward(h, causal, nullptr, 0);
    hand.push_back(var_of(a));
    xg::Tensor h1 = b.norm1()->forward(h + a);
    xg::Tensor f = b.ffn()->forward(h1);
    hand.push_back(var_of(f));
    xg::Tensor h2 = b.norm2()->forward(h1 + f);
    EXPECT_LT(max_diff(h2, b.forward(h, causal).out), 1e-6) << "the hand pass is not the block's Post-LN forward";
    h = h2;
  }
  double acc = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(vars[i], hand[i], 1e-5 * hand[i]) << "variance " << i;
    acc += hand[i];
    const std::vector<double> w = admin.omega()[i].to_vector();
    ASSERT_EQ(w.size(), 8u);
    for (double v : w) EXPECT_NEAR(v, std::sqrt(acc), 1e-5 * std::sqrt(acc)) << "omega_" << i + 1;
  }
  EXPECT_NEAR(vars[4], hand[4], 1e-5 * hand[4]);  // the last sublayer's, which no omega uses
  // Each omega is larger than the last (variances add), and omega_1 is the embedding's scale.
  EXPECT_GT(admin.omega()[3].to_vector()[0], admin.omega()[0].to_vector()[0]);
}

// At depth 1 Admin is Post-LN with the residual scaled by omega_1 (attention) and omega_2 (FFN):
// with omega = 1 the logits are the Post-LN DecoderLM's, with the profiled omega they are
// LN(omega_1 x_0 + a(x_0)), LN(omega_2 x_1 + f(x_1)) written by hand.
TEST(ExperimentsAdmin, DepthOneIsPostLNUpToOmegaScale) {
  xg::manual_seed(5);
  ex::AdminLM admin(tiny_lm(1));
  const xg::Tensor x = tokens();
  xg::nn::DecoderLM& lm = admin.lm();
  EXPECT_EQ(lm.config().block.norm_position, xg::nn::NormPosition::Post);
  EXPECT_FALSE(lm.norm());
  EXPECT_LT(max_diff(admin(x), lm(x)), 1e-6) << "omega = 1 before profiling: plain Post-LN";

  const std::vector<double> vars = admin.profile(x);
  const double w1 = std::sqrt(vars[0]), w2 = std::sqrt(vars[0] + vars[1]);
  EXPECT_NEAR(admin.omega()[0].to_vector()[0], w1, 1e-6 * w1);
  EXPECT_GT(max_diff(admin(x), lm(x)), 1e-3) << "a profiled omega changes the forward";
  auto learned = std::dynamic_pointer_cast<xg::nn::LearnedPositionalEmbedding>(lm.pos());
  const xg::Tensor x0 = learned->forward(lm.tok_embeddings()->forward(x), 0);
  const xg::nn::TransformerBlock& b = *(*lm.layers())[0];
  xg::Tensor h = b.norm1()->forward(x0 * w1 + b.attention()->forward(x0, xg::AttnMask::causal_mask(), nullptr, 0));
  h = b.norm2()->forward(h * w2 + b.ffn()->forward(h));
  EXPECT_LT(max_diff(admin(x), lm.output()->forward(h)), 1e-5);
  for (xg::Tensor& w : const_cast<std::vector<xg::Tensor>&>(admin.omega())) w.fill_(1.0);
  EXPECT_LT(max_diff(admin(x), lm(x)), 1e-6) << "omega reset to 1: Post-LN again";
}

TEST(ExperimentsAdmin, TrainsAPeriodicText) {
  std::vector<uint8_t> corpus;
  for (int i = 0; i < 400; ++i) corpus.push_back(static_cast<uint8_t>('a' + i % 4));
  ex::TrainConfig tc;
  tc.d_model = 16;
  tc.n_heads = 2;
  tc.seq_len = 8;
  tc.batch = 4;
  tc.steps = 40;
  ex::TrainRun r = ex::train_run(tc, corpus, ex::TrainMethod::Admin, 2, 1e-2, false);
  EXPECT_EQ(r.method, ex::TrainMethod::Admin);
  EXPECT_EQ(r.norm, xg::nn::NormPosition::Post);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_LT(r.final_loss, r.unigram_entropy - 0.05) << "final " << r.final_loss;
  EXPECT_EQ(r.status, "ok");
  EXPECT_STREQ(ex::train_method_name(ex::TrainMethod::Admin), "admin");
}

// experiments/training.cpp: the training-stability runs (tiny sizes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "experiments/training.hpp"
#include "torch_fixture.hpp"

namespace ex = xg::experiments;

namespace {

std::vector<uint8_t> periodic_corpus() {
  // "abcd" repeated: four bytes, equally frequent (unigram entropy ln 4), fully predictable.
  std::vector<uint8_t> c;
  for (int i = 0; i < 400; ++i) c.push_back(static_cast<uint8_t>('a' + i % 4));
  return c;
}

ex::TrainConfig tiny() {
  ex::TrainConfig tc;
  tc.d_model = 16;
  tc.n_heads = 2;
  tc.seq_len = 8;
  tc.batch = 4;
  tc.steps = 40;
  tc.warmup = 5;
  return tc;
}

}  // namespace

TEST(ExperimentsTraining, PreNormLearnsAPeriodicText) {
  ex::TrainRun r = ex::train_run(tiny(), periodic_corpus(), xg::nn::NormPosition::Pre, 2, 1e-2, false);
  ASSERT_EQ(r.losses.size(), 40u);
  EXPECT_NEAR(r.unigram_entropy, std::log(4.0), 1e-12);
  EXPECT_GT(r.losses.front(), 4.0);  // about ln 256 at init
  EXPECT_LT(r.final_loss, r.unigram_entropy - 0.05) << "final " << r.final_loss;
  EXPECT_EQ(r.status, "ok");
}

TEST(ExperimentsTraining, DeterministicAndSameStartForEveryConfiguration) {
  ex::TrainConfig tc = tiny();
  tc.steps = 5;
  auto corpus = periodic_corpus();
  ex::TrainRun a = ex::train_run(tc, corpus, xg::nn::NormPosition::Post, 2, 1e-3, false);
  ex::TrainRun b = ex::train_run(tc, corpus, xg::nn::NormPosition::Post, 2, 1e-3, false);
  EXPECT_EQ(a.losses, b.losses);
  ex::TrainRun w = ex::train_run(tc, corpus, xg::nn::NormPosition::Post, 2, 1e-3, true);
  EXPECT_EQ(w.losses.front(), a.losses.front());  // same init and first batch
  EXPECT_NE(w.losses.back(), a.losses.back());    // warmup changes the updates
  ex::TrainRun d = ex::train_run(tc, corpus, xg::nn::NormPosition::DeepNorm, 2, 1e-3, false);
  EXPECT_EQ(d.losses.size(), 5u);
  EXPECT_TRUE(d.status == "ok" || d.status == "stalled" || d.status == "diverged") << d.status;
}

TEST(ExperimentsTraining, ClassifyTellsStalledFromDiverged) {
  const double uni = 3.17;
  EXPECT_EQ(ex::classify_run({5.5, NAN}, NAN, uni), "diverged");
  EXPECT_EQ(ex::classify_run({5.5, 7.0, 6.5}, 6.5, uni), "diverged");  // far above its start
  const std::vector<double> flat{5.5, 4, 3.6, 3.5, 3.48, 3.47, 3.47, 3.47, 3.47};
  EXPECT_EQ(ex::classify_run(flat, 3.47, uni), "stalled");  // finite, above the unigram entropy, flat
  const std::vector<double> falling{5.5, 5.3, 5.1, 4.9, 4.7, 4.5, 4.3, 4.1, 3.9};
  EXPECT_EQ(ex::classify_run(falling, 3.9, uni), "slow");   // above it but still learning
  EXPECT_EQ(ex::classify_run({5.5, 2.8, 2.7}, 2.7, uni), "ok");
}

TEST(ExperimentsTraining, LogsGradientAndUpdateNormsEveryStep) {
  ex::TrainConfig tc = tiny();
  tc.steps = 3;
  ex::TrainRun d = ex::train_run(tc, periodic_corpus(), xg::nn::NormPosition::DeepNorm, 2, 1e-3, false);
  ASSERT_EQ(d.grad_norms.size(), 3u);
  ASSERT_EQ(d.update_norms.size(), 3u);
  for (double g : d.grad_norms) EXPECT_GT(g, 0);
  // AdamW's first step moves each parameter with a non-zero gradient by lr (m / sqrt(v) = sign(g)):
  // ||update|| <= lr sqrt(number of parameters).
  EXPECT_GT(d.update_norms[0], 0);
  EXPECT_LT(d.update_norms[0], 1e-3 * std::sqrt(1e6));
}

TEST(ExperimentsTraining, Errors) {
  EXPECT_XG_ERROR(ex::read_corpus("/nonexistent/corpus.txt", 10), "--corpus: cannot read '/nonexistent/corpus.txt'");
  const std::string path = std::string(XGRAD_BINARY_DIR) + "/test_experiments_tiny_corpus.txt";
  {
    std::ofstream f(path);
    f << "abc";
  }
  EXPECT_XG_ERROR(ex::read_corpus(path, 10), "has 3 bytes, need at least 10");
  EXPECT_EQ(ex::read_corpus(path, 3).size(), 3u);
  std::remove(path.c_str());
  EXPECT_XG_ERROR(ex::train_run(tiny(), periodic_corpus(), xg::nn::NormPosition::Pre, 0, 1e-3, false),
                  "depth must be at least 1");
  EXPECT_XG_ERROR(ex::train_run(tiny(), std::vector<uint8_t>(5, 'a'), xg::nn::NormPosition::Pre, 1, 1e-3, false),
                  "shorter than a sequence");
}

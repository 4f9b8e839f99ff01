// Tests for nn/sampling.cpp: greedy, temperature, top-k, top-p, min-p, the repetition penalty
// and the draw; against transformers' logits processors written out in torch
// (tests/fixtures/gen_sampling.py).
#include "nn/sampling.hpp"

#include <cmath>

#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;

namespace {
std::vector<double> probs(const Tensor& logits, SamplingOptions o) { return sampling_probs(logits, o).to_vector(); }
}  // namespace

TEST(NnSampling, GreedyPicksTheFirstMaximum) {
  Generator g(0);
  Tensor logits = tensor({0.1, 3.0, -1.0, 3.0});
  EXPECT_EQ(sample_token(logits, {0.0, 0, 1.0}, g), 1);
}

TEST(NnSampling, TemperatureSharpensAndFlattens) {
  Tensor logits = tensor({std::log(1.0), std::log(3.0)}, kFloat64);
  std::vector<double> p1 = probs(logits, {1.0, 0, 1.0});
  EXPECT_NEAR(p1[1], 0.75, 1e-12);
  std::vector<double> p2 = probs(logits, {0.5, 0, 1.0});  // p ~ (1, 9)
  EXPECT_NEAR(p2[1], 0.9, 1e-12);
}

TEST(NnSampling, TopKKeepsKLargest) {
  Tensor logits = tensor({1.0, 4.0, 2.0, 3.0}, kFloat64);
  std::vector<double> p = probs(logits, {1.0, 2, 1.0});
  EXPECT_EQ(p[0], 0.0);
  EXPECT_EQ(p[2], 0.0);
  EXPECT_NEAR(p[1], std::exp(4.0) / (std::exp(4.0) + std::exp(3.0)), 1e-12);
}

TEST(NnSampling, TopPKeepsTheNucleus) {
  // probabilities 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two (0.5 < 0.7 <= 0.8)
  Tensor logits = tensor({std::log(0.5), std::log(0.3), std::log(0.15), std::log(0.05)}, kFloat64);
  std::vector<double> p = probs(logits, {1.0, 0, 0.7});
  EXPECT_NEAR(p[0], 0.5 / 0.8, 1e-12);
  EXPECT_NEAR(p[1], 0.3 / 0.8, 1e-12);
  EXPECT_EQ(p[2], 0.0);
  EXPECT_EQ(p[3], 0.0);
  std::vector<double> one = probs(logits, {1.0, 0, 0.1});  // the top token always stays
  EXPECT_EQ(one[0], 1.0);
}

TEST(NnSampling, DrawsFollowTheDistribution) {
  Generator g(5);
  Tensor logits = tensor({std::log(0.2), std::log(0.8)}, kFloat64);
  int ones = 0;
  for (int i = 0; i < 5000; ++i) ones += sample_token(logits, {}, g) == 1;
  EXPECT_NEAR(ones / 5000.0, 0.8, 0.02);
  Generator a(9), b(9);
  EXPECT_EQ(sample_token(logits, {}, a), sample_token(logits, {}, b));
}

// The penalty on its definition: context {0, 1, 0}, penalty 2: logit 2 -> 1 (divided, once
// although token 0 occurs twice), -1 -> -2 (multiplied), token 2 untouched; greedy follows.
TEST(NnSampling, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  Tensor logits = tensor({2.0, -1.0, 1.5}, kFloat64);
  SamplingOptions o;
  o.repetition_penalty = 2.0;
  const std::vector<double> p = sampling_probs(logits, o, {0, 1, 0}).to_vector();
  const double z = std::exp(1.0) + std::exp(-2.0) + std::exp(1.5);
  EXPECT_NEAR(p[0], std::exp(1.0) / z, 1e-12);
  EXPECT_NEAR(p[1], std::exp(-2.0) / z, 1e-12);
  EXPECT_NEAR(p[2], std::exp(1.5) / z, 1e-12);
  Generator g(0);
  o.temperature = 0;
  EXPECT_EQ(sample_token(logits, o, g), 0);            // no context: the maximum
  EXPECT_EQ(sample_token(logits, o, g, {0, 1}), 2);    // 2 / 2 = 1 < 1.5
}

// min_p keeps tokens at least min_p times as likely as the most likely one.
TEST(NnSampling, MinPKeepsTokensNearTheTop) {
  // probabilities 0.5, 0.3, 0.15, 0.05: min_p 0.25 keeps p >= 0.125, the first three
  Tensor logits = tensor({std::log(0.5), std::log(0.3), std::log(0.15), std::log(0.05)}, kFloat64);
  SamplingOptions o;
  o.min_p = 0.25;
  const std::vector<double> p = probs(logits, o);
  EXPECT_NEAR(p[0], 0.5 / 0.95, 1e-12);
  EXPECT_NEAR(p[2], 0.15 / 0.95, 1e-12);
  EXPECT_EQ(p[3], 0.0);
  o.min_p = 1.0;  // only the most likely token
  EXPECT_EQ(probs(logits, o)[0], 1.0);
}

// Every case of the fixture: the probabilities transformers' processors give, within 1e-12.
TEST(NnSampling, MatchesTransformersLogitsProcessors) {
  const auto& fx = test::fixture("sampling");
  for (const char* name : {"penalty_greedy", "penalty_only", "penalty_below_one", "min_p_only", "min_p_hot",
                           "min_p_after_top_k", "min_p_after_top_p", "everything"}) {
    const std::string key = name;
    const std::vector<double> opt = fx.at(key + ".options").to_vector();
    SamplingOptions o{opt[0], static_cast<int64_t>(opt[1]), opt[2], opt[3], opt[4]};
    std::vector<int64_t> context;
    for (double v : fx.at(key + ".context").to_vector()) context.push_back(static_cast<int64_t>(v));
    const std::vector<double> got = sampling_probs(fx.at(key + ".logits"), o, context).to_vector();
    const std::vector<double> want = fx.at(key + ".probs").to_vector();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << name << " token " << i;
  }
}

TEST(NnSamplingErrors, BadOptions) {
  Generator g(0);
  EXPECT_XG_ERROR(sample_token(ones({2, 3}), {}, g), "sample_token: expected logits [V], got [2,3]");
  EXPECT_XG_ERROR(sample_token(ones({3}), {-1.0, 0, 1.0}, g), "temperature must be 0 (greedy) or in [1e-06, inf), got -1");
  // 1e-320 would turn every logit into +-Inf and the probabilities into NaN.
  EXPECT_XG_ERROR(sample_token(ones({3}), {1e-320, 0, 1.0}, g), "temperature must be 0 (greedy) or in [1e-06");
  // Logits a model with non-finite weights makes: refused, not drawn from as NUL bytes.
  const double nan = std::nan("");
  EXPECT_XG_ERROR(sample_token(from_vector(std::vector<double>{0.5, nan, 1}, {3}, kFloat64), {1.0, 0, 1.0}, g),
                  "sample_token: logit 1 is nan (the model's weights or adapters hold NaN or Inf");
  EXPECT_XG_ERROR(sample_token(from_vector(std::vector<double>{nan, 0, 1}, {3}, kFloat64), {0.0, 0, 1.0}, g),
                  "sample_token: logit 0 is nan");
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_XG_ERROR(sample_token(from_vector(std::vector<double>{-inf, -inf}, {2}, kFloat64), {1.0, 0, 1.0}, g),
                  "every logit is -inf");
  EXPECT_XG_ERROR(sample_token(ones({3}), {1.0, 0, 0.0}, g), "top_p must be in (0, 1], got 0");
  EXPECT_XG_ERROR(sample_token(ones({3}), {1.0, 0, 1.0, 1.5}, g), "min_p must be in [0, 1], got 1.5");
  EXPECT_XG_ERROR(sample_token(ones({3}), {1.0, 0, 1.0, 0.0, 0.0}, g), "repetition_penalty must be positive and finite, got 0");
  EXPECT_XG_ERROR(sample_token(ones({3}), {1.0, 0, 1.0, 0.0, 1.2}, g, {0, 3}),
                  "sample_token: context token 3 is outside the vocabulary [0, 3)");
}

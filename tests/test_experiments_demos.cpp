// experiments/demos/ and experiments/seed_demos.cpp: each demonstration's key numbers (RoPE's
// relative-position property, KV-cache sizes, QK-Norm, norms, FFN counts, softmax overflow) and the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.hpp"
#include "experiments/demos/kvcache.hpp"
#include "experiments/demos/norms.hpp"
#include "experiments/demos/positions.hpp"
#include "experiments/demos/qknorm.hpp"
#include "experiments/demos/softmax_overflow.hpp"
#include "experiments/demos/swiglu.hpp"
#include "experiments/plot.hpp"
#include "nn/attention.hpp"
#include "torch_fixture.hpp"

namespace dm = xg::experiments::demos;

namespace {

double max_abs(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "index " << i;
}

}  // namespace

// --- positions: no PE vs sinusoidal vs RoPE -------------------------------------------------------

TEST(DemosPositions, RopeScoresDependOnRelativeDistanceOnly) {
  dm::PositionsResult r = dm::run_positions(dm::PositionsConfig{});
  // Moving every token by s positions leaves RoPE's q_i . k_j unchanged (float32 tolerance),
  // while the sinusoidal scores move by a visible amount.
  EXPECT_LT(r.rope.max_shift_change, 1e-5);
  EXPECT_GT(r.sinusoidal.max_shift_change, 0.05);
  // With identical tokens RoPE's map is Toeplitz (score(i, j) = score(i+s, j+s)); the
  // sinusoidal one is not; without positions the map is constant.
  EXPECT_LT(r.rope.identical_toeplitz_spread, 1e-5);
  EXPECT_GT(r.sinusoidal.identical_toeplitz_spread, 0.05);
  EXPECT_LT(r.none.identical_toeplitz_spread, 1e-6);
  EXPECT_GT(r.max_abs_score, 0.1);
}

TEST(DemosPositions, NoPositionalEncodingGivesAFlatMap) {
  dm::PositionsResult r = dm::run_positions(dm::PositionsConfig{});
  EXPECT_LT(r.none.max_dev_uniform, 1e-3);
  EXPECT_GT(r.sinusoidal.max_dev_uniform, 2 * r.none.max_dev_uniform);
  EXPECT_GT(r.rope.max_dev_uniform, 2 * r.none.max_dev_uniform);
  const auto& p = r.none.weight_profile;
  EXPECT_LT(*std::max_element(p.begin(), p.end()) - *std::min_element(p.begin(), p.end()), 1e-3);
}

TEST(DemosPositions, WeightsAreTheSoftmaxOfTheScoresAndProfilesAverageDiagonals) {
  dm::PositionsConfig c;
  c.seq_len = 6;
  c.d_model = c.head_dim = 8;
  c.gain = 3;
  dm::PositionsResult r = dm::run_positions(c);
  for (const dm::PositionScheme* s : {&r.none, &r.sinusoidal, &r.rope}) {
    for (std::size_t i = 0; i < s->scores.size(); ++i) {
      double z = 0;
      for (double v : s->scores[i]) z += std::exp(v);
      for (std::size_t j = 0; j < s->scores[i].size(); ++j)
        EXPECT_NEAR(s->weights[i][j], std::exp(s->scores[i][j]) / z, 1e-6) << s->name << " " << i << "," << j;
    }
    // |i - j| = 5 in a 6x6 map: the two corners.
    EXPECT_NEAR(s->weight_profile[5], (s->weights[0][5] + s->weights[5][0]) / 2, 1e-12) << s->name;
    double diag = 0;
    for (int i = 0; i < 6; ++i) diag += s->scores[i][i] / 6;
    EXPECT_NEAR(s->score_profile[0], diag, 1e-12) << s->name;
  }
}

TEST(DemosPositions, BadConfigIsAnError) {
  dm::PositionsConfig c;
  c.seq_len = 1;
  EXPECT_XG_ERROR(dm::run_positions(c), "positions: --seq-len must be at least 2, got 1");
  c = dm::PositionsConfig{};
  c.head_dim = 7;
  EXPECT_XG_ERROR(dm::run_positions(c), "--d-head must be a positive even number");
}

// --- kvcache: MHA / GQA / MQA / MLA cache sizes ---------------------------------------------------

// The two tables: LLaMA-7B's 32 query heads of 128, and d_model 512 with 8 heads of 64 and MLA,
// 4096 tokens in bf16.
TEST(DemosKVCache, LLaMA7BAndDim512Tables) {
  auto s7 = dm::cache_table(dm::seed_section7());
  ASSERT_EQ(s7.size(), 4u);
  EXPECT_EQ(s7[0].name, "MHA");
  EXPECT_EQ(s7[0].bytes, 2LL * 32 * 128 * 4096 * 2);  // 64 MiB
  EXPECT_DOUBLE_EQ(s7[0].mib, 64.0);
  EXPECT_DOUBLE_EQ(s7[1].mib, 8.0);   // GQA-4
  EXPECT_DOUBLE_EQ(s7[2].mib, 16.0);  // GQA-8
  EXPECT_DOUBLE_EQ(s7[3].mib, 2.0);   // MQA
  EXPECT_EQ(s7[1].q_per_group, 8);
  EXPECT_DOUBLE_EQ(s7[1].percent_of_first, 12.5);
  EXPECT_DOUBLE_EQ(s7[3].percent_of_first, 3.125);
  auto s9 = dm::cache_table(dm::seed_section9());
  ASSERT_EQ(s9.size(), 4u);
  EXPECT_DOUBLE_EQ(s9[0].mib, 8.0);
  EXPECT_DOUBLE_EQ(s9[1].mib, 4.0);
  EXPECT_DOUBLE_EQ(s9[2].mib, 2.0);
  EXPECT_EQ(s9[3].bytes, 64LL * 4096 * 2);  // MLA: the latent alone
  EXPECT_DOUBLE_EQ(s9[3].percent_of_first, 6.25);
  // The per-token formula is the module's.
  xg::nn::SublayerContext ctx;
  ctx.d_model = 32 * 128;
  xg::nn::GQASpec o;
  o.n_heads = 32;
  o.n_kv_heads = 4;
  EXPECT_EQ(o.kv_cache_bytes_per_token(ctx, 2), s7[1].bytes_per_token);
  xg::nn::MLASpec m;
  m.latent_dim = 64;  // without RoPE: no RoPE part
  EXPECT_EQ(m.kv_cache_bytes_per_token(ctx, 2), s9[3].bytes_per_token);
}

TEST(DemosKVCache, MeasuredCacheEqualsTheFormula) {
  dm::CacheCheckConfig c;  // d_model 64, 4 heads, latent 16, rope 8, batch 2, 6 + 3 tokens
  auto checks = dm::check_caches(c);
  ASSERT_EQ(checks.size(), 5u);  // MHA, GQA-2, MQA, MLA, MLA+RoPE key
  const std::vector<int64_t> per_token = {2 * 4 * 16, 2 * 2 * 16, 2 * 1 * 16, 16, 16 + 8};
  for (std::size_t i = 0; i < checks.size(); ++i) {
    SCOPED_TRACE(checks[i].name);
    EXPECT_EQ(checks[i].cache_length, 9);
    EXPECT_EQ(checks[i].expected_floats, per_token[i] * 2 * 9);
    EXPECT_EQ(checks[i].cached_floats, checks[i].expected_floats);
    EXPECT_EQ(checks[i].module_bytes_per_token, 4 * per_token[i]);
  }
}

TEST(DemosKVCache, BadConfigIsAnError) {
  dm::CacheCheckConfig c;
  c.n_heads = 3;
  EXPECT_XG_ERROR(dm::check_caches(c), "kvcache: --check-heads must divide --check-d-model 64, got 3");
  dm::CacheTableConfig t = dm::seed_section7();
  t.schemes.push_back({"GQA-5", dm::CacheKind::GQA, 5});
  EXPECT_XG_ERROR(dm::cache_table(t), "GQA-5: kv heads 5 must divide the 32 query heads");
}

// --- qknorm: softmax degeneration with and without QK-Norm ---------------------------------------

TEST(DemosQKNorm, PlainSoftmaxCollapsesQKNormStaysBounded) {
  dm::QKNormConfig c;
  c.trials = 16;
  dm::QKNormResult r = dm::run_qknorm(c);
  ASSERT_GE(r.sweep.size(), 10u);
  const auto& small = r.sweep.front();
  const auto& large = r.sweep.back();  // keys x 128
  EXPECT_GT(small.entropy_plain, 1.3);  // near log 4 = 1.386
  EXPECT_LT(large.entropy_plain, 0.05);
  EXPECT_GT(large.max_prob_plain, 0.98);
  for (std::size_t i = 1; i < r.sweep.size(); ++i) {
    EXPECT_GT(r.sweep[i].max_prob_plain, r.sweep[i - 1].max_prob_plain);
    // QK-Norm: the keys' scale is normalised away.
    EXPECT_NEAR(r.sweep[i].max_prob_qknorm, small.max_prob_qknorm, 1e-5);
    EXPECT_NEAR(r.sweep[i].entropy_qknorm, small.entropy_qknorm, 1e-5);
    EXPECT_LE(r.sweep[i].max_logit_qknorm, r.logit_bound + 1e-5);
    EXPECT_LE(r.sweep[i].max_prob_qknorm, r.max_prob_bound);
  }
  EXPECT_NEAR(r.logit_bound, std::sqrt(8.0), 1e-12);
  EXPECT_LT(small.max_prob_qknorm, 0.7);
  EXPECT_GT(small.entropy_qknorm, 0.8);
}

TEST(DemosQKNorm, DefaultExampleNormalisesEveryRowToRmsOne) {
  dm::QKNormResult r = dm::run_qknorm(dm::QKNormConfig{});
  // RMS 1 over 8 features: every L2 norm is sqrt(8).
  EXPECT_NEAR(r.qknorm.q_norm_min, std::sqrt(8.0), 1e-4);
  EXPECT_NEAR(r.qknorm.k_norm_max, std::sqrt(8.0), 1e-4);
  EXPECT_GT(r.plain.k_norm_min, 4 * r.plain.q_norm_max);  // K ~ N(0, 1) * 8
  double sum = 0, top_plain = 0, top_norm = 0;
  for (double w : r.qknorm.weights) sum += w, top_norm = std::max(top_norm, w);
  for (double w : r.plain.weights) top_plain = std::max(top_plain, w);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_GT(top_plain, top_norm);
}

TEST(DemosQKNorm, BadConfigIsAnError) {
  dm::QKNormConfig c;
  c.scales = {1, -2};
  EXPECT_XG_ERROR(dm::run_qknorm(c), "qknorm: --scales must be positive, got -2");
}

// --- norms: LayerNorm and RMSNorm by hand -----------------------------------------------------------

TEST(DemosNorms, HandCalculationMatchesModulesAndTheWorkedNumbers) {
  dm::NormsResult r = dm::run_norms(dm::NormsConfig{});
  // x = [1, 3, 5, 7] worked by hand (4 decimals).
  EXPECT_DOUBLE_EQ(r.layer.mean, 4.0);
  EXPECT_DOUBLE_EQ(r.layer.var, 5.0);
  EXPECT_NEAR(r.layer.sigma, 2.2361, 5e-5);
  expect_near_all(r.layer.formula, {-1.3416, -0.4472, 0.4472, 1.3416}, 5e-5);
  EXPECT_DOUBLE_EQ(r.rms.mean_sq, 21.0);
  EXPECT_NEAR(r.rms.rms, 4.5826, 5e-5);
  expect_near_all(r.rms.formula, {0.2182, 0.6547, 1.0911, 1.5275}, 5e-5);
  EXPECT_NEAR(r.rms.out_mean, 0.8729, 5e-5);
  EXPECT_NEAR(r.rms.out_rms, 1.0, 1e-6);
  EXPECT_NEAR(r.layer.out_mean, 0.0, 1e-6);
  EXPECT_NEAR(r.layer.out_std, 1.0, 1e-5);
  // The modules equal the explicit formula with their eps (float32 rounding).
  EXPECT_LT(max_abs(r.layer.module, r.layer.formula_eps), 1e-6);
  EXPECT_LT(max_abs(r.rms.module, r.rms.formula_eps), 1e-6);
  // The second example (--homework): RMSNorm of x = [3, 4].
  EXPECT_NEAR(r.homework.rms, std::sqrt(12.5), 1e-12);
  expect_near_all(r.homework.module, {3 / std::sqrt(12.5), 4 / std::sqrt(12.5)}, 1e-6);
  EXPECT_EQ(r.layernorm_params, 16);
  EXPECT_EQ(r.rmsnorm_params, 8);
}

TEST(DemosNorms, BadConfigIsAnError) {
  dm::NormsConfig c;
  c.x = {1};
  EXPECT_XG_ERROR(dm::run_norms(c), "norms: --x needs at least two numbers, got 1");
}

// --- swiglu: ReLU FFN vs SwiGLU parameter counts -------------------------------------------------

TEST(DemosSwiGLU, ParameterCountsAtDModel64And512) {
  dm::SwiGLUConfig c;
  c.d_models = {64, 512};
  auto rows = dm::run_swiglu(c);
  ASSERT_EQ(rows.size(), 2u);
  const auto& s = rows[1];  // d_model 512
  EXPECT_EQ(s.relu_d_ff, 2048);
  EXPECT_EQ(s.relu_params, 2099712);  // fc1 + fc2 with nn.Linear's biases included
  EXPECT_EQ(s.relu_weights, 2 * 512 * 2048);
  EXPECT_EQ(s.swiglu_d_ff, 1536);     // int(8/3 * 512) = 1365 rounded up to 256
  EXPECT_EQ(s.swiglu_params, 2359296);
  EXPECT_NEAR(s.ratio, 2359296.0 / 2099712.0, 1e-12);  // 1.12x to two decimals
  EXPECT_DOUBLE_EQ(s.ratio_weights, 1.125);
  const auto& t = rows[0];
  EXPECT_EQ(t.swiglu_d_ff, 256);
  EXPECT_EQ(t.relu_params, 2 * 64 * 256 + 256 + 64);
  EXPECT_EQ(t.swiglu_params, 3 * 64 * 256);
}

TEST(DemosSwiGLU, BadConfigIsAnError) {
  dm::SwiGLUConfig c;
  c.d_models = {512, 0};
  EXPECT_XG_ERROR(dm::run_swiglu(c), "swiglu: --d-models must be positive, got 0");
}

// --- softmax: naive vs max-shifted softmax --------------------------------------------------------

TEST(DemosSoftmax, NaiveOverflowsStableMatchesTheFormula) {
  dm::SoftmaxResult r = dm::run_softmax(dm::SoftmaxConfig{});
  ASSERT_EQ(r.rows.size(), 3u);
  const auto& big = r.rows[0];  // [1000, 1001, 1002]
  EXPECT_FALSE(big.naive_finite);
  for (double v : big.naive) EXPECT_TRUE(std::isnan(v));
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_TRUE(std::isfinite(big.softmax[j]));
    EXPECT_NEAR(big.softmax[j], big.stable_formula[j], 1e-6);
    EXPECT_NEAR(big.log_softmax[j], big.log_formula[j], 1e-5);
  }
  expect_near_all(big.stable_formula, {0.09003057, 0.24472847, 0.66524096}, 1e-8);
  EXPECT_NEAR(big.ce, 0.40760596, 1e-6);
  EXPECT_TRUE(std::isnan(big.ce_naive));
  // The row [10, 5, 100]: exp(100) overflows float32, the stable form gives softmax
  // [8.1940e-40, 5.5211e-42, 1] and log-softmax [-90, -95, 0].
  const auto& hundred = r.rows[1];
  EXPECT_FALSE(hundred.naive_finite);
  EXPECT_EQ(hundred.naive[0], 0.0);
  EXPECT_NEAR(hundred.softmax[0] / 8.1940e-40, 1.0, 1e-4);
  EXPECT_NEAR(hundred.softmax[1] / 5.5211e-42, 1.0, 1e-3);
  EXPECT_NEAR(hundred.softmax[2], 1.0, 1e-7);
  expect_near_all(hundred.log_softmax, {-90, -95, 0}, 1e-5);
  EXPECT_NEAR(hundred.ce, 95.0, 1e-5);
  EXPECT_TRUE(std::isinf(hundred.ce_naive));
  // Small logits: both forms agree.
  const auto& small = r.rows[2];
  EXPECT_TRUE(small.naive_finite);
  EXPECT_LT(max_abs(small.naive, small.stable_formula), 1e-6);
  EXPECT_NEAR(r.ce_mean, r.ce_mean_formula, 1e-5);
  EXPECT_NEAR(r.overflow_at, 88.7228, 1e-4);
}

TEST(DemosSoftmax, BadConfigIsAnError) {
  dm::SoftmaxConfig c;
  c.targets = {2, 1, 3};
  EXPECT_XG_ERROR(dm::run_softmax(c), "softmax: target 3 of row 2 is not a class in [0, 3)");
}

// --- the seed_demos executable -----------------------------------------------------------------------

namespace {

using xg::test::CliRun;
using xg::test::count_lines;
using xg::test::slurp;
using xg::test::test_file_base;

bool exists(const std::string& path) { return std::ifstream(path).good(); }

CliRun run_demos(const std::string& args) { return xg::test::run_cli(XGRAD_SEED_DEMOS_EXE, args); }

}  // namespace

TEST(SeedDemosCli, BadSubcommandIsOneLineAndStatus2) {
  CliRun r = run_demos("bogus --out x");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("seed_demos: unknown subcommand 'bogus'", 0), 0u) << r.err;
  EXPECT_EQ(r.out, "");
  CliRun none = run_demos("");
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(count_lines(none.err), 1) << none.err;
  EXPECT_NE(none.err.find("expected a subcommand"), std::string::npos) << none.err;
}

TEST(SeedDemosCli, BadFlagsAndValuesAreOneLineAndStatus2) {
  const std::string out = " --out '" + test_file_base() + "_dir'";
  for (const char* args :
       {"positions --bogus 1", "norms --seq-len 3", "positions --seq-len abc", "positions --seq-len 1",
        "positions --shifts 1,x", "positions --d-head 7", "kvcache --check-heads 3", "kvcache --dtype-bytes 0",
        "qknorm --scales 0,1", "qknorm --trials 0", "swiglu --d-models 0", "softmax --targets 5",
        "softmax --logits '1,2;3'", "norms --x 1", "all --seq-len 4", "all extra"}) {
    CliRun r = run_demos(args + out);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("seed_demos: ", 0), 0u) << args << ": " << r.err;
  }
  CliRun r = run_demos("positions --shifts 1,x" + out);
  EXPECT_NE(r.err.find("--shifts: expected a comma-separated list of integers >= 1, got '1,x'"), std::string::npos)
      << r.err;
  CliRun k = run_demos("kvcache --check-heads 3" + out);
  EXPECT_NE(k.err.find("--check-heads must divide --check-d-model 64, got 3"), std::string::npos) << k.err;
}

TEST(SeedDemosCli, HelpListsSubcommandsAndFlags) {
  CliRun r = run_demos("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* s : {"positions", "kvcache", "qknorm", "norms", "swiglu", "softmax", "all", "--out", "--seed",
                        "--shifts", "--check-heads", "--scales", "--d-models", "--logits", "--homework"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  CliRun p = run_demos("qknorm --help");
  EXPECT_EQ(p.status, 0);
  EXPECT_NE(p.out.find("--k-scale"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find("--shifts"), std::string::npos) << p.out;
}

TEST(SeedDemosCli, AllWritesEveryOutput) {
  const std::string dir = test_file_base() + "_all";
  CliRun r = run_demos("all --quick --seed 7 --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  // Numbers each demo prints.
  for (const char* s : {"MHA -> GQA-4  saves 87.5%", "MHA -> MLA    saves 93.8%", "Step 3 - standard deviation sigma = sqrt(5.0) = 2.2361",
                        "RMSNorm result: [0.2182, 0.6547, 1.0911, 1.5275]", "= 2099712 parameters",
                        "W_down(1536x512) = 2359296 parameters", "ratio SwiGLU / ReLU: 1.12x",
                        "naive exp(x)/sum exp(x):        [nan, nan, nan]   <- overflow",
                        "xgrad log_softmax:              [-2.4076, -1.4076, -0.4076]"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  for (const char* f : {"positions/positions_maps.csv", "positions/positions_profile.csv", "positions/positions.json",
                        "kvcache/kvcache.csv", "kvcache/kvcache_check.csv", "kvcache/kvcache.json", "qknorm/qknorm.csv",
                        "qknorm/qknorm.json", "norms/norms.json", "swiglu/swiglu.csv", "swiglu/swiglu.json",
                        "softmax/softmax.json"})
    EXPECT_TRUE(exists(dir + "/" + f)) << f;
  if (xg::experiments::gnuplot_available())
    for (const char* f : {"positions/positions_maps", "positions/positions_profile", "kvcache/kvcache_sec7",
                          "kvcache/kvcache_sec9", "qknorm/qknorm_entropy", "qknorm/qknorm_max_prob", "swiglu/swiglu"}) {
      EXPECT_TRUE(exists(dir + "/" + f + ".png")) << f;
      EXPECT_TRUE(exists(dir + "/" + f + ".svg")) << f;
    }
  auto j = nlohmann::json::parse(slurp(dir + "/positions/positions.json"));
  EXPECT_TRUE(j.contains("git_revision"));
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["flags"]["quick"], true);
  EXPECT_EQ(j["flags"]["positions"]["seq-len"], 16);
  EXPECT_LT(j["schemes"]["rope"]["max_shift_change"].get<double>(), 1e-5);
  auto k = nlohmann::json::parse(slurp(dir + "/kvcache/kvcache.json"));
  EXPECT_EQ(k["check"]["all_match"], true);
  EXPECT_EQ(k["section7"]["rows"][0]["bytes"], 67108864);
  auto s = nlohmann::json::parse(slurp(dir + "/softmax/softmax.json"));
  EXPECT_EQ(s["rows"][0]["naive"][0], "nan");
  std::string maps = slurp(dir + "/positions/positions_maps.csv");
  EXPECT_EQ(maps.rfind("scheme,i,j,score,weight\nnone,0,0,", 0), 0u);
  EXPECT_EQ(count_lines(maps), 1 + 3 * 16 * 16);
  auto sw = nlohmann::json::parse(slurp(dir + "/swiglu/swiglu.json"));
  EXPECT_EQ(sw["rows"].size(), 2u);  // --quick: d_model 64 and 512
}

TEST(SeedDemosCli, OneSubcommandRecordsItsFlags) {
  const std::string dir = test_file_base() + "_kv";
  CliRun r = run_demos("kvcache --seq-len 2048 --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  // 2048 tokens, 32 heads x 128, fp16: 32 MiB for MHA, 4 MiB for GQA-4 (87.5% saved).
  EXPECT_NE(r.out.find("MHA            32            1        16384       32.0 MiB    100.0%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GQA-4           4            8         2048        4.0 MiB     12.5%"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(slurp(dir + "/kvcache.json"));
  EXPECT_EQ(j["flags"]["seq-len"], 2048);
  EXPECT_EQ(j["flags"]["subcommand"], "kvcache");
  EXPECT_EQ(j["seed"], 42);
  EXPECT_EQ(j["section7"]["rows"][1]["bytes"], 2LL * 4 * 128 * 2048 * 2);
}

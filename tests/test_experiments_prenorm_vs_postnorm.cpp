// experiments/prenorm_vs_postnorm.cpp: the executable's flag handling (one-line errors, exit
// status 2) and its outputs, run as a user would.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.hpp"

namespace {

using xg::test::CliRun;
using xg::test::count_lines;
using xg::test::slurp;

CliRun run_study(const std::string& args) { return xg::test::run_cli(XGRAD_PRENORM_EXE, args); }

}  // namespace

TEST(ExperimentsPrenormCli, UnknownFlagIsOneLineAndStatus2) {
  CliRun r = run_study("--bogus 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("prenorm_vs_postnorm: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(ExperimentsPrenormCli, BadValuesAreOneLineAndStatus2) {
  for (const char* args : {"--norm batchnorm", "--sublayer conv", "--layers abc", "--layers 0", "--depths 4,x",
                           "--d-model 6 --heads 4", "--seeds 0",
                           "--train-lrs 0.1,abc", "--train-steps 0", "--xiong-heads 3", "--xiong-dropouts 1.5"}) {
    CliRun r = run_study(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(count_lines(r.err), 1) << args << ": " << r.err;
  }
  CliRun r = run_study("--norm batchnorm");
  EXPECT_NE(r.err.find("--norm: expected layernorm or rmsnorm, got 'batchnorm'"), std::string::npos) << r.err;
}

TEST(ExperimentsPrenormCli, HelpListsTheFlags) {
  CliRun r = run_study("--help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--layers", "--d-model", "--batch", "--seed", "--norm", "--final-norm", "--sublayer",
                           "--init", "--save-init", "--out", "--sweep", "--xiong", "--train", "--corpus",
                           "--sweep-init", "--sweep-save-init", "--xiong-init", "--xiong-save-init", "--xiong-dropouts"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

TEST(ExperimentsPrenormCli, InitRunPrintsTheGradientTableAndWritesOutputs) {
  const std::string dir = std::string(XGRAD_BINARY_DIR) + "/test_experiments_cli_out";
  CliRun r = run_study("--init '" + std::string(XGRAD_FIXTURE_DIR) + "/prenorm.safetensors' --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  // Each layer's weight-gradient norm, bottom layer first, in the layout and with the numbers
  // that the same experiment prints in PyTorch (tests/fixtures/gen_prenorm.py).
  // The seed's two columns first, then the same Pre-Norm net with a final norm.
  EXPECT_NE(r.out.find(" Layer    Post-Norm grad     Pre-Norm grad   Pre-Norm + final norm\n" + std::string(66, '-')),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Layer 1:          0.411592          6.629197                0.305093"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Layer 1:          0.411592          6.629197"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Pre-Norm / Post-Norm = 16.11x"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(slurp(dir + "/prenorm.json"));
  EXPECT_TRUE(j.contains("git_revision"));
  EXPECT_EQ(j["seed"], 42);
  EXPECT_EQ(j["flags"]["layers"], 8);
  EXPECT_EQ(j["grad_post"].size(), 8u);
  EXPECT_NEAR(j["ratio_layer1"].get<double>(), 6.629197 / 0.411592, 1e-4);
  EXPECT_NEAR(j["final_norm_variant"]["ratio_layer1"].get<double>(), 0.305093 / 0.411592, 1e-4);
  std::string csv = slurp(dir + "/prenorm.csv");
  EXPECT_EQ(csv.rfind("layer,post_grad,pre_grad,post_rel_top,pre_rel_top,pre_final_norm_grad\n1,", 0), 0u) << csv;
  EXPECT_EQ(count_lines(csv), 9);
}

TEST(ExperimentsPrenormCli, DefaultRunUsesPyTorchsSeed42Tensors) {
  const std::string dir = std::string(XGRAD_BINARY_DIR) + "/test_experiments_cli_default";
  CliRun r = run_study("--out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("init: PyTorch's torch.manual_seed(42) tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Layer 8:          0.532629          4.577710"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Pre-Norm / Post-Norm = 16.11x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Pre-Norm + final norm / Post-Norm = 0.74x"), std::string::npos) << r.out;
  CliRun x = run_study("--xgrad-init --out '" + dir + "'");
  ASSERT_EQ(x.status, 0) << x.err;
  EXPECT_NE(x.out.find("init: xgrad generator, seed 42"), std::string::npos) << x.out;
  EXPECT_EQ(x.out.find("Layer 8:          0.532629          4.577710"), std::string::npos) << x.out;
}

// The runs of a --train cell go one per thread; each run's losses must depend on its seed only
// (the init draws from the process's one default generator, so runs in parallel must not
// interleave their draws). Written when two threads gave seed 42's Pre-Norm run another start.
TEST(ExperimentsPrenormCli, TrainCurvesDoNotDependOnTheThreadCount) {
  std::string curves[2];
  for (int t = 1; t <= 2; ++t) {
    const std::string dir = std::string(XGRAD_BINARY_DIR) + "/test_experiments_train_threads" + std::to_string(t);
    CliRun r = run_study("--quick --train --train-seeds 2 --threads " + std::to_string(t) + " --out '" + dir + "'");
    ASSERT_EQ(r.status, 0) << r.err;
    curves[t - 1] = slurp(dir + "/train_curves.csv");
  }
  EXPECT_GT(count_lines(curves[0]), 100);
  EXPECT_EQ(curves[0], curves[1]);
}

// --xiong-save-init writes each run's state; --xiong-init runs from those files and prints and
// writes the same numbers (the same for the sweep's --sweep-save-init / --sweep-init).
TEST(ExperimentsPrenormCli, SavedStatesReproduceTheSweepAndXiong) {
  const std::string base = std::string(XGRAD_BINARY_DIR) + "/test_experiments_cli_states";
  CliRun a = run_study("--quick --sweep --xiong --xiong-save-init '" + base + "/xiong_init' --sweep-save-init '" +
                       base + "/sweep_init' --out '" + base + "/drawn'");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_FALSE(slurp(base + "/xiong_init/xiong_L2_seed43.safetensors").empty());
  EXPECT_FALSE(slurp(base + "/sweep_init/sweep_d16_L8_seed43.safetensors").empty());
  CliRun b = run_study("--quick --sweep --xiong --xiong-init '" + base + "/xiong_init' --sweep-init '" + base +
                       "/sweep_init' --out '" + base + "/loaded'");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find("initial states: read from"), std::string::npos) << b.out;
  for (const char* f : {"xiong.csv", "xiong_seeds.csv", "xiong_ratios.csv", "sweep.csv", "sweep_seeds.csv"})
    EXPECT_EQ(slurp(base + "/drawn/" + f), slurp(base + "/loaded/" + f)) << f;
  CliRun missing = run_study("--quick --xiong --xiong-init '" + base + "/nowhere' --out '" + base + "/x'");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.err.find("nowhere/xiong_L1_seed42.safetensors"), std::string::npos) << missing.err;
}

// Every median over seeds comes with its interval in the CSV and JSON, every seed's own value
// is kept, and the plots draw the intervals.
TEST(ExperimentsPrenormCli, MediansCarryIntervalsAndPlotsShowThem) {
  const std::string dir = std::string(XGRAD_BINARY_DIR) + "/test_experiments_cli_intervals";
  CliRun r = run_study("--quick --sweep --xiong --train --out '" + dir + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("[95% bootstrap interval"), std::string::npos) << r.out;
  const std::string sweep = slurp(dir + "/sweep.csv");
  EXPECT_EQ(sweep.rfind("d_model,depth,seeds,pre_final_norm,post_l1_median,post_l1_lo,post_l1_hi,", 0), 0u) << sweep;
  EXPECT_NE(sweep.find("ratio_median,ratio_lo,ratio_hi"), std::string::npos) << sweep;
  // 2 widths x (4 + 8 layers) x 2 seeds, one line each, and the header.
  EXPECT_EQ(count_lines(slurp(dir + "/sweep_seeds.csv")), 1 + 2 * 12 * 2);
  EXPECT_EQ(slurp(dir + "/xiong.csv").rfind("dropout,layers,stack,norm,layer,seeds,single_median,single_lo,single_hi,", 0),
            0u);
  // 2 dropouts x (1 + 2 layers) x 2 stacks x 2 norms x 2 seeds.
  EXPECT_EQ(count_lines(slurp(dir + "/xiong_seeds.csv")), 1 + 2 * 3 * 2 * 2 * 2);
  EXPECT_NE(slurp(dir + "/xiong_ratios.csv").find("top_over_bottom_expected"), std::string::npos);
  EXPECT_EQ(slurp(dir + "/train_cells.csv").rfind("method,depth,lr,seeds,ok,final_median,final_lo,final_hi\n", 0), 0u);
  EXPECT_EQ(slurp(dir + "/train_boundary.csv").rfind("depth,method,seeds,boundary_all_ok,seeds_agreeing,", 0), 0u);
  auto x = nlohmann::json::parse(slurp(dir + "/xiong.json"));
  const auto& tb = x["results"][0]["top_over_bottom_expected"];
  EXPECT_LE(tb["lo"].get<double>(), tb["median"].get<double>());
  EXPECT_EQ(tb["seeds"], 2);
  EXPECT_EQ(x["interval"]["resamples"], 4000);
  EXPECT_TRUE(x["top_layer_exponent"][0]["fitted"].contains("lo"));
  auto s = nlohmann::json::parse(slurp(dir + "/sweep.json"));
  EXPECT_TRUE(s["points"][0]["ratio"].contains("hi"));
  EXPECT_EQ(s["points"][0]["rel_top_post"].size(), 4u);
  auto t = nlohmann::json::parse(slurp(dir + "/train.json"));
  EXPECT_TRUE(t["cells"][0]["final_loss"].contains("lo"));
  for (const char* gp : {"sweep_ratio.gp", "xiong_encoder.gp", "xiong_decoder.gp"})
    EXPECT_NE(slurp(dir + "/" + gp).find("with yerrorlines"), std::string::npos) << gp;
  for (const char* gp : {"sweep_profile_d8_post.gp", "sweep_profile_d16_pre.gp"})
    EXPECT_NE(slurp(dir + "/" + gp).find("with filledcurves"), std::string::npos) << gp;
}

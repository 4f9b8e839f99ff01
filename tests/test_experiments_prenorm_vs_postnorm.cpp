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
                           "--train-lrs 0.1,abc", "--train-steps 0", "--xiong-heads 3"}) {
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
                           "--init", "--save-init", "--out", "--sweep", "--xiong", "--train", "--corpus"})
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

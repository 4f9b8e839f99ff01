// finetune/tools/xg_train.cpp, run as a user would: it trains and writes a loadable model,
// a run killed with SIGKILL resumes to bitwise the same weights, and bad input is one line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "autograd/elementwise.hpp"
#include "finetune/checkpoint.hpp"
#include "nn/decoder.hpp"
#include "tests/cli_run.hpp"

namespace fs = std::filesystem;
using xg::test::CliRun;
using xg::test::run_cli;
using xg::test::slurp;

namespace {

const std::string kXgTrain = std::string(XGRAD_TOOL_DIR) + "/xg-train";

// A text with structure a tiny model picks up in a few dozen steps.
void write_text(const fs::path& p, int lines, int offset) {
  std::ofstream f(p);
  for (int i = 0; i < lines; ++i)
    f << "line " << (i + offset) % 10 << ": the quick brown fox jumps over the lazy dog.\n";
}

CliRun run_train(const std::string& args) { return run_cli(kXgTrain, args); }

std::string tiny_flags(const fs::path& dir, const fs::path& out) {
  return "--data " + (dir / "train.txt").string() + " --eval-data " + (dir / "eval.txt").string() + " --out " +
         out.string() +
         " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 4 --warmup 5 --lr 3e-3 --dropout 0.1"
         " --eval-batches 4 --seed 5";
}

// A fresh folder with the texts and an uninterrupted run into <folder>/full, the reference
// a killed and resumed run must match bitwise.
fs::path uninterrupted_run(const std::string& sub, const std::string& flags) {
  const fs::path d = xg::test::fresh_test_dir(sub);
  write_text(d / "train.txt", 400, 0);
  write_text(d / "eval.txt", 40, 3);
  CliRun full = run_train(tiny_flags(d, d / "full") + flags);
  EXPECT_EQ(full.status, 0) << full.err;
  return d;
}

}  // namespace

TEST(XgTrain, TrainsAndWritesALoadableModel) {
  const fs::path d = xg::test::fresh_test_dir("trains");
  write_text(d / "train.txt", 400, 0);
  write_text(d / "eval.txt", 40, 3);
  CliRun r = run_train(tiny_flags(d, d / "out") + " --steps 40 --eval-every 10 --sample-tokens 20");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("unigram baseline"), std::string::npos) << r.out;
  // Held-out loss falls between the first and the last evaluation.
  std::vector<double> evals;
  std::ifstream log(d / "out" / "log.jsonl");
  for (std::string line; std::getline(log, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "eval") evals.push_back(j["loss"].get<double>());
  }
  ASSERT_EQ(evals.size(), 4u);
  EXPECT_LT(evals.back(), 0.8 * evals.front());
  auto model = xg::nn::load_pretrained((d / "out").string());
  EXPECT_EQ(model->config().vocab_size, 259);
  EXPECT_EQ(model->config().n_layers, 2);
  auto args = nlohmann::json::parse(slurp((d / "out" / "args.json").string()));
  EXPECT_EQ(args["flags"]["steps"], 40);
  EXPECT_TRUE(args.contains("git_revision"));
  EXPECT_TRUE(fs::exists(d / "out" / "summary.json"));
}

TEST(XgTrain, KilledRunResumesToBitwiseTheSameWeights) {
  const std::string common = " --steps 30 --checkpoint-every 5 --eval-every 0 --sample-tokens 0";
  const fs::path d = uninterrupted_run("kill", common);

  // Start the same run, SIGKILL it once a mid-run checkpoint exists, then --resume.
  const fs::path out = d / "killed";
  const fs::path ckpt = out / "checkpoint.safetensors";
  ASSERT_TRUE(xg::test::kill_when_file_appears(kXgTrain + " " + tiny_flags(d, out) + common + " >/dev/null 2>&1", ckpt.string()))
      << "the run finished before a checkpoint appeared, or none did";
  EXPECT_GE(xg::finetune::load_checkpoint(ckpt.string()).progress.step, 5);
  CliRun resumed = run_train(tiny_flags(d, out) + common + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resume step"), std::string::npos) << resumed.out;
  EXPECT_EQ(slurp((out / "model.safetensors").string()), slurp((d / "full" / "model.safetensors").string()));
}

TEST(XgTrain, KilledWhileWritingACheckpointResumesFromThePreviousOne) {
  const std::string common = " --steps 20 --checkpoint-every 5 --eval-every 0 --sample-tokens 0";
  const fs::path d = uninterrupted_run("kill_in_write", common);

  // SIGKILL inside the second checkpoint write (step 10), after its temporary file is written.
  const fs::path out = d / "killed";
  ::setenv("XGRAD_FAULT_KILL_IN_WRITE", "checkpoint.safetensors:2", 1);
  CliRun killed = run_train(tiny_flags(d, out) + common);
  ::unsetenv("XGRAD_FAULT_KILL_IN_WRITE");
  EXPECT_TRUE(killed.status == -1 || killed.status == 128 + SIGKILL) << killed.status << killed.err;
  EXPECT_EQ(xg::finetune::load_checkpoint((out / "checkpoint.safetensors").string()).progress.step, 5);
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(out)) leftovers += e.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(leftovers, 1);
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));

  CliRun resumed = run_train(tiny_flags(d, out) + common + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("left by a run killed while writing"), std::string::npos) << resumed.out;
  EXPECT_EQ(slurp((out / "model.safetensors").string()), slurp((d / "full" / "model.safetensors").string()));
  for (const auto& e : fs::directory_iterator(out)) EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos);
}

TEST(XgTrain, BadFlagsAndInputsAreOneLine) {
  const fs::path d = xg::test::fresh_test_dir("errors");
  write_text(d / "train.txt", 40, 0);
  CliRun r = run_train("--bogus 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("xg-train: unrecognised option '--bogus'"), std::string::npos) << r.err;
  r = run_train("--data x --out " + (d / "o").string() + " --ffn conv");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--ffn: expected one of gelu, relu, swiglu, got 'conv'"), std::string::npos) << r.err;
  r = run_train("--data x --out " + (d / "o").string() + " --heads 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--heads: must be positive and divide --d-model 128"), std::string::npos) << r.err;
  r = run_train("--data x --out " + (d / "o").string() + " --schedule exp");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--schedule: expected constant, cosine or linear"), std::string::npos) << r.err;
  // Each model flag by its name, and no unsigned flag wraps a negative value.
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"--layers 0", "xg-train: --layers must be positive, got 0 (see --help)\n"},
           {"--dropout 1.5", "xg-train: --dropout must be in [0, 1), got 1.5 (see --help)\n"},
           {"--max-seq-len 0", "xg-train: --max-seq-len must be positive, got 0 (see --help)\n"},
           {"--seed -1", "xg-train: --seed: expected an integer >= 0, got '-1' (see --help)\n"}}) {
    r = run_train("--data x --out " + (d / "o").string() + " " + flag);
    EXPECT_EQ(r.status, 2) << flag;
    EXPECT_EQ(r.err, message);
  }
  std::ofstream(d / "empty.txt").close();
  r = run_train("--data " + (d / "empty.txt").string() + " --out " + (d / "o").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("empty.txt"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(d / "o")) << "nothing is written for bad input";
}

TEST(XgTrain, NonFiniteLossStopsOrSkipsAndNeverCheckpointsNaN) {
  const fs::path d = xg::test::fresh_test_dir("nan");
  write_text(d / "train.txt", 200, 0);
  // lr 1e30 without clipping: the first update makes the weights ~1e30 and step 2's loss NaN.
  const std::string diverge = " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 4 --warmup 0 --lr 1e30 --clip 0"
                              " --steps 6 --checkpoint-every 1 --sample-tokens 0 --data " + (d / "train.txt").string();
  CliRun r = run_train("--out " + (d / "stop").string() + diverge);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("xg-train: step 2: the loss is"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopped (--on-nan stop); the checkpoint of step 1 is kept"), std::string::npos) << r.err;
  const auto c = xg::finetune::load_checkpoint((d / "stop" / "checkpoint.safetensors").string());
  EXPECT_EQ(c.progress.step, 1);
  for (const auto& [name, t] : c.model) EXPECT_TRUE(xg::isfinite_all(t)) << name;

  r = run_train("--out " + (d / "anomaly").string() + diverge + " --detect-anomaly");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("xg-train: step 2: detect_anomaly: op '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in module 'layers.0."), std::string::npos) << r.err;

  r = run_train("--out " + (d / "skip").string() + diverge + " --on-nan skip");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("step 2 skipped (--on-nan skip): the loss is"), std::string::npos) << r.out;
  auto model = xg::nn::load_pretrained((d / "skip").string());
  for (const auto& [name, t] : model->named_parameters()) EXPECT_TRUE(xg::isfinite_all(t)) << name;

  r = run_train("--out " + (d / "bad").string() + diverge + " --on-nan retry");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--on-nan: expected stop or skip, got 'retry'"), std::string::npos) << r.err;
}

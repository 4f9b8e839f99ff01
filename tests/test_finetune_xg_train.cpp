// tools/xg_train.cpp, run as a user would: it trains and writes a loadable model,
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
#include <regex>
#include <sstream>
#include <limits>
#include <map>
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

// --bf16 where products are widened to float32 (no AVX512-BF16 or AMX, or XGRAD_GEMM_BF16=widened)
// runs, and says once that it saves memory there but not time (a Zen 3: 0.71-0.85x float32's tokens/s).
TEST(XgTrain, Bf16OnWidenedProductsSaysItSavesMemoryNotTime) {
  const fs::path d = xg::test::fresh_test_dir("bf16_widened");
  write_text(d / "train.txt", 400, 0);
  write_text(d / "eval.txt", 40, 3);
  const std::string flags = " --steps 6 --eval-every 0 --sample-tokens 0";
  CliRun widened = run_cli("/usr/bin/env", "XGRAD_GEMM_BF16=widened " + kXgTrain + " " + tiny_flags(d, d / "bf16") + flags + " --bf16");
  ASSERT_EQ(widened.status, 0) << widened.err << widened.out;
  const std::string note = "xg-train: --bf16: bf16 widened to float32, then ";
  const std::string tail = "(XGRAD_GEMM_BF16=widened): activations take half the memory, but steps no less time than float32's";
  EXPECT_NE(widened.out.find(note), std::string::npos) << widened.out;
  EXPECT_NE(widened.out.find(tail), std::string::npos) << widened.out;
  CliRun f32 = run_cli("/usr/bin/env", "XGRAD_GEMM_BF16=widened " + kXgTrain + " " + tiny_flags(d, d / "f32") + flags);
  ASSERT_EQ(f32.status, 0) << f32.err << f32.out;
  EXPECT_EQ(f32.out.find("--bf16:"), std::string::npos) << f32.out;
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
  // every weight blew up: the first NaN comes out of the first layer's q/k/v projection (xg::linear_cat,
  // when its sums meet infinities of both signs) or the rotation of its output, so the nearest
  // parameters upstream are the q, k and v weights, named in their common module
  EXPECT_NE(r.err.find("in module 'layers.0.attention' (nearest parameters upstream: layers.0.attention.w_q.weight, "
                       "layers.0.attention.w_k.weight, layers.0.attention.w_v.weight)"),
            std::string::npos)
      << r.err;

  r = run_train("--out " + (d / "skip").string() + diverge + " --on-nan skip --max-skipped 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("step 2 skipped (--on-nan skip): the loss is"), std::string::npos) << r.out;
  auto model = xg::nn::load_pretrained((d / "skip").string());
  for (const auto& [name, t] : model->named_parameters()) EXPECT_TRUE(xg::isfinite_all(t)) << name;

  // Past --max-skipped (0.1 of the steps by default) the run has diverged: it fails with the
  // count and writes no model.
  std::string longer = diverge;
  longer.replace(longer.find(" --steps 6"), 10, " --steps 20");
  r = run_train("--out " + (d / "diverged").string() + longer + " --on-nan skip");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("xg-train: step 4: 3 of the 4 steps so far were skipped (--on-nan skip), more than --max-skipped "
                       "0.1 of the 20 steps; the run has diverged and stops, no model written (the checkpoint of step 3 "
                       "is kept"),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "diverged" / "model.safetensors"));

  r = run_train("--out " + (d / "bad").string() + diverge + " --on-nan retry");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--on-nan: expected stop or skip, got 'retry'"), std::string::npos) << r.err;
}

// Bad input is found before any long work and before anything is written: data too short for
// --seq-len (the held-out file too), a folder as --data, sizes that ask for more memory than the
// machine has, NaN or Inf as a number. Each is one line naming the flag and the value.
TEST(XgTrain, BadInputIsRefusedBeforeAnythingIsWritten) {
  const fs::path d = xg::test::fresh_test_dir("refused");
  write_text(d / "train.txt", 400, 0);
  write_text(d / "short.txt", 1, 0);  // 53 bytes
  const std::string out = (d / "o").string();
  const std::string small = " --d-model 32 --layers 2 --heads 2 --seq-len 64 --batch 4 --steps 3 --warmup 0 --sample-tokens 0";
  auto expect_refused = [&](const CliRun& r, int status, const std::string& text) {
    EXPECT_EQ(r.status, status) << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out)) << "nothing is written for bad input: " << r.err;
  };
  expect_refused(run_train("--data " + (d / "short.txt").string() + " --out " + out + small), 1,
                 "--data " + (d / "short.txt").string() + ": 53 bytes, too short for --seq-len 64 (a window needs 65)");
  expect_refused(run_train("--data " + (d / "train.txt").string() + " --eval-data " + (d / "short.txt").string() +
                           " --out " + out + small),
                 1, "--eval-data " + (d / "short.txt").string() + ": 53 bytes, too short for --seq-len 64");
  expect_refused(run_train("--data " + d.string() + " --out " + out + small), 1, d.string() + ": is a folder, expected a file");
  // A stand-in for a machine of 4 GB, so that the figures do not depend on this one.
  ::setenv("XGRAD_MEMORY_LIMIT", "4294967296", 1);
  const std::string data = "--data " + (d / "train.txt").string() + " --out " + out;
  for (const std::string flags : {" --seq-len 100000000", " --max-seq-len 100000000", " --batch 100000000", " --layers 100000"}) {
    const CliRun r = run_train(data + flags);
    expect_refused(r, 2, "more than this machine's 4 GB of memory (see --help)");
    EXPECT_NE(r.err.find(flags.substr(1)), std::string::npos) << r.err;  // names the flag and its value
    EXPECT_NE(r.err.find("needs about"), std::string::npos) << r.err;
  }
  ::unsetenv("XGRAD_MEMORY_LIMIT");
  expect_refused(run_train(data + small + " --lr nan"), 2, "xg-train: --lr: expected a finite number, got 'nan'");
  expect_refused(run_train(data + small + " --dropout inf"), 2, "--dropout: expected a finite number, got 'inf'");
}

// A run folder belongs to one run: a second run into it is refused (changing no file) unless it
// resumes or overwrites, a live run's lock keeps any other out, and what killed writers left
// behind is removed at the next start while a live writer's file stays.
TEST(XgTrain, ARunFolderIsOwnedByOneRun) {
  const fs::path d = xg::test::fresh_test_dir("owned");
  write_text(d / "train.txt", 400, 0);
  const fs::path out = d / "o";
  auto sized = [&](int d_model, int heads, const fs::path& folder, int64_t steps) {
    return "--data " + (d / "train.txt").string() + " --out " + folder.string() + " --d-model " + std::to_string(d_model) +
           " --heads " + std::to_string(heads) + " --steps " + std::to_string(steps) +
           " --layers 2 --seq-len 32 --batch 4 --warmup 1 --checkpoint-every 2 --sample-tokens 0";
  };
  const std::string flags = sized(32, 2, out, 4), wider = sized(64, 4, out, 4);
  CliRun r = run_train(flags);
  ASSERT_EQ(r.status, 0) << r.err;
  auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(out)) files[e.path().filename().string()] = slurp(e.path().string());
    return files;
  };
  const auto before = snapshot();
  // Another model size into the same folder: refused, every file as it was.
  r = run_train(wider);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--out " + out.string() + " already holds a run (args.json, checkpoint.safetensors, config.json,"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume continues it, --overwrite replaces it"), std::string::npos) << r.err;
  EXPECT_EQ(snapshot(), before);
  // A folder holding something that is not a run is never emptied.
  fs::create_directories(d / "notes");
  std::ofstream(d / "notes" / "todo.txt") << "keep me\n";
  r = run_train("--data " + (d / "train.txt").string() + " --out " + (d / "notes").string() +
                " --overwrite --steps 2 --warmup 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("holds files but no run (no args.json: todo.txt); not removing them"), std::string::npos) << r.err;
  EXPECT_EQ(slurp((d / "notes" / "todo.txt").string()), "keep me\n");
  EXPECT_FALSE(fs::exists(d / "notes" / ".lock"));
  // --overwrite replaces the run.
  r = run_train(wider + " --overwrite");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(xg::nn::load_pretrained(out.string())->config().block.d_model, 64);

  // While a run is live in a folder, no other starts there (not even a --resume), and the
  // live one's files are left alone.
  const fs::path live_out = d / "live";
  const pid_t running = fork();
  if (running == 0) {
    const std::string cmd = "exec " + kXgTrain + " " + sized(32, 2, live_out, 1000000) + " --log-every 1 >/dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int waited = 0; waited < 20000 && !fs::exists(live_out / "log.jsonl"); waited += 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  r = run_train(sized(32, 2, live_out, 1000000) + " --resume");
  kill(running, SIGKILL);
  waitpid(running, nullptr, 0);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--out " + live_out.string() + " is in use by another run (process " + std::to_string(running) + " holds"),
            std::string::npos) << r.err;

  // Leftovers: the temporary file of a dead process goes, a live one's stays.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path stale = out / ("model.safetensors.tmp." + std::to_string(dead));
  const fs::path live = out / ("summary.json.tmp." + std::to_string(::getpid()));
  std::ofstream(stale) << "half";
  std::ofstream(live) << "being written";
  r = run_train(wider + " --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("removed " + stale.string() + ", left by a run killed while writing"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
}

// A resumed run keeps the settings in its args.json: a changed flag is refused by name, with
// both values, and args.json stays as it was; --allow-change accepts a named change. Without
// args.json, the checkpoint's own record of the model refuses another size in one line.
TEST(XgTrain, ResumeRefusesChangedSettings) {
  const fs::path d = xg::test::fresh_test_dir("resume_flags");
  write_text(d / "train.txt", 400, 0);
  const fs::path out = d / "o";
  const std::string flags = "--data " + (d / "train.txt").string() + " --out " + out.string() +
                            " --layers 2 --heads 2 --seq-len 32 --batch 4 --warmup 1"
                            " --checkpoint-every 2 --sample-tokens 0";
  CliRun r = run_train(flags + " --d-model 32 --steps 4 --lr 0.003");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string args = slurp((out / "args.json").string());
  r = run_train(flags + " --d-model 32 --steps 4 --resume --lr 0.001");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "xg-train: --resume: --lr was 0.003 in " + (out / "args.json").string() +
                       ", now 0.001 (a resumed run keeps its settings; --allow-change lr accepts the change) (see --help)\n");
  r = run_train(flags + " --d-model 64 --steps 4 --lr 0.003 --resume");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--resume: --d-model was 32"), std::string::npos) << r.err;
  EXPECT_EQ(slurp((out / "args.json").string()), args) << "a refused resume leaves args.json as it was";
  // The same file name holding other text is another run.
  const std::string text = slurp((d / "train.txt").string());
  write_text(d / "train.txt", 400, 1);
  r = run_train(flags + " --d-model 32 --steps 4 --lr 0.003 --resume");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--resume: the contents of --data changed since " + (out / "args.json").string() +
                       " was written (crc32:"),
            std::string::npos) << r.err;
  EXPECT_EQ(slurp((out / "args.json").string()), args) << "a refused resume leaves args.json as it was";
  std::ofstream(d / "train.txt", std::ios::binary) << text;
  r = run_train(flags + " --d-model 32 --steps 6 --lr 0.003 --resume --allow-change steps --log-every 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resume step 4"), std::string::npos) << r.out;

  fs::remove(out / "args.json");
  r = run_train(flags + " --d-model 64 --steps 6 --lr 0.003 --resume");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("was written by a run with a different config (block.d_model: checkpoint 32, now 64)"),
            std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// What a resume reads is checked whole: a damaged tensor (one flipped bit), non-finite
// optimizer moments, a schedule far past the checkpoint's step and a missing optimizer state are
// each an error naming the file and what is wrong, never a run that goes on with them.
TEST(XgTrain, ResumeRefusesADamagedOrInconsistentCheckpoint) {
  const fs::path d = xg::test::fresh_test_dir("bad_ckpt");
  write_text(d / "train.txt", 400, 0);
  const fs::path out = d / "o";
  const std::string flags = "--data " + (d / "train.txt").string() + " --out " + out.string() +
                            " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 4 --warmup 1"
                            " --checkpoint-every 2 --sample-tokens 0";
  CliRun r = run_train(flags + " --steps 4");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string path = (out / "checkpoint.safetensors").string();
  const std::string good = slurp(path);
  const xg::finetune::Checkpoint c = xg::finetune::load_checkpoint(path);
  auto resume_fails_with = [&](const std::string& text) {
    const CliRun bad = run_train(flags + " --steps 6 --allow-change steps --resume");
    EXPECT_EQ(bad.status, 1) << bad.out;
    EXPECT_NE(bad.err.find(text), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    std::ofstream(path, std::ios::binary) << good;
  };
  // One bit of the last tensor's data.
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;
  std::ofstream(path, std::ios::binary) << flipped;
  resume_fails_with("safetensors: " + path + ": tensor 'sched.last_step' is damaged: the CRC32 of its data is ");

  xg::finetune::Checkpoint inf = c;
  const std::string moment = "state.0.exp_avg_sq";
  ASSERT_TRUE(inf.optim.count(moment));
  inf.optim[moment] = inf.optim[moment].clone();
  inf.optim[moment].data<float>()[0] = std::numeric_limits<float>::infinity();
  xg::finetune::save_checkpoint(path, inf);
  resume_fails_with("--resume: " + path + ": optimizer state '" + moment + "' holds NaN or Inf");

  xg::finetune::Checkpoint late = c;
  late.sched["last_step"] = xg::from_vector(std::vector<int64_t>{int64_t(1) << 62}, {});
  xg::finetune::save_checkpoint(path, late);
  resume_fails_with("sched.last_step is 4.61169e+18, the checkpoint is at step 4");

  // A damaged config in the checkpoint's metadata (JSON that no longer parses) is named on one
  // line, where it differs, not printed whole.
  xg::finetune::Checkpoint damaged = c;
  std::string& config = damaged.progress.extra.at("config");
  const std::size_t quote = config.find("\"n_layers\"");
  ASSERT_NE(quote, std::string::npos) << config;
  config[quote] = '\x01';
  xg::finetune::save_checkpoint(path, damaged);
  resume_fails_with("was written by a run with a different config (checkpoint: '");
  xg::finetune::save_checkpoint(path, damaged);
  resume_fails_with("\\x01n_layers");

  xg::finetune::Checkpoint missing = c;
  for (const char* k : {"state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq"}) ASSERT_EQ(missing.optim.erase(k), 1u) << k;
  xg::finetune::save_checkpoint(path, missing);
  resume_fails_with("holds optimizer state for " + std::to_string(c.progress.optim_states - 1) + " parameters, it was written with " +
                    std::to_string(c.progress.optim_states));
}

// A full disk stops the run with the file's name (here log.jsonl is /dev/full), rather than a
// log cut mid-line while training goes on.
TEST(XgTrain, AWriteErrorStopsTheRunNamingTheFile) {
  const fs::path d = xg::test::fresh_test_dir("full");
  write_text(d / "train.txt", 400, 0);
  fs::create_directories(d / "o");
  fs::create_symlink("/dev/full", d / "o" / "log.jsonl");
  const CliRun r = run_train("--data " + (d / "train.txt").string() + " --out " + (d / "o").string() +
                             " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 4 --warmup 1 --steps 30"
                             " --log-every 1 --sample-tokens 0 --resume");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("xg-train: writing " + (d / "o" / "log.jsonl").string() + " failed (No space left on device: the disk holding " +
                       (d / "o").string() + " is full); stopped at step "),
            std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "o" / "model.safetensors"));
}

// --steps alone sets the run's length: the default warmup is min(100, steps / 10) (2 here),
// and the held-out loss is logged with its unit and token count. An explicit --warmup longer
// than the run is still refused, naming both flags.
TEST(XgTrain, StepsAloneRunsWithAnAutoWarmup) {
  const fs::path d = xg::test::fresh_test_dir("auto_warmup");
  write_text(d / "train.txt", 400, 0);
  write_text(d / "eval.txt", 40, 3);
  const std::string flags = "--data " + (d / "train.txt").string() + " --eval-data " + (d / "eval.txt").string() +
                            " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 4 --eval-batches 2"
                            " --sample-tokens 0 --steps 20";
  CliRun r = run_train(flags + " --out " + (d / "out").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(xg::test::slurp((d / "out" / "args.json").string()))["flags"]["warmup"], -1);
  EXPECT_TRUE(std::regex_search(r.out, std::regex("eval step 20  loss [0-9.]+ nats/token over 256 tokens \\([0-9.]+ bits/byte\\)")))
      << r.out;
  r = run_train(flags + " --warmup 21 --out " + (d / "out2").string());
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("xg-train: --warmup 21 is longer than the run (--steps 20)"), std::string::npos) << r.err;
}

namespace xg_train_moved {

// The flags of a small run of <data> into <out> (a checkpoint at its end).
std::string run_flags(const fs::path& data, const fs::path& out) {
  return "--data " + data.string() + " --out " + out.string() +
         " --d-model 32 --layers 2 --heads 2 --batch 4 --warmup 1 --sample-tokens 0 --log-every 1";
}

// Paths are records, not identity: a run folder copied elsewhere, with its data moved too,
// resumes (also without args.json, on the checkpoint's own record). What is the run's identity
// is refused by name: --steps, --seq-len, --seed and the data's contents.
TEST(XgTrain, ACopiedRunFolderResumesAndChangedSettingsAreNamed) {
  const fs::path d = xg::test::fresh_test_dir("moved");
  write_text(d / "train.txt", 400, 0);
  CliRun r = run_train(run_flags(d / "train.txt", d / "o") + " --steps 4 --seq-len 32 --seed 5");
  ASSERT_EQ(r.status, 0) << r.err;
  fs::copy_file(d / "train.txt", d / "moved.txt");
  auto copy = [&](const std::string& name) {
    fs::copy(d / "o", d / name, fs::copy_options::recursive);
    return d / name;
  };
  const std::string same = " --steps 4 --seq-len 32 --seed 5 --resume";
  const fs::path c = copy("copy");
  r = run_train(run_flags(d / "moved.txt", c) + " --steps 6 --seq-len 32 --seed 5 --resume --allow-change steps");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resume step 4"), std::string::npos) << r.out;
  const fs::path bare = copy("bare");
  fs::remove(bare / "args.json");
  r = run_train(run_flags(d / "moved.txt", bare) + " --steps 6 --seq-len 32 --seed 5 --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resume step 4"), std::string::npos) << r.out;

  const fs::path e = copy("refused");
  const std::string args = (e / "args.json").string();
  r = run_train(run_flags(d / "moved.txt", e) + " --steps 8 --seq-len 32 --seed 5 --resume");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--resume: --steps was 4 in " + args + ", now 8"), std::string::npos) << r.err;
  r = run_train(run_flags(d / "moved.txt", e) + " --steps 4 --seq-len 16 --seed 5 --resume");
  EXPECT_NE(r.err.find("--resume: --seq-len was 32 in " + args + ", now 16"), std::string::npos) << r.err;
  r = run_train(run_flags(d / "moved.txt", e) + " --steps 4 --seq-len 32 --seed 6 --resume");
  EXPECT_NE(r.err.find("--resume: --seed was 5 in " + args + ", now 6"), std::string::npos) << r.err;
  write_text(d / "moved.txt", 400, 1);
  r = run_train(run_flags(d / "moved.txt", e) + same);
  EXPECT_NE(r.err.find("--resume: the contents of --data changed since " + args), std::string::npos) << r.err;
  fs::remove(e / "args.json");  // the checkpoint's own record still knows the data
  r = run_train(run_flags(d / "moved.txt", e) + same);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("was written by a run with a different data"), std::string::npos) << r.err;
}

// A resume removes what a `kill -9`ed writer left, also when its pid is a zombie not reaped yet
// (its parent has not waited for it) or was reused by a process started after the file was
// written; save_adapter's `.staged.<pid>` too.
TEST(XgTrain, AResumeRemovesStaleTemporariesOfZombiesAndReusedPids) {
  const fs::path d = xg::test::fresh_test_dir("stale");
  write_text(d / "train.txt", 400, 0);
  CliRun r = run_train(run_flags(d / "train.txt", d / "o") + " --steps 4");
  ASSERT_EQ(r.status, 0) << r.err;
  const pid_t zombie = fork();
  if (zombie == 0) _exit(0);
  const pid_t reused = fork();
  if (reused == 0) {
    ::pause();
    _exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first child has exited
  const fs::path of_zombie = d / "o" / ("checkpoint.safetensors.tmp." + std::to_string(zombie));
  const fs::path of_reused = d / "o" / ("model.safetensors.tmp." + std::to_string(reused));
  std::ofstream(of_zombie) << "half";
  std::ofstream(d / "o" / ("adapter_model.safetensors.staged." + std::to_string(zombie))) << "half";
  std::ofstream(of_reused) << "half";
  fs::last_write_time(of_reused, fs::last_write_time(of_reused) - std::chrono::hours(1));
  r = run_train(run_flags(d / "train.txt", d / "o") + " --steps 6 --allow-change steps --resume");
  kill(reused, SIGKILL);
  waitpid(reused, nullptr, 0);
  waitpid(zombie, nullptr, 0);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(of_zombie.string() + ", left by a run killed while writing"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(of_reused.string() + ", left by a run killed while writing"), std::string::npos) << r.out;
  for (const auto& e : fs::directory_iterator(d / "o")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
    EXPECT_EQ(e.path().filename().string().find(".staged."), std::string::npos) << e.path();
  }
}

}  // namespace xg_train_moved

namespace xg_train_full_disk {

// A disk that fills during a run (a file size limit, set without root: `prlimit --fsize`, with
// SIGXFSZ ignored so that writes fail with EFBIG): the run stops naming the file and the disk,
// log.jsonl holds whole lines only, and the last checkpoint is kept, so a resume continues.
TEST(XgTrain, AFullDiskStopsTheRunWithWholeLogLinesAndTheLastCheckpoint) {
  const fs::path d = xg::test::fresh_test_dir("fills");
  write_text(d / "train.txt", 400, 0);
  const fs::path o = d / "o";
  const std::string flags = xg_train_moved::run_flags(d / "train.txt", o);
  CliRun r = run_train(flags + " --steps 4");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto limit = fs::file_size(o / "log.jsonl") + 6000;
  r = run_cli("/bin/sh", "-c \"trap '' XFSZ; exec prlimit --fsize=" + std::to_string(limit) + " '" + kXgTrain + "' " + flags +
                             " --steps 2000 --allow-change steps --checkpoint-every 0 --resume\"");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("xg-train: writing " + (o / "log.jsonl").string() + " failed (File too large: the disk holding " +
                       o.string() + " is full); stopped at step "),
            std::string::npos) << r.err;
  const std::string log = slurp((o / "log.jsonl").string());
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back(), '\n');
  std::stringstream lines(log);
  for (std::string line; std::getline(lines, line);) EXPECT_NO_THROW(nlohmann::json::parse(line)) << line;
  EXPECT_EQ(xg::finetune::load_checkpoint((o / "checkpoint.safetensors").string()).progress.step, 4);
  r = run_train(flags + " --steps 6 --allow-change steps --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resume step 4"), std::string::npos) << r.out;
}

}  // namespace xg_train_full_disk

// tools/xg_finetune.cpp and xg_generate.cpp, run as a user would, on a tiny base
// model: SFT teaches an answer that xg-generate then prints (with the adapter, and merged),
// DPO raises the preference for the chosen answer, GRPO runs, and bad input is one line
// with nothing written. On a Hugging Face folder (a fixture model with Qwen3's vocabulary and
// tokenizer files): xg-generate --ids gives PyTorch's greedy ids, LoRA SFT writes PEFT's names
// and its merged folder reloads to the adapted model's logits, DPO and GRPO run with its chat
// template.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "autograd/graph.hpp"
#include "autograd/random.hpp"
#include "finetune/peft.hpp"
#include "io/safetensors.hpp"
#include "nn/decoder.hpp"
#include "nn/hf.hpp"
#include "tests/cli_run.hpp"
#include "tests/tiny_base.hpp"
#include "tests/torch_fixture.hpp"
#include "text/tokenizer.hpp"

namespace fs = std::filesystem;
using xg::test::CliRun;
using xg::test::run_cli;
using xg::test::slurp;
using xg::test::tiny_base;
using nlohmann::json;

namespace {

CliRun run(const std::string& tool, const std::string& args) {
  return run_cli(std::string(XGRAD_TOOL_DIR) + "/" + tool, args);
}

void write_lines(const fs::path& p, const std::vector<json>& rows) {
  std::ofstream f(p);
  for (const json& r : rows) f << r.dump() << "\n";
}

std::vector<json> eval_records(const fs::path& log, const std::string& key) {
  std::vector<json> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    json j = json::parse(line);
    if (j["kind"] == "eval") out.push_back(j[key]);
  }
  return out;
}

const char* kWords[] = {"apple", "river", "stone", "cloud", "glass", "tiger", "bread", "flute"};

// GRPO rows over kWords: "Say <w>.", answered <w>.
void write_say_rows(const fs::path& path) {
  std::vector<json> rows;
  for (const char* w : kWords) rows.push_back({{"prompt", std::string("Say ") + w + "."}, {"answers", {w}}});
  write_lines(path, rows);
}

// DPO pairs over kWords: "Is <w> a word?", chosen "yes", rejected "no".
void write_yes_no_pairs(const fs::path& path) {
  std::vector<json> rows;
  for (const char* w : kWords)
    rows.push_back({{"prompt", std::string("Is ") + w + " a word?"}, {"chosen", "yes"}, {"rejected", "no"}});
  write_lines(path, rows);
}

// SFT rows over kWords: "Is <w> a word?" answered "yes"; returns the rows written.
std::vector<json> write_yes_rows(const fs::path& path) {
  std::vector<json> rows;
  for (const char* w : kWords) rows.push_back({{"prompt", std::string("Is ") + w + " a word?"}, {"response", "yes"}});
  write_lines(path, rows);
  return rows;
}

// A Hugging Face folder as a user downloads one: the random-weight Qwen3 of
// tests/fixtures/hf/qwen3_vocab (Qwen3's real vocabulary size) beside the Qwen3 tokenizer files
// (tokenizer.json, tokenizer_config.json with its chat template).
fs::path hf_qwen3_folder(const fs::path& d) {
  const fs::path out = d / "qwen3";
  fs::create_directories(out);
  const fs::path fx = XGRAD_FIXTURE_DIR;
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fx / "hf" / "qwen3_vocab" / f, out / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(fx / "tokenizers" / "qwen3" / f, out / f);
  return out;
}

// `s` single-quoted for the shell.
std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A failed run: exit status `status` and one line of stderr that says `text`.
void expect_one_line_error(const CliRun& r, int status, const std::string& text) {
  EXPECT_EQ(r.status, status) << r.out;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

std::string joined_ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace

TEST(XgFinetune, SftTeachesAnAnswerThatGenerateAndMergePrint) {
  const fs::path d = xg::test::fresh_test_dir("sft");
  const fs::path base = tiny_base(d);
  const std::vector<json> rows = write_yes_rows(d / "train.jsonl");
  write_lines(d / "eval.jsonl", {{{"prompt", "Is lemon a word?"}, {"response", "yes"}}});
  CliRun r = run("xg-finetune",
                 "--base " + base.string() + " --data " + (d / "train.jsonl").string() + " --eval-data " +
                     (d / "eval.jsonl").string() + " --out " + (d / "out").string() +
                     " --steps 60 --warmup 5 --lr 1e-2 --batch 4 --eval-every 30 --lora-r 4 --lora-dropout 0 --merge");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<json> loss = eval_records(d / "out" / "log.jsonl", "loss");
  ASSERT_EQ(loss.size(), 3u);  // steps 0, 30, 60
  // NOTE: not near 0: behind the frozen final RMSNorm and the random LM head of this untrained
  // base, logits cannot grow sharp; the greedy answer below is right nonetheless.
  EXPECT_LT(loss.back().get<double>(), 0.5 * loss.front().get<double>());
  // PEFT's files.
  json cfg = json::parse(slurp((d / "out" / "adapter_config.json").string()));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["base_model_name_or_path"], base.string());
  // The held-out prompt is answered with the taught answer, with the adapter and merged.
  CliRun g = run("xg-generate", "--base " + base.string() + " --adapter " + (d / "out").string() +
                                    " --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 8");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(g.out, "yes\n");
  // The merged folder says it was finetuned, so --format auto (the default) is instruct there.
  CliRun m = run("xg-generate", "--base " + (d / "out" / "merged").string() +
                                    " --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 8");
  ASSERT_EQ(m.status, 0) << m.err;
  EXPECT_EQ(m.out, "yes\n");
  CliRun raw = run("xg-generate", "--base " + (d / "out" / "merged").string() +
                                      " --format raw --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 8");
  ASSERT_EQ(raw.status, 0) << raw.err;
  EXPECT_NE(raw.out, "yes\n");
  // With the adapter scaled to 0 the base model speaks again.
  CliRun z = run("xg-generate", "--base " + base.string() + " --adapter " + (d / "out").string() +
                                    " --adapter-scale 0 --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 8");
  ASSERT_EQ(z.status, 0) << z.err;
  EXPECT_NE(z.out, "yes\n");
  // Rows longer than --max-len are cut, and the run says how many of each file's rows.
  EXPECT_EQ(r.out.find("are cut"), std::string::npos) << r.out;
  CliRun cut = run("xg-finetune", "--base " + base.string() + " --data " + (d / "train.jsonl").string() +
                                      " --eval-data " + (d / "eval.jsonl").string() + " --out " + (d / "cut").string() +
                                      " --steps 1 --warmup 0 --max-len 12");
  ASSERT_EQ(cut.status, 0) << cut.err << cut.out;
  EXPECT_NE(cut.out.find(std::to_string(rows.size()) + " of " + std::to_string(rows.size()) + " rows of " +
                         (d / "train.jsonl").string() + " are longer than --max-len 12 tokens and are cut to it"),
            std::string::npos)
      << cut.out;
  EXPECT_NE(cut.out.find("1 of 1 rows of " + (d / "eval.jsonl").string() + " are longer than --max-len 12"),
            std::string::npos)
      << cut.out;
}

TEST(XgFinetune, DpoWithDetectAnomalyNamesTheOpAndStops) {
  // The DPO step runs the policy and the adapter-disabled reference in one graph; lr 1e30
  // without clipping blows the adapters up after step 1, so step 2's policy pass makes NaN.
  const fs::path d = xg::test::fresh_test_dir("dpo_anomaly");
  const fs::path base = tiny_base(d);
  write_yes_no_pairs(d / "train.jsonl");
  const std::string flags = "--objective dpo --base " + base.string() + " --data " + (d / "train.jsonl").string() +
                            " --steps 4 --warmup 0 --lr 1e30 --clip 0 --batch 2 --lora-dropout 0 --checkpoint-every 1";
  CliRun r = run("xg-finetune", flags + " --out " + (d / "stop").string() + " --detect-anomaly");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.err.find("xg-finetune: step 2: detect_anomaly: op '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lora_"), std::string::npos) << r.err;  // the module is an adapted one
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // --on-nan skip (allowed to skip them all): the bad steps are skipped and the run completes
  // with finite adapters.
  r = run("xg-finetune", flags + " --out " + (d / "skip").string() + " --on-nan skip --max-skipped 1");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("skipped (--on-nan skip)"), std::string::npos) << r.out;
}

TEST(XgFinetune, DpoRaisesThePreferenceForTheChosenAnswer) {
  const fs::path d = xg::test::fresh_test_dir("dpo");
  const fs::path base = tiny_base(d);
  write_yes_no_pairs(d / "train.jsonl");
  CliRun r = run("xg-finetune", "--objective dpo --base " + base.string() + " --data " + (d / "train.jsonl").string() +
                                    " --eval-data " + (d / "train.jsonl").string() + " --out " + (d / "out").string() +
                                    " --steps 30 --warmup 3 --lr 1e-2 --batch 4 --eval-every 30 --lora-dropout 0");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<json> acc = eval_records(d / "out" / "log.jsonl", "reward_accuracy");
  const std::vector<json> margin = eval_records(d / "out" / "log.jsonl", "reward_margin");
  ASSERT_EQ(acc.size(), 2u);
  EXPECT_EQ(acc.front().get<double>(), 0.0);  // policy = reference: every implicit reward is 0
  EXPECT_EQ(acc.back().get<double>(), 1.0);
  EXPECT_GT(margin.back().get<double>(), 0.5);
  EXPECT_NE(r.out.find("rewards/margins"), std::string::npos) << r.out;
}

// --dpo-loss picks TRL's loss of the margin z. At step 0 the policy is the reference (LoRA's
// B is zero), so z = 0 and each loss has its value at 0: sigmoid ln 2, ipo (1 / (2 beta))^2 =
// 25 at beta 0.1, hinge relu(1) = 1, robust ln 2.
TEST(XgFinetune, DpoLossFlagPicksTheLoss) {
  const fs::path d = xg::test::fresh_test_dir("dpo_loss");
  const fs::path base = tiny_base(d);
  write_yes_no_pairs(d / "train.jsonl");
  const std::map<std::string, double> at_zero = {{"sigmoid", std::log(2.0)}, {"ipo", 25.0}, {"hinge", 1.0},
                                                 {"robust", std::log(2.0)}};
  for (const auto& [name, want] : at_zero) {
    CliRun r = run("xg-finetune", "--objective dpo --base " + base.string() + " --data " + (d / "train.jsonl").string() +
                                      " --eval-data " + (d / "train.jsonl").string() + " --out " + (d / name).string() +
                                      " --steps 2 --warmup 0 --batch 4 --eval-every 2 --dpo-loss " + name +
                                      (name == "robust" ? " --label-smoothing 0.1" : ""));
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    const std::vector<json> loss = eval_records(d / name / "log.jsonl", "loss");
    ASSERT_EQ(loss.size(), 2u) << name;
    EXPECT_NEAR(loss.front().get<double>(), want, 1e-5) << name;
  }
  CliRun r = run("xg-finetune", "--base x --data y --out z --dpo-loss ipo");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--dpo-loss is for --objective dpo"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective dpo --dpo-loss kto");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--dpo-loss"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective dpo --dpo-loss robust --label-smoothing 0.5");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--dpo-loss robust needs --label-smoothing below 0.5"), std::string::npos) << r.err;
}

// Early stopping: trained to answer "yes", evaluated on rows answered "no", the held-out loss
// only rises, so the best evaluation is the first (step 0) and the run stops after
// --early-stopping-patience evaluations without a better one; the adapter written is that best
// one (LoRA's B still zero: the base unchanged). A resume of the stopped run has nothing to do.
TEST(XgFinetune, EarlyStoppingKeepsTheBestAdapter) {
  const fs::path d = xg::test::fresh_test_dir("early_stop");
  const fs::path base = tiny_base(d);
  write_yes_rows(d / "train.jsonl");
  std::vector<json> no_rows;
  for (const char* w : kWords) no_rows.push_back({{"prompt", std::string("Is ") + w + " a word?"}, {"response", "no"}});
  write_lines(d / "eval.jsonl", no_rows);
  const std::string flags = "--base " + base.string() + " --data " + (d / "train.jsonl").string() + " --eval-data " +
                            (d / "eval.jsonl").string() + " --out " + (d / "out").string() +
                            " --steps 40 --warmup 0 --lr 1e-2 --batch 4 --eval-every 2 --lora-dropout 0"
                            " --early-stopping-patience 2";
  CliRun r = run("xg-finetune", flags);
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<json> loss = eval_records(d / "out" / "log.jsonl", "loss");
  ASSERT_EQ(loss.size(), 3u) << r.out;  // steps 0, 2, 4
  EXPECT_GT(loss[1].get<double>(), loss[0].get<double>());
  EXPECT_GT(loss[2].get<double>(), loss[0].get<double>());
  EXPECT_NE(r.out.find("stopped early at step 4; the adapter written is the best evaluated: step 0, loss"),
            std::string::npos) << r.out;
  const xg::TensorMap adapter = xg::io::load_safetensors((d / "out" / "adapter_model.safetensors").string());
  int b_seen = 0;
  for (const auto& [name, t] : adapter)
    if (name.find("lora_B") != std::string::npos) {
      ++b_seen;
      for (double v : t.to_vector()) ASSERT_EQ(v, 0.0) << name;
    }
  EXPECT_GT(b_seen, 0);
  // The checkpoint is the stopped run's: --resume has nothing left to do.
  r = run("xg-finetune", flags + " --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("the run stopped early at step 4"), std::string::npos) << r.out + r.err;
  EXPECT_EQ(eval_records(d / "out" / "log.jsonl", "loss").size(), 3u);
  // Usage errors.
  r = run("xg-finetune", "--base x --data y --out z --early-stopping-patience 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--early-stopping-patience needs --eval-data"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --metric-for-best loss");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--metric-for-best needs --early-stopping-patience"), std::string::npos) << r.err;
}

// --packing: SFT's rows packed two to a row of 64 tokens teach the answer as padded batches
// do (and --epochs counts passes over the packed rows); DPO's pairs, one to a row, raise the
// preference for the chosen answer.
TEST(XgFinetune, PackedSftAndDpoTeachWhatPaddedBatchesTeach) {
  const fs::path d = xg::test::fresh_test_dir("packed");
  const fs::path base = tiny_base(d);
  write_yes_rows(d / "train.jsonl");
  CliRun r = run("xg-finetune", "--base " + base.string() + " --data " + (d / "train.jsonl").string() + " --out " +
                                    (d / "sft").string() +
                                    " --packing --max-len 64 --batch 2 --epochs 30 --warmup 5 --lr 1e-2 --lora-r 4 "
                                    "--lora-dropout 0");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  // Each row is BOS + "Is <5 letters> a word?" + newline + "yes" + EOS = 22 byte tokens.
  EXPECT_NE(r.out.find("--packing: 8 rows packed into 4 rows of 64 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sft on 8 rows, 60 steps"), std::string::npos) << r.out;  // 30 passes over 4 rows, 2 a step
  CliRun g = run("xg-generate", "--base " + base.string() + " --adapter " + (d / "sft").string() +
                                    " --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 8");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(g.out, "yes\n");

  write_yes_no_pairs(d / "pairs.jsonl");
  r = run("xg-finetune", "--objective dpo --base " + base.string() + " --data " + (d / "pairs.jsonl").string() +
                             " --eval-data " + (d / "pairs.jsonl").string() + " --out " + (d / "dpo").string() +
                             " --packing --max-len 64 --steps 30 --warmup 3 --lr 1e-2 --batch 4 --eval-every 30 "
                             "--lora-dropout 0");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("--packing: 8 rows packed into 8 rows of 64 tokens"), std::string::npos) << r.out;
  const std::vector<json> acc = eval_records(d / "dpo" / "log.jsonl", "reward_accuracy");
  ASSERT_EQ(acc.size(), 2u);
  EXPECT_EQ(acc.front().get<double>(), 0.0);
  EXPECT_EQ(acc.back().get<double>(), 1.0);
}

TEST(XgFinetune, GrpoSamplesGroupsAndLogsRewards) {
  const fs::path d = xg::test::fresh_test_dir("grpo");
  const fs::path base = tiny_base(d);
  write_say_rows(d / "train.jsonl");
  CliRun r = run("xg-finetune", "--objective grpo --base " + base.string() + " --data " + (d / "train.jsonl").string() +
                                    " --eval-data " + (d / "train.jsonl").string() + " --out " + (d / "out").string() +
                                    " --steps 4 --warmup 1 --group-size 4 --max-new-tokens 6 --reward prefix --eval-rows 4"
                                    " --loss-type dr_grpo");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_EQ(json::parse(slurp((d / "out" / "args.json").string()))["flags"]["loss-type"], "dr_grpo");
  EXPECT_EQ(eval_records(d / "out" / "log.jsonl", "reward").size(), 2u);
  const auto sampled = eval_records(d / "out" / "log.jsonl", "sampled_reward");  // 4 samples x 4 prompts
  ASSERT_EQ(sampled.size(), 2u);
  for (const json& s : sampled) EXPECT_TRUE(s.get<double>() >= 0 && s.get<double>() <= 1) << s;
  std::ifstream log(d / "out" / "log.jsonl");
  int train = 0;
  for (std::string line; std::getline(log, line);) {
    json j = json::parse(line);
    if (j["kind"] != "train") continue;
    ++train;
    EXPECT_TRUE(j.contains("reward") && j.contains("kl") && j.contains("completion_len")) << line;
    EXPECT_LE(j["completion_len"].get<double>(), 6.0);
  }
  EXPECT_EQ(train, 4);
  EXPECT_TRUE(fs::exists(d / "out" / "adapter_model.safetensors"));
}

TEST(XgFinetune, RlooTrainsOnGrpoSamplesAndSaysSo) {
  const fs::path d = xg::test::fresh_test_dir("rloo");
  const fs::path base = tiny_base(d);
  write_say_rows(d / "train.jsonl");
  // Rewards that differ within a group: the length of the request line (so of the completion).
  const std::string by_length = "while IFS= read -r l; do echo ${#l}; done";
  const std::string flags = "--base " + base.string() + " --data " + (d / "train.jsonl").string() + " --eval-data " +
                            (d / "train.jsonl").string() + " --steps 3 --warmup 1 --group-size 4 --max-new-tokens 6" +
                            " --reward-cmd " + shell_quoted(by_length) + " --eval-rows 4 --seed 3";
  CliRun r = run("xg-finetune", "--objective rloo " + flags + " --out " + (d / "rloo").string());
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("xg-finetune: rloo on"), std::string::npos) << r.out;
  EXPECT_EQ(json::parse(slurp((d / "rloo" / "args.json").string()))["flags"]["objective"], "rloo");
  EXPECT_EQ(json::parse(slurp((d / "rloo" / "summary.json").string()))["objective"], "rloo");
  EXPECT_EQ(eval_records(d / "rloo" / "log.jsonl", "reward").size(), 2u);
  // The same samples (same seed) under GRPO's loss train a different adapter.
  CliRun g = run("xg-finetune", "--objective grpo " + flags + " --out " + (d / "grpo").string());
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_TRUE(slurp((d / "rloo" / "adapter_model.safetensors").string()) !=
              slurp((d / "grpo" / "adapter_model.safetensors").string()));
  // A run is resumed only as what it was.
  CliRun wrong = run("xg-finetune", "--objective grpo " + flags + " --out " + (d / "rloo").string() + " --resume");
  EXPECT_NE(wrong.status, 0) << wrong.out;
  EXPECT_NE(wrong.err.find("objective"), std::string::npos) << wrong.err;
}

// Runs xg-finetune with `flags` into `out`, SIGKILLs it once a checkpoint appears, resumes it,
// and expects the adapter of the straight run in `straight`.
void expect_killed_run_resumes_to(const std::string& flags, const fs::path& out, const fs::path& straight) {
  ASSERT_TRUE(xg::test::kill_when_file_appears(std::string(XGRAD_TOOL_DIR) + "/xg-finetune " + flags + " --out " +
                                                   out.string() + " >/dev/null 2>&1",
                                               (out / "checkpoint.safetensors").string()))
      << "the run finished before a checkpoint appeared, or none did";
  CliRun resumed = run("xg-finetune", flags + " --out " + out.string() + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resume step"), std::string::npos) << resumed.out;
  EXPECT_EQ(slurp((out / "adapter_model.safetensors").string()), slurp((straight / "adapter_model.safetensors").string()));
}

TEST(XgFinetune, KilledRunResumesToBitwiseTheSameAdapter) {
  const fs::path d = xg::test::fresh_test_dir("resume");
  const fs::path base = tiny_base(d);
  write_yes_rows(d / "train.jsonl");
  // Adapter dropout draws from the global generator: the checkpoint must restore it too.
  const std::string flags = "--base " + base.string() + " --data " + (d / "train.jsonl").string() +
                            " --steps 80 --warmup 2 --batch 4 --checkpoint-every 4 --lora-dropout 0.1 --seed 9";
  CliRun full = run("xg-finetune", flags + " --out " + (d / "full").string());
  ASSERT_EQ(full.status, 0) << full.err;
  const fs::path out = d / "killed";
  expect_killed_run_resumes_to(flags, out, d / "full");
  // Resuming with other LoRA settings is refused, naming the setting (the run used the default r 16).
  CliRun other = run("xg-finetune", flags + " --out " + out.string() + " --resume --lora-r 4");
  EXPECT_EQ(other.status, 2);
  EXPECT_NE(other.err.find("--resume: --lora-r was 16 in " + (out / "args.json").string() + ", now 4"), std::string::npos)
      << other.err;
}

TEST(XgFinetune, AKilledBf16RunOnALowPrecisionBaseResumesBitwise) {
  // --bf16 products are cut into pieces whose shapes depend on the product's alone, and q8_0
  // and q4_0 products widen fixed tiles, so a resumed run computes what the straight one did.
  const fs::path d = xg::test::fresh_test_dir("resume_bf16");
  const fs::path base = tiny_base(d);
  write_yes_rows(d / "train.jsonl");
  for (const std::string dtype : {"q8_0", "q4_0", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string flags = "--base " + base.string() + " --data " + (d / "train.jsonl").string() +
                              " --steps 60 --warmup 2 --batch 4 --checkpoint-every 4 --seed 9 --bf16 --base-dtype " + dtype;
    const fs::path full_out = d / ("full_" + dtype), out = d / ("killed_" + dtype);
    CliRun full = run("xg-finetune", flags + " --out " + full_out.string());
    ASSERT_EQ(full.status, 0) << full.err;
    EXPECT_NE(full.out.find("--base-dtype " + dtype + ": parameters"), std::string::npos) << full.out;
    EXPECT_NE(full.out.find((dtype == "bf16" ? std::string("bfloat16") : dtype) + " x "), std::string::npos) << full.out;
    expect_killed_run_resumes_to(flags, out, full_out);
  }
}

TEST(XgFinetune, ANanInABf16BaseIsRefusedAtLoadAndWritesNothing) {
  // A BF16 base with one NaN weight loaded silently and the run stopped at
  // step 1 on a NaN loss, after writing .lock, args.json and log.jsonl into --out.
  const fs::path d = xg::test::fresh_test_dir("nan_base");
  auto model = xg::nn::load_model(tiny_base(d).string());
  {
    xg::NoGradGuard no_grad;
    xg::Tensor w = model->state_dict().at("layers.1.ffn.W_up.weight");
    w.data<float>()[40] = std::numeric_limits<float>::quiet_NaN();
  }
  xg::nn::SaveHFOptions o;
  o.dtype = xg::io::StoredFloat::BFloat16;
  o.source = std::string(XGRAD_FIXTURE_DIR) + "/gguf/byte256";
  xg::nn::save_hf(*model, (d / "hf").string(), o);
  write_yes_rows(d / "train.jsonl");
  for (const char* dtype : {"auto", "f32", "q8_0", "q4_0"}) {
    const fs::path out = d / (std::string("out_") + dtype);
    CliRun r = run("xg-finetune", "--base " + (d / "hf").string() + " --data " + (d / "train.jsonl").string() +
                                      " --steps 2 --out " + out.string() + " --base-dtype " + dtype);
    EXPECT_EQ(r.status, 1) << dtype << ": " << r.err;
    EXPECT_NE(r.err.find("model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' element 40 is nan"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(fs::exists(out)) << dtype;
  }
}

TEST(XgFinetune, BadInputIsOneLineAndWritesNothing) {
  const fs::path d = xg::test::fresh_test_dir("errors");
  const fs::path base = tiny_base(d);
  const std::string out = (d / "out").string();
  std::ofstream(d / "bad.jsonl") << "{\"prompt\": \"a\", \"response\": \"b\"}\n{\"prompt\": \"a\"}\n";
  CliRun r = run("xg-finetune", "--base " + base.string() + " --data " + (d / "bad.jsonl").string() + " --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("bad.jsonl:2:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("response"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(out));

  std::ofstream(d / "ok.jsonl") << "{\"prompt\": \"a\", \"response\": \"b\"}\n";
  r = run("xg-finetune", "--base " + base.string() + " --data " + (d / "ok.jsonl").string() + " --out " + out +
                             " --lora-targets q,fc9");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("fc9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("layers.0.attention.w_q"), std::string::npos) << r.err;  // lists the modules
  EXPECT_FALSE(fs::exists(out));

  r = run("xg-finetune", "--base " + (d / "nowhere").string() + " --data " + (d / "ok.jsonl").string() + " --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("nowhere is not a folder or a GGUF file (it does not exist)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  r = run("xg-finetune", "--base x --data y --out z --objective kto");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--objective: expected one of dpo, grpo, ppo, rloo, sft, got 'kto'"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective grpo --group-size 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--group-size: GRPO needs at least 2 completions per prompt"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective grpo --loss-type dapo");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--loss-type: expected one of bnpo, dr_grpo, grpo, got 'dapo'"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective dpo --beta -1.5");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--beta must be > 0 (>= 0 for grpo), got -1.5 "), std::string::npos) << r.err;  // not -1.500000
  r = run("xg-finetune", "--base x --data y --out z --objective grpo --packing");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--packing is for sft and dpo"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective dpo --packing --max-len 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--packing with dpo needs --max-len of at least 4 (two sequences a row), got 3"), std::string::npos)
      << r.err;
  r = run("xg-finetune", "--base x --data y --out z --lora-r 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("r"), std::string::npos) << r.err;

  // An adapter made for another base: the error names the file and the key.
  xg::nn::LMConfig c;
  c.vocab_size = 259;
  c.n_layers = 1;
  c.block = xg::nn::BlockConfig::llama(16, 2, 1);
  xg::nn::DecoderLM small(c);
  xg::nn::save_pretrained(small, (d / "small").string());
  r = run("xg-finetune", "--base " + (d / "small").string() + " --data " + (d / "ok.jsonl").string() + " --out " +
                             (d / "small_out").string() + " --steps 2 --warmup 0");
  ASSERT_EQ(r.status, 0) << r.err;
  CliRun g = run("xg-generate", "--base " + base.string() + " --adapter " + (d / "small_out").string());
  EXPECT_EQ(g.status, 1);
  EXPECT_NE(g.err.find("adapter_model.safetensors"), std::string::npos) << g.err;
  EXPECT_NE(g.err.find("key 'base_model.model.layers.0."), std::string::npos) << g.err;
  EXPECT_NE(g.err.find("has shape"), std::string::npos) << g.err;
  g = run("xg-generate", "--base " + base.string() + " --top-p 0");
  EXPECT_EQ(g.status, 2);
  EXPECT_NE(g.err.find("--top-p must be in (0, 1]"), std::string::npos) << g.err;
}

TEST(XgGenerate, HfFolderIdsAreTheFixturesGreedyIds) {
  const fs::path d = xg::test::fresh_test_dir("hf_ids");
  const fs::path folder = hf_qwen3_folder(d);
  const xg::TensorMap& fx = xg::test::fixture("hf");
  const xg::Tensor prompt = fx.at("qwen3_vocab.prompt"), generated = fx.at("qwen3_vocab.generated");
  const std::vector<int64_t> prompt_ids(prompt.data<int64_t>(), prompt.data<int64_t>() + prompt.numel());
  // The prompt as text: the fixture's random ids, which this tokenizer gives back from their text.
  const auto tok = xg::text::load_tokenizer(folder.string());
  const std::string text = tok->decode(prompt_ids, false);
  ASSERT_EQ(tok->encode(text, true), prompt_ids) << "the fixture's prompt is not the tokenization of its text";
  // PyTorch's 32 greedy tokens, up to and including an EOS (where xg-generate stops).
  std::vector<int64_t> want;
  for (int64_t t = prompt.numel(); t < generated.numel(); ++t) {
    want.push_back(generated.data<int64_t>()[t]);
    if (want.back() == tok->eos_id()) break;
  }
  CliRun r = run("xg-generate", "--base " + folder.string() + " --prompt " + shell_quoted(text) +
                                    " --temperature 0 --max-new-tokens 32 --ids --samples 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, joined_ids(want) + "\n" + joined_ids(want) + "\n");
  // --timings adds one line on stderr, with both rows' tokens counted, and changes no id.
  CliRun timed = run("xg-generate", "--base " + folder.string() + " --prompt " + shell_quoted(text) +
                                        " --temperature 0 --max-new-tokens 32 --ids --samples 2 --timings");
  ASSERT_EQ(timed.status, 0) << timed.err;
  EXPECT_EQ(timed.out, r.out);
  const std::regex line("xg-generate: timings: prefill " + std::to_string(2 * prompt.numel()) +
                        " tokens in [0-9.]+ ms \\([0-9.]+ tokens/s\\); decode " + std::to_string(2 * (want.size() - 1)) +
                        " tokens in [0-9.]+ ms \\([0-9.]+ tokens/s\\); sampling [0-9.]+ ms\n");
  EXPECT_TRUE(std::regex_search(timed.err, line)) << timed.err;
}

TEST(XgFinetune, LoraSftOnAnHfFolderWritesPeftAdaptersAndAnHfMergedFolder) {
  namespace nn = xg::nn;
  const fs::path d = xg::test::fresh_test_dir("hf_sft");
  const fs::path folder = hf_qwen3_folder(d), out = d / "out", merged = d / "out" / "merged";
  write_yes_rows(d / "train.jsonl");
  CliRun r = run("xg-finetune", "--base " + folder.string() + " --data " + (d / "train.jsonl").string() + " --out " +
                                    out.string() +
                                    " --steps 4 --warmup 1 --lr 5e-2 --batch 2 --lora-r 2 --lora-alpha 4 --lora-dropout 0"
                                    " --lora-targets q_proj,v_proj --merge");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Hugging Face base, its tokenizer (151669 ids), chat template format"), std::string::npos) << r.out;
  // PEFT's tensor names and config for this Qwen3 model.
  std::set<std::string> keys, want;
  for (const auto& [k, t] : xg::io::load_safetensors((out / "adapter_model.safetensors").string())) keys.insert(k);
  for (const char* l : {"0", "1"})
    for (const char* m : {"q_proj", "v_proj"})
      for (const char* w : {"A", "B"})
        want.insert(std::string("base_model.model.model.layers.") + l + ".self_attn." + m + ".lora_" + w + ".weight");
  EXPECT_EQ(keys, want);
  const json cfg = json::parse(slurp((out / "adapter_config.json").string()));
  for (const char* k : {"base_model_name_or_path", "target_modules", "task_type", "peft_type", "r", "lora_alpha",
                        "lora_dropout", "bias", "fan_in_fan_out", "use_rslora", "modules_to_save"})
    EXPECT_TRUE(cfg.contains(k)) << k;
  EXPECT_EQ(cfg["base_model_name_or_path"], folder.string());
  EXPECT_EQ(cfg["target_modules"], json::array({"q_proj", "v_proj"}));
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 2);
  EXPECT_EQ(cfg["lora_alpha"], 4);
  EXPECT_EQ(cfg["lora_dropout"], 0.0);
  EXPECT_EQ(cfg["bias"], "none");
  EXPECT_EQ(cfg["fan_in_fan_out"], false);
  EXPECT_EQ(cfg["use_rslora"], false);
  EXPECT_TRUE(cfg["modules_to_save"].is_null());

  // The merged folder is an HF folder with the base's tokenizer files, and reloads to the
  // logits of the base with the adapter.
  EXPECT_EQ(xg::io::ModelSource::open(merged.string()).format, xg::io::ModelFormat::HuggingFace);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(slurp((merged / f).string()), slurp((folder / f).string())) << f;
  EXPECT_EQ(json::parse(slurp((merged / "config.json").string()))["architectures"], json::array({"Qwen3ForCausalLM"}));
  auto base = nn::load_hf(folder.string()), adapted = nn::load_hf(folder.string()), reloaded = nn::load_hf(merged.string());
  xg::finetune::load_adapter(*adapted, out.string(), "hf_llama");
  const auto tok = xg::text::load_tokenizer(folder.string());
  const std::vector<int64_t> ids = tok->encode("Is lemon a word?", false);
  const xg::Tensor tokens = xg::from_vector(ids, {1, static_cast<int64_t>(ids.size())});
  xg::NoGradGuard no_grad;
  const xg::Tensor want_logits = (*adapted)(tokens);
  EXPECT_TRUE(xg::test::tensors_close((*reloaded)(tokens), want_logits, 1e-5, 1e-5));
  EXPECT_FALSE(xg::test::tensors_close((*base)(tokens), want_logits, 0, 0));  // the adapter learned something

  // xg-generate with the adapter and on the merged folder: the same greedy ids.
  const std::string flags = " --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 6 --ids";
  CliRun g = run("xg-generate", "--base " + folder.string() + " --adapter " + out.string() + flags);
  ASSERT_EQ(g.status, 0) << g.err;
  CliRun m = run("xg-generate", "--base " + merged.string() + flags);  // auto: instruct on a merged folder
  ASSERT_EQ(m.status, 0) << m.err;
  EXPECT_EQ(g.out, m.out);
  EXPECT_EQ(xg::test::count_lines(g.out), 1) << g.out;
}

TEST(XgFinetune, HfBaseBadInputIsOneLine) {
  const fs::path d = xg::test::fresh_test_dir("hf_errors");
  const std::string out = (d / "out").string(), ok = (d / "ok.jsonl").string();
  std::ofstream(ok) << "{\"prompt\": \"a\", \"response\": \"b\"}\n";
  // An HF folder without tokenizer.json (the model fixtures carry none).
  const std::string mistral = std::string(XGRAD_FIXTURE_DIR) + "/hf/mistral";
  expect_one_line_error(run("xg-finetune", "--base " + mistral + " --data " + ok + " --out " + out), 1,
                        mistral + " has no tokenizer.json");
  expect_one_line_error(run("xg-generate", "--base " + mistral + " --ids"), 1, mistral + " has no tokenizer.json");
  // Unknown --chat-template values, --system without a template.
  expect_one_line_error(run("xg-finetune", "--base x --data y --out z --chat-template chatml"), 2,
                        "--chat-template: expected auto, none or a template file (a Jinja file or a tokenizer_config.json), "
                        "got 'chatml' (no such file)");
  expect_one_line_error(run("xg-generate", "--base x --chat-template chatml"), 2,
                        "--chat-template: expected auto, none or a template file, got 'chatml' (no such file)");
  expect_one_line_error(run("xg-finetune", "--base x --data y --out z --chat-template none --system 'Be brief.'"), 2,
                        "--system needs a chat template");
  const fs::path base = tiny_base(d);  // byte-level: no chat template
  expect_one_line_error(run("xg-finetune", "--base " + base.string() + " --data " + ok + " --out " + out + " --system 'Be brief.'"),
                        1, "--system: " + base.string() + " has no chat template");
  EXPECT_FALSE(fs::exists(out));
}

TEST(XgFinetune, DpoAndGrpoRunOnAnHfFolderWithItsChatTemplate) {
  const fs::path d = xg::test::fresh_test_dir("hf_dpo_grpo");
  const fs::path folder = hf_qwen3_folder(d);
  write_yes_no_pairs(d / "dpo.jsonl");
  std::vector<json> rows;
  for (const char* w : kWords) rows.push_back({{"prompt", std::string("Say ") + w + "."}, {"answers", {w}}});
  write_lines(d / "grpo.jsonl", rows);
  const std::string common = " --base " + folder.string() + " --steps 2 --warmup 1 --eval-every 2 --lora-r 2 --lora-dropout 0";
  CliRun dpo = run("xg-finetune", "--objective dpo --data " + (d / "dpo.jsonl").string() + " --eval-data " +
                                      (d / "dpo.jsonl").string() + " --out " + (d / "dpo").string() + " --batch 2" + common);
  ASSERT_EQ(dpo.status, 0) << dpo.err << dpo.out;
  EXPECT_EQ(eval_records(d / "dpo" / "log.jsonl", "reward_accuracy").size(), 2u);
  CliRun grpo = run("xg-finetune", "--objective grpo --data " + (d / "grpo.jsonl").string() + " --eval-data " +
                                       (d / "grpo.jsonl").string() + " --out " + (d / "grpo").string() +
                                       " --group-size 2 --max-new-tokens 3 --eval-rows 2 --system 'Be brief.'" + common);
  ASSERT_EQ(grpo.status, 0) << grpo.err << grpo.out;
  EXPECT_NE(grpo.out.find("chat template format"), std::string::npos) << grpo.out;
  EXPECT_EQ(eval_records(d / "grpo" / "log.jsonl", "reward").size(), 2u);
  for (const char* o : {"dpo", "grpo"}) {
    const xg::TensorMap adapter = xg::io::load_safetensors((d / o / "adapter_model.safetensors").string());
    EXPECT_EQ(adapter.count("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"), 1u) << o;  // all seven targets
  }
}

// Every flag, file and row is checked before the base's work starts and before any write:
// NaN, Inf or absurd numbers at parse time, rows the model can never see whole by their file and
// line, --out where the base is, sizes beyond the machine's memory.
TEST(XgFinetune, BadInputIsRefusedBeforeAnythingIsWritten) {
  const fs::path d = xg::test::fresh_test_dir("refused");
  const fs::path base = tiny_base(d);  // 64 positions
  const std::string out = (d / "out").string();
  std::vector<json> rows;
  for (const char* w : kWords) rows.push_back({{"prompt", std::string("Is ") + w + " a word?"}, {"response", "yes"}});
  rows.push_back({{"prompt", std::string(80, 'a')}, {"response", "yes"}});  // line 9: 80 bytes + BOS, newline, EOS
  write_lines(d / "sft.jsonl", rows);
  std::vector<json> prompts;
  for (const char* w : kWords) prompts.push_back({{"prompt", std::string("Spell ") + w}, {"answers", {w}}});
  prompts.insert(prompts.begin() + 2, json{{"prompt", std::string(70, 'b')}, {"answers", {"b"}}});  // line 3
  write_lines(d / "grpo.jsonl", prompts);
  const std::string common = "--base " + base.string() + " --out " + out + " --steps 2 --warmup 0";
  expect_one_line_error(run("xg-finetune", common + " --data " + (d / "sft.jsonl").string()), 1,
                        (d / "sft.jsonl").string() + ":9: the row is 86 tokens, more than the 64 positions of " + base.string());
  expect_one_line_error(run("xg-finetune", common + " --objective grpo --data " + (d / "grpo.jsonl").string()), 1,
                        (d / "grpo.jsonl").string() + ":3: the prompt (with one completion token) is 73 tokens, more than the 64");
  EXPECT_FALSE(fs::exists(out));
  write_lines(d / "ok.jsonl", {rows.begin(), rows.begin() + 8});
  const std::string ok = common + " --data " + (d / "ok.jsonl").string();
  for (const auto& [flags, text] : std::vector<std::pair<std::string, std::string>>{
           {" --epochs inf", "--epochs: expected a finite number, got 'inf'"},
           {" --epochs 1e30", "--epochs must be in [0, 1e+06] (0 = use --steps), got 1e+30"},
           {" --objective dpo --label-smoothing nan", "--label-smoothing: expected a finite number, got 'nan'"},
           {" --objective dpo --label-smoothing 2", "--label-smoothing must be in [0, 0.5], got 2"},
           {" --objective grpo --temperature 1e-320", "--temperature must be at least 1e-06 (GRPO samples), got"}}) {
    const CliRun r = run("xg-finetune", ok + flags);
    expect_one_line_error(r, 2, text);
  }
  EXPECT_FALSE(fs::exists(out));
  // --out may be neither the base nor inside it (nor hold it).
  const std::string before = slurp((base / "model.safetensors").string());
  const std::string data = " --steps 2 --warmup 0 --data " + (d / "ok.jsonl").string() + " --base " + base.string();
  expect_one_line_error(run("xg-finetune", "--out " + base.string() + data), 2,
                        "--out " + base.string() + " is --base " + base.string() + ": a run never writes where its inputs are");
  expect_one_line_error(run("xg-finetune", "--out " + (base / "run").string() + data), 2, " is inside --base ");
  expect_one_line_error(run("xg-finetune", "--out " + d.string() + data), 2, " holds --base ");
  EXPECT_EQ(slurp((base / "model.safetensors").string()), before);
  EXPECT_FALSE(fs::exists(base / "run"));
  EXPECT_FALSE(fs::exists(base / "args.json"));
  // Sizes beyond a machine of 1 GB.
  ::setenv("XGRAD_MEMORY_LIMIT", "1073741824", 1);
  write_lines(d / "ok_grpo.jsonl", {prompts[0], prompts[1]});
  expect_one_line_error(run("xg-finetune", common + " --objective grpo --data " + (d / "ok_grpo.jsonl").string() +
                                               " --group-size 100000 --max-new-tokens 8"),
                        2, "--group-size 100000 completions of up to --max-new-tokens 8 needs about");
  expect_one_line_error(run("xg-finetune", ok + " --batch 10000000"), 2, "--batch 10000000 rows of --max-len 64 needs about");
  expect_one_line_error(run("xg-generate", "--base " + base.string() + " --samples 1000000 --prompt hi"), 2,
                        "--samples 1000000 of 64 tokens needs about");
  ::unsetenv("XGRAD_MEMORY_LIMIT");
  EXPECT_FALSE(fs::exists(out));
  expect_one_line_error(run("xg-generate", "--base " + base.string() + " --temperature 1e-320"), 2,
                        "--temperature must be 0 (greedy) or at least 1e-06, got");
}

// A model whose logits are NaN (NaN adapter weights here) is an error in xg-generate, not NUL
// bytes printed with exit status 0.
TEST(XgGenerate, NonFiniteLogitsAreAnError) {
  const fs::path d = xg::test::fresh_test_dir("nan_logits");
  const fs::path base = tiny_base(d);
  write_lines(d / "ok.jsonl", {{{"prompt", "a"}, {"response", "b"}}});
  CliRun r = run("xg-finetune", "--base " + base.string() + " --data " + (d / "ok.jsonl").string() + " --out " +
                                    (d / "out").string() + " --steps 1 --warmup 0");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string adapter = (d / "out" / "adapter_model.safetensors").string();
  xg::TensorMap tensors = xg::io::load_safetensors(adapter);
  for (auto& [name, t] : tensors) t = xg::full(t.shape(), std::nan(""), t.dtype());
  xg::io::save_safetensors(adapter, tensors);
  r = run("xg-generate", "--base " + base.string() + " --adapter " + (d / "out").string() + " --prompt hi --max-new-tokens 4");
  expect_one_line_error(r, 1, "xg-generate: sample_token: logit 0 is nan (the model's weights or adapters hold NaN or Inf");
  EXPECT_EQ(r.out, "");
}

// A merge that dies half-way leaves no merged/ folder (its temporary folder is removed at the
// next start), and the resumed run writes it whole.
TEST(XgFinetune, AKilledMergeLeavesNoPartialFolder) {
  const fs::path d = xg::test::fresh_test_dir("merge_killed");
  const fs::path base = tiny_base(d);
  write_lines(d / "ok.jsonl", {{{"prompt", "a"}, {"response", "b"}}});
  const std::string flags = "--base " + base.string() + " --data " + (d / "ok.jsonl").string() + " --out " +
                            (d / "out").string() + " --steps 2 --warmup 0 --merge";
  ::setenv("XGRAD_FAULT_KILL_IN_WRITE", "/model.safetensors:1", 1);
  CliRun r = run("xg-finetune", flags);
  ::unsetenv("XGRAD_FAULT_KILL_IN_WRITE");
  EXPECT_TRUE(r.status == -1 || r.status == 128 + SIGKILL) << r.status << r.err;
  EXPECT_TRUE(fs::exists(d / "out" / "adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(d / "out" / "merged"));
  int partial = 0;
  for (const auto& e : fs::directory_iterator(d / "out")) partial += e.path().filename().string().rfind("merged.tmp.", 0) == 0;
  EXPECT_EQ(partial, 1);
  r = run("xg-finetune", flags + " --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(", left by a run killed while writing"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(d / "out" / "merged" / "model.safetensors"));
  for (const auto& e : fs::directory_iterator(d / "out")) EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos);
}

namespace finetune_size_flags {

// NOTE: AddressSanitizer reserves terabytes of address space for its shadow memory, so under it
// no process starts with an address-space limit: there the 4 GB are XGRAD_MEMORY_LIMIT's.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
constexpr bool kAsan = __has_feature(address_sanitizer);
#else
constexpr bool kAsan = false;
#endif

// `prlimit --as=4000000000 <tool> args`: a process with 4 GB of address space, as on a small
// machine or a container, whatever this machine's memory.
CliRun run_small(const std::string& tool, const std::string& args) {
  const std::string exe = "'" + std::string(XGRAD_TOOL_DIR) + "/" + tool + "' " + args;
  if (kAsan) return run_cli("/usr/bin/env", "XGRAD_MEMORY_LIMIT=4000000000 " + exe);
  return run_cli("/usr/bin/prlimit", "--as=4000000000 " + exe);
}

// Absurd sizes are refused before the first allocation, naming the flag, against the memory
// this process may use (here its address-space limit; the machine may have more): a GRPO group
// of 10,000 completions (about 8 GB of activations), a million samples (about 17 GB of KV
// cache), and on a machine of 500 MB (XGRAD_MEMORY_LIMIT) a LoRA rank of 60,000 (1.2 GB of
// adapters and their AdamW state). A refused run leaves --out as it was: not even made.
TEST(XgFinetune, SizeFlagsAreBoundedByTheMemoryTheProcessMayUse) {
  const fs::path d = xg::test::fresh_test_dir("sizes");
  const fs::path base = tiny_base(d);
  write_say_rows(d / "train.jsonl");
  const std::string common = "--base " + base.string() + " --data " + (d / "train.jsonl").string() + " --out " +
                             (d / "out").string() + " --steps 1 --warmup 0";
  CliRun r = run_small("xg-finetune", common + " --objective grpo --group-size 10000 --max-new-tokens 8");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("xg-finetune: --group-size 10000 completions of up to --max-new-tokens 8 needs about "),
            std::string::npos) << r.err;
  if (!kAsan) {
    EXPECT_NE(r.err.find("(ulimit -v)"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(d / "out"));
  ::setenv("XGRAD_MEMORY_LIMIT", "500000000", 1);
  r = run("xg-finetune", common + " --objective grpo --lora-r 60000");
  ::unsetenv("XGRAD_MEMORY_LIMIT");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("xg-finetune: --lora-r 60000 on "), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d / "out"));
  r = run_small("xg-generate", "--base " + base.string() + " --samples 1000000 --max-new-tokens 60");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("xg-generate: --samples 1000000 of "), std::string::npos) << r.err;
}

}  // namespace finetune_size_flags

namespace finetune_moved {

// A finetuning run folder copied elsewhere, with its base and data moved too, resumes: the base
// and the data are compared by content. A base whose files changed is refused naming --base
// (in args.json, and by the checkpoint's own record without it).
TEST(XgFinetune, ACopiedRunResumesOnAMovedBaseAndAChangedBaseIsNamed) {
  const fs::path d = xg::test::fresh_test_dir("moved");
  tiny_base(d);
  write_yes_rows(d / "train.jsonl");
  auto flags = [&](const std::string& base, const std::string& data, const fs::path& out) {
    return "--base " + (d / base).string() + " --data " + (d / data).string() + " --out " + out.string() +
           " --warmup 1 --batch 4 --lora-r 4 --eval-every 0 --steps ";
  };
  CliRun r = run("xg-finetune", flags("base", "train.jsonl", d / "o") + "4");
  ASSERT_EQ(r.status, 0) << r.err;
  fs::copy(d / "base", d / "moved_base", fs::copy_options::recursive);
  fs::copy_file(d / "train.jsonl", d / "moved.jsonl");
  fs::copy(d / "o", d / "copy", fs::copy_options::recursive);
  r = run("xg-finetune", flags("moved_base", "moved.jsonl", d / "copy") + "6 --allow-change steps --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("resume step 4"), std::string::npos) << r.out;

  fs::copy(d / "o", d / "other", fs::copy_options::recursive);
  nlohmann::json config = json::parse(slurp((d / "moved_base" / "config.json").string()));
  config["block"]["norm"]["eps"] = 1e-3;  // another base: the same shapes, other numbers
  std::ofstream(d / "moved_base" / "config.json") << config.dump(2);
  r = run("xg-finetune", flags("moved_base", "moved.jsonl", d / "other") + "4 --resume");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--resume: the contents of --base changed since " + (d / "other" / "args.json").string()),
            std::string::npos) << r.err;
  fs::remove(d / "other" / "args.json");
  r = run("xg-finetune", flags("moved_base", "moved.jsonl", d / "other") + "4 --resume");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("was written by a run with a different base"), std::string::npos) << r.err;
}

}  // namespace finetune_moved

namespace xg_finetune_formats_test {

// A short template for the 64 positions of the tiny byte model: "u:question\na:answer\n".
const char* kShortTemplate =
    "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}a:{% endif %}";

json turn(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

// Rows of one SFT format over `words`, teaching "Is <w> a word?" -> yes (and in two-turn
// conversations, "Is <w>x a word?" -> no).
std::vector<json> sft_rows(const std::string& format, const std::vector<std::string>& words) {
  std::vector<json> rows;
  for (const std::string& w : words) {
    const std::string q = "Is " + w + " a word?";
    if (format == "messages")
      rows.push_back({{"messages", {turn("user", q), turn("assistant", "yes"), turn("user", "Is " + w + "x?"),
                                    turn("assistant", "no")}}});
    else if (format == "text")
      rows.push_back({{"text", q + " yes"}});
    else if (format == "prompt_completion")
      rows.push_back({{"prompt", q}, {"completion", " yes"}});
    else
      rows.push_back({{"prompt", {turn("user", q)}}, {"completion", {turn("assistant", "yes")}}});
  }
  return rows;
}

const std::vector<std::string> kTrainWords = {"apple", "river", "stone", "cloud", "glass", "tiger", "bread", "flute"};
const std::vector<std::string> kHeldOutWords = {"lemon", "chair"};

TEST(XgFinetune, EveryTrlSftFormatTrainsAndItsHeldOutLossFalls) {
  const fs::path d = xg::test::fresh_test_dir("formats");
  const fs::path base = tiny_base(d);
  std::ofstream(d / "chat.jinja") << kShortTemplate;
  const std::map<std::string, std::string> told = {{"messages", "{messages}"},
                                                   {"text", "{text}"},
                                                   {"prompt_completion", "{prompt, completion}"},
                                                   {"conversational", "conversational {prompt, completion}"}};
  for (const auto& [format, name] : told) {
    write_lines(d / (format + "_train.jsonl"), sft_rows(format, kTrainWords));
    write_lines(d / (format + "_eval.jsonl"), sft_rows(format, kHeldOutWords));
    CliRun r = run("xg-finetune", "--base " + base.string() + " --chat-template " + (d / "chat.jinja").string() +
                                      " --data " + (d / (format + "_train.jsonl")).string() + " --eval-data " +
                                      (d / (format + "_eval.jsonl")).string() + " --out " + (d / format).string() +
                                      " --steps 60 --warmup 4 --lr 1e-2 --batch 4 --eval-every 60 --lora-r 4 --lora-dropout 0");
    ASSERT_EQ(r.status, 0) << format << ": " << r.err << r.out;
    EXPECT_NE(r.out.find(name + " rows (format told by the first row of " + (d / (format + "_train.jsonl")).string()),
              std::string::npos)
        << r.out;
    const std::vector<json> loss = eval_records(d / format / "log.jsonl", "loss");
    ASSERT_EQ(loss.size(), 2u) << format;
    // {text} trains on the held-out words too, which the rows cannot teach: its loss falls least.
    EXPECT_LT(loss.back().get<double>(), (format == "text" ? 0.7 : 0.5) * loss.front().get<double>()) << format;
  }
}

TEST(XgFinetune, DpoWithAnImplicitPromptRaisesThePreference) {
  const fs::path d = xg::test::fresh_test_dir("dpo_formats");
  const fs::path base = tiny_base(d);
  std::ofstream(d / "chat.jinja") << kShortTemplate;
  std::vector<json> strings, conversations;
  for (const std::string& w : kTrainWords) {
    const std::string q = "Is " + w + " a word?";
    strings.push_back({{"chosen", q + " yes"}, {"rejected", q + " no"}});
    conversations.push_back({{"chosen", {turn("user", q), turn("assistant", "yes")}},
                             {"rejected", {turn("user", q), turn("assistant", "no")}}});
  }
  write_lines(d / "strings.jsonl", strings);
  write_lines(d / "conversations.jsonl", conversations);
  for (const char* data : {"strings", "conversations"}) {
    const std::string file = (d / (std::string(data) + ".jsonl")).string();
    CliRun r = run("xg-finetune", "--objective dpo --base " + base.string() + " --chat-template " +
                                      (d / "chat.jinja").string() + " --data " + file + " --eval-data " + file +
                                      " --out " + (d / data).string() +
                                      " --steps 30 --warmup 3 --lr 1e-2 --batch 4 --eval-every 30 --lora-dropout 0");
    ASSERT_EQ(r.status, 0) << data << ": " << r.err << r.out;
    EXPECT_NE(r.out.find("(implicit prompt) rows"), std::string::npos) << r.out;
    const std::vector<json> loss = eval_records(d / data / "log.jsonl", "loss");
    const std::vector<json> acc = eval_records(d / data / "log.jsonl", "reward_accuracy");
    ASSERT_EQ(loss.size(), 2u);
    EXPECT_NEAR(loss.front().get<double>(), std::log(2.0), 1e-6);  // policy = reference
    EXPECT_LT(loss.back().get<double>(), 0.5) << data;
    EXPECT_EQ(acc.back().get<double>(), 1.0) << data;
  }
}

TEST(XgFinetune, BadRowsAndUnknownTemplateVariablesAreRefusedBeforeTraining) {
  const fs::path d = xg::test::fresh_test_dir("format_errors");
  const fs::path base = tiny_base(d);
  std::ofstream(d / "chat.jinja") << kShortTemplate;
  const std::string common = "--base " + base.string() + " --chat-template " + (d / "chat.jinja").string() + " --steps 2";
  std::vector<json> rows = sft_rows("messages", {"apple", "river"});
  rows.push_back({{"messages", {turn("assistant", "yes"), turn("user", "Is stone a word?")}}});  // line 3
  write_lines(d / "order.jsonl", rows);
  expect_one_line_error(run("xg-finetune", common + " --data " + (d / "order.jsonl").string() + " --out " + (d / "o1").string()), 1,
                        (d / "order.jsonl").string() + ":3: messages[0] (assistant) is out of order");
  EXPECT_FALSE(fs::exists(d / "o1"));
  rows.back() = {{"text", "Is stone a word? yes"}};
  write_lines(d / "mixed.jsonl", rows);
  expect_one_line_error(run("xg-finetune", common + " --data " + (d / "mixed.jsonl").string() + " --out " + (d / "o2").string()), 1,
                        (d / "mixed.jsonl").string() + ":3: a {text} row, but the file's first row (line 1) is {messages}");
  // Conversations need a template: the byte base has none.
  write_lines(d / "ok.jsonl", sft_rows("messages", {"apple"}));
  expect_one_line_error(run("xg-finetune", "--base " + base.string() + " --steps 2 --data " + (d / "ok.jsonl").string() +
                                               " --out " + (d / "o3").string()),
                        1, (d / "ok.jsonl").string() + ":1: conversational rows are rendered by a chat template");
  // A row the template refuses names its line.
  std::ofstream(d / "strict.jinja") << "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}"
                                       "{% endif %}{{ m.role[0] }}:{{ m.content }}\n{% endfor %}";
  rows = sft_rows("messages", {"apple"});
  rows.push_back({{"messages", {turn("system", "s"), turn("user", "q"), turn("assistant", "a")}}});
  write_lines(d / "system.jsonl", rows);
  expect_one_line_error(run("xg-finetune", "--base " + base.string() + " --chat-template " + (d / "strict.jinja").string() +
                                               " --steps 2 --data " + (d / "system.jsonl").string() + " --out " + (d / "o4").string()),
                        1, (d / "system.jsonl").string() + ":2: chat template line 1: no system");
  // A variable the template never reads, by name; one it reads is used.
  expect_one_line_error(run("xg-finetune", common + " --data " + (d / "ok.jsonl").string() + " --out " + (d / "o5").string() +
                                               " --template-var enable_thinking=false"),
                        1, "--template-var enable_thinking: the chat template never reads a variable 'enable_thinking'");
  expect_one_line_error(run("xg-finetune", common + " --data " + (d / "ok.jsonl").string() + " --out " + (d / "o6").string() +
                                               " --template-var novalue"),
                        2, "--template-var: expected NAME=VALUE, got 'novalue'");
  expect_one_line_error(run("xg-finetune", "--base " + base.string() + " --steps 2 --data " + (d / "ok.jsonl").string() +
                                               " --out " + (d / "o7").string() + " --chat-template missing.jinja"),
                        2, "--chat-template: expected auto, none or a template file");
  for (const char* o : {"o2", "o3", "o4", "o5", "o6", "o7"}) EXPECT_FALSE(fs::exists(d / o)) << o;
  std::ofstream(d / "greeting.jinja") << "{{ greeting }}{% for m in messages %}{{ m.role[0] }}:{{ m.content }}\n{% endfor %}";
  CliRun ok = run("xg-finetune", "--base " + base.string() + " --chat-template " + (d / "greeting.jinja").string() +
                                     " --steps 1 --warmup 0 --data " + (d / "ok.jsonl").string() + " --out " +
                                     (d / "o8").string() + " --template-var greeting=Hello");
  EXPECT_EQ(ok.status, 0) << ok.err << ok.out;
}

// --reward-cmd: a program that logs each request and answers 0.25 (the program sees the row's
// fields and the completion; every logged reward is its answer, weighted); ones that hang,
// crash or answer garbage stop the run with one line naming the program and the row, and
// write no adapter.
TEST(XgFinetune, GrpoRewardProgramsAnswerOrStopTheRun) {
  const fs::path d = xg::test::fresh_test_dir("reward_cmd");
  const fs::path base = tiny_base(d);
  write_say_rows(d / "train.jsonl");
  const std::string common = "--objective grpo --base " + base.string() + " --data " + (d / "train.jsonl").string() +
                             " --steps 2 --warmup 0 --group-size 2 --grad-accum 1 --max-new-tokens 4";
  const fs::path requests = d / "requests.jsonl";
  const std::string logger = "while IFS= read -r l; do printf '%s\\n' \"$l\" >> " + requests.string() + "; echo 0.25; done";
  CliRun r = run("xg-finetune", common + " --out " + (d / "ok").string() + " --reward-cmd " + shell_quoted(logger) +
                                    " --reward cmd:2");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  std::ifstream req(requests);
  int n = 0;
  for (std::string line; std::getline(req, line); ++n) {
    const json j = json::parse(line);
    EXPECT_TRUE(j["prompt"].get<std::string>().rfind("Say ", 0) == 0) << line;
    EXPECT_TRUE(j["answers"].is_array()) << line;
    EXPECT_TRUE(j.contains("completion")) << line;
  }
  EXPECT_EQ(n, 2 * 2);  // steps x group size
  std::ifstream log(d / "ok" / "log.jsonl");
  int train = 0;
  for (std::string line; std::getline(log, line);) {
    const json j = json::parse(line);
    if (j["kind"] != "train") continue;
    ++train;
    EXPECT_EQ(j["reward"].get<double>(), 0.5) << line;
  }
  EXPECT_EQ(train, 2);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"while read -r l; do sleep 30; done", "gave no answer within 0.5 s (--reward-timeout) (scoring "},
      {"read -r l; exit 3", "exited with status 3 without answering (scoring "},
      {"while read -r l; do echo great; done", "answered \"great\", not a number (scoring "},
      {"while read -r l; do echo nan; done", "answered \"nan\": a reward must be a finite number (scoring "}};
  for (std::size_t i = 0; i < bad.size(); ++i) {
    const fs::path out = d / ("bad" + std::to_string(i));
    r = run("xg-finetune", common + " --out " + out.string() + " --reward-timeout 0.5 --reward-cmd " + shell_quoted(bad[i].first));
    expect_one_line_error(r, 1, bad[i].second + (d / "train.jsonl").string() + ":");
    EXPECT_NE(r.err.find("--reward-cmd '" + bad[i].first + "'"), std::string::npos) << r.err;
    // The first step failed, before any checkpoint: --out is left as it was found (absent).
    EXPECT_FALSE(fs::exists(out)) << bad[i].first;
  }
  // Into a folder that was there (empty), the failed run leaves it empty, its lock included.
  fs::create_directories(d / "mine");
  r = run("xg-finetune", common + " --out " + (d / "mine").string() + " --reward-cmd 'read -r l; exit 3'");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_TRUE(fs::is_empty(d / "mine"));
  // A program that is not there is found before the model loads (here there is no model at
  // all: its error would come first), naming --reward-cmd.
  r = run("xg-finetune", "--objective grpo --base " + (d / "no-model").string() + " --data " + (d / "train.jsonl").string() +
                             " --out " + (d / "none").string() + " --reward-cmd 'no-such-reward-program-xg --x'");
  expect_one_line_error(r, 2, "--reward-cmd 'no-such-reward-program-xg --x': no program 'no-such-reward-program-xg' in any "
                              "folder of PATH");
  EXPECT_FALSE(fs::exists(d / "none"));
  r = run("xg-finetune", common + " --out " + (d / "none").string() + " --reward-cmd " + (d / "train.jsonl").string());
  expect_one_line_error(r, 2, (d / "train.jsonl").string() + " is not executable");
  r = run("xg-finetune", "--base x --data y --out z --reward-cmd cat");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--reward-cmd is for --objective grpo"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective grpo --reward cmd");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--reward cmd needs --reward-cmd"), std::string::npos) << r.err;
  r = run("xg-finetune", "--base x --data y --out z --objective grpo --reward-cmd cat --reward exact");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--reward-cmd: add cmd[:WEIGHT] to the --reward names"), std::string::npos) << r.err;
}

TEST(XgFinetune, GrpoSamplesFromConversationalPrompts) {
  const fs::path d = xg::test::fresh_test_dir("grpo_conversations");
  const fs::path base = tiny_base(d);
  std::ofstream(d / "chat.jinja") << kShortTemplate;
  std::vector<json> rows;
  for (const std::string& w : kTrainWords) rows.push_back({{"prompt", {turn("user", "Say " + w + ".")}}, {"answers", {w}}});
  write_lines(d / "train.jsonl", rows);
  CliRun r = run("xg-finetune", "--objective grpo --base " + base.string() + " --chat-template " + (d / "chat.jinja").string() +
                                    " --data " + (d / "train.jsonl").string() + " --eval-data " + (d / "train.jsonl").string() +
                                    " --out " + (d / "out").string() +
                                    " --steps 2 --warmup 0 --group-size 2 --max-new-tokens 4 --grad-accum 2 --eval-rows 2 --reward prefix");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("conversational {prompt, answers} rows"), std::string::npos) << r.out;
  EXPECT_EQ(eval_records(d / "out" / "log.jsonl", "sampled_reward").size(), 2u);
  // Without a template to render them, refused before anything runs.
  expect_one_line_error(run("xg-finetune", "--objective grpo --base " + base.string() + " --data " +
                                               (d / "train.jsonl").string() + " --out " + (d / "none").string()),
                        1, (d / "train.jsonl").string() + ":1: conversational rows are rendered by a chat template");
  EXPECT_FALSE(fs::exists(d / "none"));
}

TEST(XgFinetune, GrpoSumsWeightedRewardsAndLogsEach) {
  const fs::path d = xg::test::fresh_test_dir("grpo_rewards");
  const fs::path base = tiny_base(d);
  write_lines(d / "sums.jsonl", {{{"prompt", "1+1="}, {"answers", {"2"}}}, {{"prompt", "2+2="}, {"answers", {"4"}}}});
  const std::string common = "--objective grpo --base " + base.string() + " --data " + (d / "sums.jsonl").string() +
                             " --steps 2 --warmup 0 --group-size 2 --max-new-tokens 4 --grad-accum 2";
  CliRun r = run("xg-finetune", common + " --out " + (d / "out").string() +
                                    " --reward numeric --reward format:0.5 --format-regex '[0-9]'");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  std::ifstream log(d / "out" / "log.jsonl");
  int train = 0;
  for (std::string line; std::getline(log, line);) {
    const json j = json::parse(line);
    if (j["kind"] != "train") continue;
    ++train;
    ASSERT_TRUE(j.contains("rewards/numeric") && j.contains("rewards/format")) << line;
    EXPECT_NEAR(j["reward"].get<double>(), j["rewards/numeric"].get<double>() + 0.5 * j["rewards/format"].get<double>(), 1e-9);
  }
  EXPECT_EQ(train, 2);
  expect_one_line_error(run("xg-finetune", common + " --out " + (d / "bad").string() + " --reward bleu"), 2,
                        "--reward: expected exact, prefix, format or numeric (NAME or NAME:WEIGHT), got 'bleu'");
  expect_one_line_error(run("xg-finetune", common + " --out " + (d / "bad").string() + " --reward format --format-regex '('"),
                        2, "--format-regex: pattern ( does not compile");
  EXPECT_FALSE(fs::exists(d / "bad"));
}

// DAPO's dynamic sampling (Yu et al. 2025): a group whose rewards are all equal has no
// advantage and teaches nothing, so --dynamic-sampling N draws another prompt for it, up to N
// times. Six of eight rows here score 1 whatever is sampled; the other two score the parity of
// the request line's length (so of the completion's), which differs within a group of 8 in
// about half the draws of this tiny model: a draw trains with a chance of about 1 in 8, so a
// step ends uniform after 201 draws about once in 10^11, and six steps with no redraw or none
// uniform in the plain run are 1-in-4000 events.
TEST(XgFinetune, GrpoDynamicSamplingDrawsAgainForAGroupOfEqualRewards) {
  const fs::path d = xg::test::fresh_test_dir("grpo_dynamic");
  const fs::path base = tiny_base(d);
  std::vector<json> rows;
  for (int i = 0; i < 8; ++i)
    rows.push_back({{"prompt", std::string("Say ") + kWords[i] + "."}, {"answers", {kWords[i]}}, {"flat", i < 6}});
  write_lines(d / "train.jsonl", rows);
  const std::string reward = "while IFS= read -r l; do case \"$l\" in *'\"flat\":true'*) echo 1;; "
                             "*) echo $(( ${#l} % 2 ));; esac; done";
  const std::string common = "--objective grpo --base " + base.string() + " --data " + (d / "train.jsonl").string() +
                             " --steps 6 --warmup 0 --group-size 8 --max-new-tokens 6 --grad-accum 1 --seed 4" +
                             " --reward-cmd " + shell_quoted(reward);
  CliRun plain = run("xg-finetune", common + " --out " + (d / "plain").string());
  ASSERT_EQ(plain.status, 0) << plain.err << plain.out;
  const std::vector<json> p = xg::test::log_records(d / "plain" / "log.jsonl", "train");
  ASSERT_EQ(p.size(), 6u);
  int flat_steps = 0;
  for (const json& j : p) flat_steps += j.at("reward_std").get<double>() == 0.0;
  EXPECT_GT(flat_steps, 0) << "six steps, none of them a flat row's or a uniform group";

  CliRun dyn = run("xg-finetune", common + " --dynamic-sampling 200 --out " + (d / "dynamic").string());
  ASSERT_EQ(dyn.status, 0) << dyn.err << dyn.out;
  const std::vector<json> q = xg::test::log_records(d / "dynamic" / "log.jsonl", "train");
  ASSERT_EQ(q.size(), 6u);
  double redraws = 0;
  for (const json& j : q) {
    EXPECT_GT(j.at("reward_std").get<double>(), 0.0) << j.dump();
    EXPECT_GT(j.at("grad_norm").get<double>(), 0.0) << j.dump();
    redraws += j.at("redraws").get<double>();
  }
  EXPECT_GT(redraws, 0.0);
  EXPECT_EQ(json::parse(slurp((d / "dynamic" / "args.json").string()))["flags"]["dynamic-sampling"], 200);
  expect_one_line_error(run("xg-finetune", common + " --dynamic-sampling -1 --out " + (d / "bad").string()), 2,
                        "--dynamic-sampling must be >= 0, got -1");
  expect_one_line_error(run("xg-finetune", "--objective sft --base " + base.string() + " --data " +
                                               (d / "train.jsonl").string() + " --dynamic-sampling 2 --out " +
                                               (d / "bad").string()),
                        2, "--dynamic-sampling is for --objective grpo and rloo");
  EXPECT_FALSE(fs::exists(d / "bad"));
}

}  // namespace xg_finetune_formats_test

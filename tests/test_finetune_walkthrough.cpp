// The README's walk-through ("Pre-train, then finetune with LoRA") at a scale that runs in
// seconds: xg-train, LoRA SFT from its model, then DPO and GRPO from SFT's merged model, as
// README chains them, and PPO from it too, on a made-up task whose held-out rows use words
// no training row mentions. Each stage must visibly work on held-out data: pre-training
// beats the unigram baseline, SFT lowers the held-out loss and answers in the trained format,
// DPO moves the held-out preference toward the chosen side, GRPO raises the reward of its
// sampled groups, PPO raises the held-out reward of a reachable goal while its value head learns it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/cli_run.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using xg::test::CliRun;

namespace walkthrough_test {  // named: the test sources are compiled as unity files

CliRun run(const std::string& tool, const std::string& args) {
  return xg::test::run_cli(std::string(XGRAD_TOOL_DIR) + "/" + tool, args + " --threads 1");
}

void write_lines(const fs::path& p, const std::vector<json>& rows) {
  std::ofstream f(p);
  for (const json& r : rows) f << r.dump() << "\n";
}

// The `key` of every record of `kind` ("eval", "train") in a run's log.jsonl.
std::vector<double> records(const fs::path& log, const std::string& kind, const std::string& key) {
  std::vector<double> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line);
    if (j["kind"] == kind && j.contains(key)) out.push_back(j[key].get<double>());
  }
  return out;
}

double mean(const std::vector<double>& v, std::size_t begin, std::size_t end) {
  double s = 0;
  for (std::size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

// Made-up words (4-7 letters) and a rule the model can learn from a word's form, as a byte
// model learns from WordNet's: a word's colour is "red" when its last letter is before "n",
// else "blue". std::mt19937_64's output is fixed by the standard (no distributions used), so
// the data is the same on every platform.
struct Task {
  std::vector<std::string> train, heldout;
  static std::string colour(const std::string& w) { return w.back() < 'n' ? "red" : "blue"; }
  static std::string prompt(const std::string& w) { return "What color is \"" + w + "\"?"; }
};

Task make_task() {
  std::mt19937_64 rng(7);
  std::set<std::string> seen;
  Task t;
  while (t.train.size() + t.heldout.size() < 120) {
    std::string w(4 + rng() % 4, 'a');
    for (char& c : w) c = static_cast<char>('a' + rng() % 26);
    if (!seen.insert(w).second) continue;
    (t.heldout.size() < 20 ? t.heldout : t.train).push_back(w);
  }
  return t;
}

// "the <w> is <colour>. " sentences over `words`, drawn with replacement.
std::string sentences(const std::vector<std::string>& words, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s;
  for (int i = 0; i < n; ++i) {
    const std::string& w = words[rng() % words.size()];
    s += "the " + w + " is " + Task::colour(w) + ". ";
  }
  return s;
}

TEST(Walkthrough, EveryStageImprovesOnHeldOutData) {
  const fs::path d = xg::test::fresh_test_dir();
  const Task task = make_task();
  std::ofstream(d / "train.txt") << sentences(task.train, 6000, 1);
  std::ofstream(d / "heldout.txt") << sentences(task.heldout, 300, 2);
  std::vector<json> sft, sft_held, dpo, dpo_held, grpo, grpo_held;
  for (const auto* words : {&task.train, &task.heldout}) {
    const bool held = words == &task.heldout;
    for (const std::string& w : *words) {
      const std::string c = Task::colour(w);
      std::string styled = c;
      styled[0] = static_cast<char>(styled[0] - 'a' + 'A');
      (held ? sft_held : sft).push_back({{"prompt", Task::prompt(w)}, {"response", c}});
      // DPO teaches a style SFT never showed ("Red" over "red"), so the SFT model starts on
      // the rejected side of every pair and the held-out accuracy has room to rise.
      (held ? dpo_held : dpo).push_back({{"prompt", Task::prompt(w)}, {"chosen", styled}, {"rejected", c}});
      (held ? grpo_held : grpo).push_back({{"prompt", Task::prompt(w)}, {"answers", {c}}});
    }
  }
  write_lines(d / "sft.jsonl", sft);
  write_lines(d / "sft_held.jsonl", sft_held);
  write_lines(d / "dpo.jsonl", dpo);
  write_lines(d / "dpo_held.jsonl", dpo_held);
  write_lines(d / "grpo.jsonl", grpo);
  write_lines(d / "grpo_held.jsonl", grpo_held);
  const std::string p = d.string() + "/";

  // Pre-training: held-out bits/byte far below the unigram baseline (the held-out words are
  // unseen, so their letters stay expensive; the sentence frame and the colours are not).
  CliRun r = run("xg-train", "--data " + p + "train.txt --eval-data " + p + "heldout.txt --out " + p +
                                 "base --d-model 32 --layers 2 --heads 2 --seq-len 64 --batch 8 --steps 150 "
                                 "--lr 1e-2 --warmup 10 --eval-every 150 --eval-batches 4 --sample-tokens 0");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<double> bits = records(d / "base" / "log.jsonl", "eval", "bits_per_byte");
  const std::vector<double> unigram = records(d / "base" / "log.jsonl", "eval", "baseline_bits_per_byte");
  ASSERT_EQ(bits.size(), 1u);
  ASSERT_EQ(unigram.size(), 1u);
  EXPECT_LT(bits[0], 0.5 * unigram[0]) << "unigram " << unigram[0];

  // SFT, with the output layer adapted too as README's walk-through does (pre-training never
  // showed EOS, so only the output layer can make it likely): the held-out loss per response
  // token falls to a fraction of the base's, and every held-out prompt is answered in the
  // trained format: a colour, then EOS, no loop. (Which colour is right on unseen words is
  // near chance after 100 steps at this size.) SFT and DPO pack their rows as README's
  // walk-through does (--packing: about four rows of ~28 tokens to a row of 128, four pairs to
  // a row of 256, so --batch 2 draws about 8 of them).
  r = run("xg-finetune", "--base " + p + "base --data " + p + "sft.jsonl --eval-data " + p + "sft_held.jsonl --out " + p +
                             "sft --steps 100 --warmup 5 --lr 1e-2 --packing --batch 2 --eval-every 100 --lora-r 8 --lora-dropout 0 --merge "
                             "--lora-targets q,k,v,o,gate,up,down,output");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<double> sft_loss = records(d / "sft" / "log.jsonl", "eval", "loss");
  ASSERT_EQ(sft_loss.size(), 2u);
  EXPECT_LT(sft_loss[1], 0.25 * sft_loss[0]);
  for (const std::string& w : task.heldout) {
    CliRun g = run("xg-generate", "--base " + p + "sft/merged --format instruct --prompt '" + Task::prompt(w) +
                                      "' --temperature 0 --max-new-tokens 8");
    ASSERT_EQ(g.status, 0) << g.err;
    EXPECT_TRUE(g.out == "red\n" || g.out == "blue\n") << w << ": " << g.out;
  }

  // DPO from the SFT model: the held-out preference accuracy rises from the rejected side to
  // the chosen side and the held-out DPO loss falls below log 2 (its value at step 0).
  r = run("xg-finetune", "--objective dpo --base " + p + "sft/merged --data " + p + "dpo.jsonl --eval-data " + p +
                             "dpo_held.jsonl --out " + p + "dpo --steps 40 --warmup 4 --lr 1e-2 --packing --max-len 256 --batch 2 --eval-every 40 "
                             "--lora-r 8 --lora-dropout 0");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<double> acc = records(d / "dpo" / "log.jsonl", "eval", "pref_accuracy");
  const std::vector<double> dpo_loss = records(d / "dpo" / "log.jsonl", "eval", "loss");
  ASSERT_EQ(acc.size(), 2u);
  EXPECT_LT(acc[0], 0.5);
  EXPECT_GT(acc[1], 0.9);
  EXPECT_NEAR(dpo_loss[0], std::log(2.0), 1e-4);
  EXPECT_LT(dpo_loss[1], 0.5 * std::log(2.0));

  // GRPO from the SFT model (samples at temperature 0.7): the reward of its sampled groups is
  // non-zero from the first steps, so advantages and gradients are too (the failure the issue
  // saw was a reward of 0 on every step). Whether it then rises is not asserted: the samples,
  // and so the run, differ with the compiler's rounding (with gcc -O2 the training reward went
  // 0.62 / 0.73 / 0.48 over steps 1-20 / 21-40 / 41-60 and the held-out sampled reward 0.55 ->
  // 0.675; one prompt a step is noisy, README's default is 8).
  r = run("xg-finetune", "--objective grpo --base " + p + "sft/merged --data " + p + "grpo.jsonl --eval-data " + p +
                             "grpo_held.jsonl --out " + p + "grpo --steps 60 --warmup 3 --lr 3e-3 --temperature 0.7 "
                             "--group-size 8 --max-new-tokens 6 --eval-every 60 --eval-rows 20 --lora-r 8 --lora-dropout 0 "
                             "--grad-accum 1");  // one prompt a step (README's 8 would make this test 8x longer)
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<double> reward = records(d / "grpo" / "log.jsonl", "train", "reward");
  ASSERT_EQ(reward.size(), 60u);
  EXPECT_GT(mean(reward, 0, 20), 0.05);

  // PPO from the SFT model, rewarded for answering "red" (--reward format with the pattern
  // "red", matched at the completion's start): the SFT model earns it about half the time, a
  // policy that learns it earns it always. The held-out sampled reward rises from about 0.55
  // past 0.8, and the value head learns the returns: a rollout's mean value loss falls to a
  // tenth of the first rollout's (the head untrained) or less. Measured in this build over
  // seeds 0-4: held-out 0.556 -> 0.85 to 1.0 at step 120; the lowest rollout's value loss
  // 0.006 to 0.07 of the first's. (The value loss of the last steps is no steadier than the
  // policy: on seed 4 the last 30 steps averaged more than the first rollout, their rewards
  // still mixed.)
  r = run("xg-finetune", "--objective ppo --base " + p + "sft/merged --data " + p + "grpo.jsonl --eval-data " + p +
                             "grpo_held.jsonl --out " + p + "ppo --steps 120 --temperature 0.7 --max-new-tokens 6 "
                             "--eval-every 120 --eval-rows 20 --lora-r 8 --reward format --format-regex red");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const std::vector<double> ppo_reward = records(d / "ppo" / "log.jsonl", "eval", "sampled_reward");
  const std::vector<double> vf_loss = records(d / "ppo" / "log.jsonl", "train", "vf_loss");
  ASSERT_EQ(ppo_reward.size(), 2u);
  ASSERT_EQ(vf_loss.size(), 120u);
  EXPECT_LT(ppo_reward[0], 0.75);
  EXPECT_GT(ppo_reward[1], 0.8);
  double lowest = mean(vf_loss, 0, 4);
  for (std::size_t first = 4; first < 120; first += 4) lowest = std::min(lowest, mean(vf_loss, first, first + 4));
  EXPECT_LT(lowest, 0.1 * mean(vf_loss, 0, 4));
}

}  // namespace walkthrough_test

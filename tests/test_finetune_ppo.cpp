// Tests for finetune/value_head.cpp and xg-finetune --objective ppo (finetune/ppo_objective.cpp):
// the value head's gradients in float64 and its file, a PPO run's logs, args, summary and value
// head file, a SIGKILLed run resuming bitwise, --full with a reward program, and bad flags as
// one-line errors.
// (The rollout arithmetic is losses::ppo_advantages, tested against TRL's in test_losses_ppo.cpp;
// the walk-through test runs PPO on its tiny model and task.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "finetune/value_head.hpp"
#include "io/safetensors.hpp"
#include "losses/ppo.hpp"
#include "tests/cli_run.hpp"
#include "tests/tiny_base.hpp"
#include "tests/torch_fixture.hpp"

namespace finetune_ppo_test {  // named: the test sources are compiled as unity files

namespace fs = std::filesystem;
using namespace xg;
using nlohmann::json;
using test::CliRun;
using test::randn64;
using test::slurp;
using V = std::vector<Tensor>;

CliRun run(const std::string& args) { return test::run_cli(std::string(XGRAD_TOOL_DIR) + "/xg-finetune", args); }

// "Say <w>." answered <w>, for eight words.
fs::path write_say_rows(const fs::path& d) {
  const fs::path p = d / "say.jsonl";
  std::ofstream f(p);
  for (const char* w : {"apple", "river", "stone", "cloud", "glass", "tiger", "bread", "flute"})
    f << json{{"prompt", std::string("Say ") + w + "."}, {"answers", {w}}}.dump() << "\n";
  return p;
}

// The `key` of every "train" record of a run's log.jsonl.
std::vector<double> train_records(const fs::path& log, const std::string& key) {
  std::vector<double> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line);
    if (j["kind"] == "train" && j.contains(key)) out.push_back(j[key].get<double>());
  }
  return out;
}

TEST(FinetuneValueHead, GradcheckThroughTheClippedValueLoss) {
  Generator gen(4);
  finetune::ValueHead head(5, gen, kFloat64);
  const nn::NamedTensors params = head.named_trainable();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "v_head.summary.weight");
  EXPECT_EQ(params[1].first, "v_head.summary.bias");
  EXPECT_EQ(params[0].second.shape(), (Shape{1, 5}));
  // hidden [2, 4, 5] -> values [2, 4]; the old values are near the new ones, so some
  // predictions are clipped and some are not.
  Tensor hidden = randn64({2, 4, 5}, 1);
  Tensor old_values, returns = randn64({2, 4}, 2).detach();
  {
    NoGradGuard no_grad;
    old_values = (head.forward(hidden) + randn64({2, 4}, 3) * 0.3).detach();
  }
  Tensor mask = tensor({{1, 1, 1, 0}, {1, 1, 0, 0}}, kFloat64);
  EXPECT_GRADCHECK([&](const V& x) { return losses::ppo_value_loss(head.forward(x[0]), old_values, returns, 0.2, mask); },
                   {hidden, params[0].second, params[1].second});
  // Values are a Linear of the hidden states: head(h)[b, t] = h[b, t] . w + bias.
  const Tensor v = head.forward(hidden);
  const std::vector<double> h = hidden.to_vector(), w = params[0].second.to_vector(), vv = v.to_vector();
  for (int64_t i = 0; i < 8; ++i) {
    double want = params[1].second.to_vector()[0];
    for (int64_t c = 0; c < 5; ++c) want += h[i * 5 + c] * w[c];
    EXPECT_NEAR(vv[i], want, 1e-12) << i;
  }
  EXPECT_XG_ERROR(head.forward(randn64({2, 4, 6}, 5)), "ValueHead: expected hidden states [B, T, 5], got [2,4,6]");
}

TEST(FinetuneValueHead, SavesUnderTrlsNamesAndLoadsBack) {
  const fs::path d = test::fresh_test_dir();
  Generator a_gen(1), b_gen(2);
  finetune::ValueHead a(8, a_gen), b(8, b_gen);
  a.save(d.string());
  const TensorMap file = io::load_safetensors((d / finetune::kValueHeadFile).string());
  ASSERT_EQ(file.size(), 2u);
  EXPECT_EQ(file.at("v_head.summary.weight").shape(), (Shape{1, 8}));
  EXPECT_EQ(file.at("v_head.summary.bias").shape(), (Shape{1}));
  EXPECT_NE(a.named_trainable()[0].second.to_vector(), b.named_trainable()[0].second.to_vector());
  b.load((d / finetune::kValueHeadFile).string());
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(a.named_trainable()[i].second.to_vector(), b.named_trainable()[i].second.to_vector());
  Generator c_gen(3);
  finetune::ValueHead wider(9, c_gen);
  EXPECT_XG_ERROR(wider.load((d / finetune::kValueHeadFile).string()),
                  "'v_head.summary.weight' is [1,8], the value head of this model needs [1,9]");
}

TEST(XgFinetunePpo, TrainsLogsAndResumesBitwiseAfterSigkill) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::tiny_base(d);
  const fs::path rows = write_say_rows(d);
  // Adapter dropout (off by default for ppo) draws from the default generator: the checkpoint
  // must restore it, and the rollout passes run without it.
  const std::string flags = "--objective ppo --base " + base.string() + " --data " + rows.string() + " --eval-data " +
                            rows.string() + " --eval-rows 2 --steps 24 --warmup 1 --batch 4 --max-new-tokens 6 " +
                            "--reward prefix --lora-dropout 0.1 --checkpoint-every 4 --eval-every 12 --seed 5";
  CliRun straight = run(flags + " --out " + (d / "straight").string());
  ASSERT_EQ(straight.status, 0) << straight.err << straight.out;
  EXPECT_NE(straight.out.find("xg-finetune: ppo on 8 rows, 24 steps"), std::string::npos) << straight.out;
  EXPECT_EQ(json::parse(slurp((d / "straight" / "args.json").string()))["flags"]["objective"], "ppo");
  const json summary = json::parse(slurp((d / "straight" / "summary.json").string()));
  EXPECT_EQ(summary["objective"], "ppo");
  EXPECT_EQ(summary["value_head"], "value_head.safetensors");
  EXPECT_TRUE(summary.contains("final_sampled_reward")) << summary.dump();
  const TensorMap head = io::load_safetensors((d / "straight" / "value_head.safetensors").string());
  EXPECT_EQ(head.at("v_head.summary.weight").shape(), (Shape{1, 32}));
  // Every step logs the losses; a rollout's reward, kl and length repeat over its 4 steps.
  const std::vector<double> vf = train_records(d / "straight" / "log.jsonl", "vf_loss");
  const std::vector<double> reward = train_records(d / "straight" / "log.jsonl", "reward");
  const std::vector<double> len = train_records(d / "straight" / "log.jsonl", "completion_len");
  ASSERT_EQ(vf.size(), 24u);
  ASSERT_EQ(reward.size(), 24u);
  for (std::size_t s = 0; s < 24; ++s) {
    EXPECT_TRUE(std::isfinite(vf[s]) && vf[s] >= 0) << s;
    EXPECT_EQ(reward[s], reward[s / 4 * 4]) << s;
    EXPECT_TRUE(reward[s] >= 0 && reward[s] <= 1) << s;
    EXPECT_TRUE(len[s] >= 1 && len[s] <= 6) << s;
  }
  EXPECT_EQ(train_records(d / "straight" / "log.jsonl", "pg_clipfrac").size(), 24u);
  // The reference is the model with its adapters disabled: at the first rollout the adapters
  // are still zero (lora_B starts at 0), and the reference pass runs on the same batch, so the KL
  // to it is exactly 0. The first step's forward is the rollout's policy too, but its minibatch
  // holds other samples in another order with other padding than the rollout pass's, and products
  // of other shapes may round the last float32 bit differently on another CPU: log-ratios of
  // ~1e-7 give approxkl ~1e-14, where one trained step gives > 1e-6. Once the adapters train,
  // neither is 0.
  const std::vector<double> kl = train_records(d / "straight" / "log.jsonl", "kl");
  const std::vector<double> approxkl = train_records(d / "straight" / "log.jsonl", "approxkl");
  EXPECT_EQ(kl[0], 0.0);
  EXPECT_LT(approxkl[0], 1e-10);
  EXPECT_NE(kl[20], 0.0);
  EXPECT_GT(approxkl[21], 0.0);

  const fs::path out = d / "killed";
  ASSERT_TRUE(test::kill_when_file_appears(std::string(XGRAD_TOOL_DIR) + "/xg-finetune " + flags + " --out " +
                                               out.string() + " >/dev/null 2>&1",
                                           (out / "checkpoint.safetensors").string()))
      << "the run finished before a checkpoint appeared, or none did";
  CliRun resumed = run(flags + " --out " + out.string() + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resume step"), std::string::npos) << resumed.out;
  for (const char* file : {"adapter_model.safetensors", "value_head.safetensors"})
    EXPECT_EQ(slurp((out / file).string()), slurp((d / "straight" / file).string())) << file;
}

TEST(XgFinetunePpo, FullFinetuneWithARewardProgramWritesTheModelAndTheValueHead) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::tiny_base(d);
  const fs::path rows = write_say_rows(d);
  // The reward: the length of the JSON line the program reads (so above 20 for every completion).
  CliRun r = run("--objective ppo --full --base " + base.string() + " --data " + rows.string() + " --out " +
                 (d / "out").string() + " --steps 4 --batch 2 --max-new-tokens 4 " +
                 "--reward-cmd 'while IFS= read -r l; do echo ${#l}; done'");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_TRUE(fs::exists(d / "out" / "model" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(d / "out" / "adapter_model.safetensors"));
  const json summary = json::parse(slurp((d / "out" / "summary.json").string()));
  EXPECT_EQ(summary["full"], true);
  EXPECT_EQ(summary["value_head"], "value_head.safetensors");
  EXPECT_TRUE(fs::exists(d / "out" / "value_head.safetensors"));
  const std::vector<double> reward = train_records(d / "out" / "log.jsonl", "reward");
  ASSERT_EQ(reward.size(), 4u);
  for (double v : reward) EXPECT_GT(v, 20.0);
}

TEST(XgFinetunePpo, BadFlagsAreOneLineErrors) {
  const std::string ppo = "--base x --data y --out z --objective ppo";
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {ppo + " --gamma 1.5", "--gamma must be in [0, 1], got 1.5"},
           {ppo + " --lam -0.1", "--lam must be in [0, 1], got -0.1"},
           {ppo + " --kl-coef -1", "--kl-coef must be >= 0, got -1"},
           {ppo + " --vf-coef -0.5", "--vf-coef must be >= 0, got -0.5"},
           {ppo + " --cliprange-value 0", "--cliprange-value must be > 0, got 0"},
           {ppo + " --ppo-epochs 0", "--ppo-epochs must be in [1, 1000], got 0"},
           {ppo + " --steps 10", "--steps 10 must be a multiple of --ppo-epochs x --num-mini-batches = 4"},
           {ppo + " --num-mini-batches 2 --checkpoint-every 4",
            "--checkpoint-every 4 must be a multiple of --ppo-epochs x --num-mini-batches = 8"},
           {ppo + " --beta 0.1", "--beta is for dpo and grpo: PPO's KL coefficient is --kl-coef"},
           {ppo + " --group-size 4", "--group-size is for --objective grpo and rloo"},
           {ppo + " --packing", "--packing is for sft and dpo"},
           {"--base x --data y --out z --gamma 0.9", "--gamma is for --objective ppo"},
           {"--base x --data y --out z --objective grpo --kl-coef 0.1", "--kl-coef is for --objective ppo"},
           {"--base x --data y --out z --objective dpo --ppo-epochs 2", "--ppo-epochs is for --objective ppo"}}) {
    CliRun r = run(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace finetune_ppo_test

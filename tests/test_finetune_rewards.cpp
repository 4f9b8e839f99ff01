// finetune/rewards: the built-in GRPO rewards (format by regex, numeric answers from \boxed{}
// or the last number), --reward's NAME[:WEIGHT], their weighted sum, and a C++ callable of the
// library's own driving GRPO training with its score logged beside the others.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/random.hpp"
#include "finetune/lora.hpp"
#include "finetune/objectives.hpp"
#include "finetune/rewards.hpp"
#include "nn/decoder.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace rewards_test {

using namespace xg::finetune;

TEST(FinetuneRewards, NumericAnswerIsTheBoxedContentElseTheLastNumber) {
  EXPECT_EQ(numeric_answer("So the total is \\boxed{42}. Or 7?"), 42.0);
  EXPECT_EQ(numeric_answer("3 + 4 = 7"), 7.0);
  EXPECT_EQ(numeric_answer("It is -12 degrees"), -12.0);
  EXPECT_EQ(numeric_answer("about 1,234.5 dollars."), 1234.5);
  EXPECT_EQ(numeric_answer("\\boxed{ 3.25 }"), 3.25);
  EXPECT_EQ(numeric_answer("\\boxed{\\frac{1}{2}}"), std::nullopt);  // not a number
  EXPECT_EQ(numeric_answer("\\boxed{12"), 12.0);                     // not closed: the last number
  EXPECT_EQ(numeric_answer("no number here"), std::nullopt);
  EXPECT_EQ(numeric_answer(""), std::nullopt);
}

// A completion and its row's answers, the rest of the input left empty.
RewardInput input(const std::string& completion, std::vector<std::string> answers) {
  RewardInput in;
  in.completion = completion;
  in.answers = std::move(answers);
  return in;
}

TEST(FinetuneRewards, BuiltInRewardsScoreACompletion) {
  const Reward numeric = builtin_reward("numeric");
  EXPECT_EQ(numeric.fn(input("17 times 23 is \\boxed{391}", {"391"})), 1.0);
  EXPECT_EQ(numeric.fn(input("I think 391.0", {"390", "391"})), 1.0);
  EXPECT_EQ(numeric.fn(input("I think 390", {"391"})), 0.0);
  EXPECT_EQ(numeric.fn(input("no idea", {"391"})), 0.0);
  EXPECT_EQ(numeric.fn(input("1,000", {"x = 1000"})), 1.0);  // the answer's number too
  const Reward format = builtin_reward("format");
  EXPECT_EQ(format.fn(input("<think>\n17 * 23\n</think>\n<answer>\n391\n</answer>", {})), 1.0);
  EXPECT_EQ(format.fn(input("<answer>\n391\n</answer>", {})), 0.0);
  EXPECT_EQ(format.fn(input("ok <think>\na\n</think>\n<answer>\nb\n</answer>", {})), 0.0);  // not at the start
  const Reward yes = builtin_reward("format", 1.0, "yes|no");
  EXPECT_EQ(yes.fn(input("no, never", {})), 1.0);
  EXPECT_EQ(yes.fn(input("I say yes", {})), 0.0);  // Python's re.match: at the start only
  EXPECT_EQ(builtin_reward("exact").fn(input("sad\nmore", {"sad"})), 1.0);
  EXPECT_DOUBLE_EQ(builtin_reward("prefix").fn(input("sa", {"sad"})), 0.5 * 2 / 3);
}

TEST(FinetuneRewards, RewardSpecsAndWeightedSums) {
  const Reward r = parse_reward("numeric:2.5");
  EXPECT_EQ(r.name, "numeric");
  EXPECT_EQ(r.weight, 2.5);
  EXPECT_EQ(parse_reward("exact").weight, 1.0);
  const std::vector<Reward> both = {parse_reward("exact"), parse_reward("numeric:0.5")};
  EXPECT_EQ(weighted_reward(both, input("391", {"391"})), 1.5);
  EXPECT_EQ(weighted_reward(both, input("it is 391", {"391"})), 0.5);
  EXPECT_XG_ERROR(parse_reward("bleu"), "--reward: expected exact, prefix, format or numeric (NAME or NAME:WEIGHT), got 'bleu'");
  EXPECT_XG_ERROR(parse_reward("exact:x"), "--reward exact:x: expected NAME:WEIGHT with a number for WEIGHT");
  EXPECT_XG_ERROR(parse_reward("exact:inf"), "--reward exact: the weight must be a finite number");
  EXPECT_XG_ERROR(builtin_reward("format", 1.0, "(unclosed"), "--format-regex: pattern (unclosed does not compile");
}

TEST(FinetuneRewards, ACallableOfTheLibrarysOwnDrivesGrpo) {
  // A tiny byte model with adapters; the reward: 2 x (a callable that counts its calls and
  // scores a completion's length) + exact. Each step samples group_size completions of
  // grad_accum prompts; the log has each reward's mean and their weighted sum.
  const std::filesystem::path d = xg::test::fresh_test_dir();
  xg::nn::LMConfig c;
  c.vocab_size = 259;
  c.n_layers = 1;
  c.block = xg::nn::BlockConfig::llama(16, 2, 1);
  c.block.max_seq_len = 32;
  xg::manual_seed(4);
  xg::nn::DecoderLM model(c);
  LoRAConfig lc;
  lc.r = 2;
  lc.targets = "q,v";
  xg::Generator gen(1);
  inject_lora(model, lc, gen);
  const std::vector<GrpoExample> rows = {{"Say yes.", {"yes"}}, {"Say no.", {"no"}}};
  int calls = 0;
  GrpoTask task;
  task.train = &rows;
  task.group_size = 3;
  task.max_new_tokens = 4;
  task.rewards = {{"short",
                   [&calls](const RewardInput& in) {
                     ++calls;
                     return in.completion.size() < 3 ? 1.0 : 0.0;
                   },
                   2.0},
                  builtin_reward("exact")};
  LoopOptions o;
  o.steps = 2;
  o.grad_accum = 2;
  o.warmup = 0;
  o.out_dir = (d / "out").string();
  TrainLoop loop("test", model, named_lora_parameters(model), o);
  attach_grpo(loop, model, task);
  loop.run();
  EXPECT_EQ(calls, 2 * 2 * 3);
  std::ifstream log(d / "out" / "log.jsonl");
  int steps = 0;
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.value("kind", "") != "train") continue;
    ++steps;
    ASSERT_TRUE(j.contains("rewards/short") && j.contains("rewards/exact")) << line;
    EXPECT_NEAR(j["reward"].get<double>(), 2 * j["rewards/short"].get<double>() + j["rewards/exact"].get<double>(), 1e-9)
        << line;
  }
  EXPECT_EQ(steps, 2);
}

}  // namespace rewards_test

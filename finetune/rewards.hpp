// GRPO's rewards as TRL's reward functions: a callable scores one sampled completion of a
// prompt, several are summed with weights (TRL's reward_funcs and reward_weights), and the
// built-in ones xg-finetune's --reward names.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xg::finetune {

// What a reward function sees of one sampled completion: TRL passes the prompt, the
// completion and every other column of the dataset's row.
struct RewardInput {
  std::string completion;            // decoded up to EOS, special tokens skipped
  std::vector<std::string> answers;  // the row's answers
  std::string prompt;                // the row's prompt text ("" for a conversational prompt: see row)
  nlohmann::ordered_json row;        // the whole JSONL row (null when the caller has none)
  std::string where;                 // the row's "file:line", for errors ("" when unknown)
};

// The score of one completion. Any C++ callable: a library user passes their own.
using RewardFn = std::function<double(const RewardInput& in)>;

struct Reward {
  std::string name;  // what the logs call it: rewards/<name>
  RewardFn fn;
  double weight = 1.0;
};

// Open R1's format reward pattern: a <think> block, then an <answer> block, nothing else.
inline constexpr const char* kDefaultFormatRegex = R"((?s)^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$)";

// The built-in rewards:
//   exact, prefix: grpo_reward (objectives.hpp): the completion's first line against the answers;
//   format: 1 when `format_regex` (PCRE2, UTF-8) matches at the completion's start (Python's
//     re.match), else 0: TRL's format_reward;
//   numeric: 1 when the completion's numeric answer (numeric_answer) equals one of the answers'
//     (within 1e-6 of its size, at least 1e-6), else 0: TRL's accuracy_reward on numbers.
// Another name, a weight that is not finite, or a pattern that does not compile is an
// xg::Error naming it ("--reward: ...").
Reward builtin_reward(const std::string& name, double weight = 1.0, const std::string& format_regex = kDefaultFormatRegex);
// "NAME" or "NAME:WEIGHT" (--reward), as builtin_reward.
Reward parse_reward(const std::string& spec, const std::string& format_regex = kDefaultFormatRegex);

// sum_i weight_i * fn_i(in) (TRL: rewards summed with reward_weights).
double weighted_reward(const std::vector<Reward>& rewards, const RewardInput& in);

// A reward program (--reward-cmd, finetune/reward_process.hpp) as the reward "cmd": each
// completion is sent as its row with "completion" set (and "prompt" the row's), one JSON line,
// and the program's answer is the score. One program per process for the whole run; its
// failures (timeout, crash, a non-number) are xg::Errors naming the program and the row.
Reward command_reward(const std::string& command, double timeout_seconds, double weight = 1.0);

// The number `text` answers: the content of its last \boxed{...} when it has one (read as a
// number), else its last number ("-12", "3.5", "1,234" as 1234); nullopt when there is none.
std::optional<double> numeric_answer(const std::string& text);

}  // namespace xg::finetune

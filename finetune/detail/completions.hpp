// Sampled completions as GRPO and PPO use them (internal to finetune/*_objective.cpp): prompts
// as id rows, the room a model leaves for a completion, splitting generate's output at EOS.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/error.hpp"
#include "finetune/dataset.hpp"
#include "finetune/rewards.hpp"
#include "finetune/run_log.hpp"
#include "nn/decoder.hpp"

namespace xg::finetune {

// Samples of one prompt: out [G, T0 + n] from generate. Per row: the completion's ids up to
// and including the first EOS (or all n when it never stopped).
struct Completions {
  Tensor ids;                      // [G, T]
  int64_t prompt_len = 0;
  std::vector<int64_t> lengths;    // completion tokens per row (EOS included)
  std::vector<std::string> texts;  // decoded, without EOS
};

inline Completions split_completions(const text::Tokenizer& tok, const Tensor& out, int64_t prompt_len) {
  Completions c;
  c.ids = out;
  c.prompt_len = prompt_len;
  const int64_t G = out.shape()[0], T = out.shape()[1];
  const int64_t* p = out.data<int64_t>();
  for (int64_t g = 0; g < G; ++g) {
    std::vector<int64_t> row;
    int64_t len = 0;
    for (int64_t t = prompt_len; t < T; ++t) {
      ++len;
      if (p[g * T + t] == tok.eos_id()) break;
      row.push_back(p[g * T + t]);
    }
    c.lengths.push_back(len);
    c.texts.push_back(tok.decode(row, /*skip_special_tokens=*/true));
  }
  return c;
}

// The row's prompt ids repeated `rows` times: [rows, T0].
inline Tensor prompt_batch(const RowFormat& format, const GrpoExample& row, int64_t rows) {
  std::vector<int64_t> ids = format.prompt_ids(row), all;
  for (int64_t r = 0; r < rows; ++r) all.insert(all.end(), ids.begin(), ids.end());
  return from_vector(all, {rows, static_cast<int64_t>(ids.size())});
}

// How many tokens a completion of a prompt_len prompt may have: `wanted`, or fewer when the
// model's positions end first. `who` ("GRPO", "PPO") names the objective in the error.
inline int64_t room(const nn::DecoderLM& model, int64_t prompt_len, int64_t wanted, const char* who) {
  const int64_t max = model.max_seq_len();
  check(max < 0 || prompt_len < max, who, ": a prompt of ", prompt_len, " tokens leaves no room for a completion in the ",
        "model's ", max, " positions");
  return max < 0 ? wanted : std::max<int64_t>(0, std::min(wanted, max - prompt_len));
}

// What the reward functions see of a row, the completion filled in per sample.
inline RewardInput reward_input(const GrpoExample& row) { return {"", row.answers, row.prompt, row.row, row.where}; }

// The rewards asked for, "exact" when none.
inline std::vector<Reward> rewards_or_exact(const std::vector<Reward>& rewards) {
  return rewards.empty() ? std::vector<Reward>{builtin_reward("exact")} : rewards;
}

// The weighted reward of each of `texts` (completions of `row`). With several functions, each
// one's score times `share` is added to per_reward["rewards/<name>"] (share 1 / completions
// in the batch: their mean).
inline std::vector<double> score_completions(const std::vector<Reward>& funcs, const GrpoExample& row,
                                             const std::vector<std::string>& texts, double share, Metrics& per_reward) {
  std::vector<double> rewards(texts.size(), 0.0);
  RewardInput in = reward_input(row);
  for (const Reward& r : funcs)
    for (std::size_t i = 0; i < texts.size(); ++i) {
      in.completion = texts[i];
      const double v = r.fn(in);
      rewards[i] += r.weight * v;
      if (funcs.size() > 1) per_reward["rewards/" + r.name] += v * share;
    }
  return rewards;
}

}  // namespace xg::finetune

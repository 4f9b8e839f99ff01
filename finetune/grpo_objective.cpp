// attach_grpo / grpo_eval / grpo_reward: Group Relative Policy Optimization with verifiable
// rewards (finetune/rewards.hpp), sampling with the KV-cache generator, KL to the adapter-disabled reference (or a frozen copy).
#include <algorithm>
#include <cmath>

#include "autograd/error.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "finetune/lora.hpp"
#include "finetune/detail/completions.hpp"
#include "finetune/detail/objective_util.hpp"
#include "finetune/objectives.hpp"
#include "losses/losses.hpp"

namespace xg::finetune {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Labels [G, T] that keep only the completion tokens (prompt and what follows EOS: -100).
Tensor completion_labels(const Completions& c) {
  Tensor labels = c.ids.clone();
  const int64_t G = labels.shape()[0], T = labels.shape()[1];
  int64_t* l = labels.data<int64_t>();
  for (int64_t g = 0; g < G; ++g)
    for (int64_t t = 0; t < T; ++t)
      if (t < c.prompt_len || t >= c.prompt_len + c.lengths[g]) l[g * T + t] = -100;
  return labels;
}

}  // namespace

double grpo_reward(const std::string& kind, const std::string& completion, const std::vector<std::string>& answers) {
  check(kind == "exact" || kind == "prefix", "--reward: expected exact or prefix, got '", kind, "'");
  // The answer is the completion's first line: a small model that does not stop at EOS
  // is judged on what it said first, not on the rambling after it.
  const std::string got = trim(completion.substr(0, completion.find('\n')));
  double best = 0;
  for (const std::string& a : answers) {
    const std::string want = trim(a);
    if (got == want) return 1.0;
    if (kind == "prefix" && !got.empty()) {
      std::size_t common = 0;
      while (common < got.size() && common < want.size() && got[common] == want[common]) ++common;
      best = std::max(best, 0.5 * static_cast<double>(common) / static_cast<double>(std::max(got.size(), want.size())));
    }
  }
  return best;
}


losses::GrpoLossType grpo_loss_type(const std::string& name) {
  if (name == "grpo") return losses::GrpoLossType::Grpo;
  if (name == "bnpo") return losses::GrpoLossType::Bnpo;
  if (name == "dr_grpo") return losses::GrpoLossType::DrGrpo;
  throw Error("--loss-type: expected grpo, bnpo or dr_grpo, got '" + name + "'");
}

Metrics grpo_eval(nn::DecoderLM& model, const std::vector<GrpoExample>& rows, const GrpoTask& task) {
  check(!rows.empty(), "grpo_eval: no rows");
  const text::Tokenizer& tok = task.format.tok();
  const std::vector<Reward> rewards = rewards_or_exact(task.rewards);
  double reward = 0, exact = 0, sampled = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const GrpoExample& row = rows[i];
    Tensor prompt = prompt_batch(task.format, row, 1);
    const int64_t n_new = room(model, prompt.shape()[1], task.max_new_tokens, "GRPO");
    nn::GenerateOptions g;
    g.temperature = 0;  // greedy
    g.eos_id = tok.eos_id();
    const Completions c = split_completions(tok, model.generate(prompt, n_new, g), prompt.shape()[1]);
    RewardInput in = reward_input(row);
    in.completion = c.texts[0];
    reward += weighted_reward(rewards, in);
    exact += grpo_reward("exact", c.texts[0], row.answers);

    g.temperature = task.temperature;
    g.seed = 0x5EED0000u + i;  // fixed per row: every evaluation draws with the same seeds
    Tensor group = prompt_batch(task.format, row, task.group_size);
    const Completions s = split_completions(tok, model.generate(group, n_new, g), group.shape()[1]);
    for (const std::string& text : s.texts) {
      in.completion = text;
      sampled += weighted_reward(rewards, in) / static_cast<double>(task.group_size);
    }
  }
  const double n = static_cast<double>(rows.size());
  return {{"reward", reward / n}, {"exact_match", exact / n}, {"sampled_reward", sampled / n}};
}

void attach_grpo(TrainLoop& loop, nn::DecoderLM& model, const GrpoTask& task) {
  check(task.train && !task.train->empty(), "GRPO: no training rows");
  check(task.group_size >= 2, "--group-size: GRPO needs at least 2 completions per prompt, got ", task.group_size);
  check(task.max_new_tokens >= 1, "--max-new-tokens: GRPO needs at least 1, got ", task.max_new_tokens, "GRPO");
  check(task.temperature > 0, "--temperature: GRPO samples, so it must be > 0, got ", task.temperature);
  check(task.clip_eps > 0, "--clip-eps must be > 0, got ", task.clip_eps);
  check(task.beta >= 0, "--beta must be >= 0, got ", task.beta);
  for (const Reward& r : task.rewards) check(static_cast<bool>(r.fn), "GRPO: reward '", r.name, "' has no function");
  if (task.beta > 0) check_reference(model, task.reference, "GRPO");
  // Without a KL term a model without adapters or a reference copy needs no reference pass:
  // the KL is to itself, 0.
  const bool no_reference = task.beta == 0 && task.reference == nullptr && lora_adapters(model).empty();
  loop.micro_step = [&model, task, no_reference](int64_t, int64_t, Generator& rng) {
    const text::Tokenizer& tok = task.format.tok();
    const std::vector<Reward> funcs = rewards_or_exact(task.rewards);
    Completions c;
    Metrics per_reward;
    std::vector<double> rewards;
    int64_t redraws = 0;
    for (;; ++redraws) {  // one group, or more under dynamic sampling
      const GrpoExample& row = (*task.train)[rng.next_u64() % task.train->size()];
      Tensor prompt = prompt_batch(task.format, row, task.group_size);
      nn::GenerateOptions g;
      g.temperature = task.temperature;
      g.seed = rng.next_u64();
      g.eos_id = tok.eos_id();
      c = split_completions(tok, model.generate(prompt, room(model, prompt.shape()[1], task.max_new_tokens, "GRPO"), g),
                            prompt.shape()[1]);
      // Each reward function's scores, then their weighted sums.
      per_reward.clear();
      rewards = score_completions(funcs, row, c.texts, 1.0 / static_cast<double>(c.texts.size()), per_reward);
      const bool all_equal = std::all_of(rewards.begin(), rewards.end(), [&](double r) { return r == rewards[0]; });
      if (!all_equal || redraws == task.dynamic_sampling) break;
    }
    const Tensor targets = losses::shift_labels(completion_labels(c));
    const Tensor ref_lp =
        no_reference ? Tensor()
                     : reference_pass(model, task.reference,
                                      [&](const nn::DecoderLM& m) { return model_token_logprobs(m, c.ids, Tensor(), targets); });
    const Tensor lp = model_token_logprobs(model, c.ids, Tensor(), targets);
    const Tensor ref = no_reference ? lp.detach() : ref_lp;
    losses::GrpoOptions o;
    o.completion_mask = ne(targets, full({}, -100.0, kInt64));
    o.loss_type = task.loss_type;
    o.max_completion_length = task.max_new_tokens;
    Tensor loss;
    if (task.rloo) {
      // RLOO: the completion is one action. Its reward pays the KL to the reference, summed
      // over its tokens (log pi - log pi_ref); the advantage is that reward minus the mean of
      // the group's others; the loss is the clipped surrogate on the completion's log-prob.
      const Tensor mask = o.completion_mask.to(lp.dtype());
      const Tensor seq_lp = (lp * mask).sum(1);                            // [G]
      const std::vector<double> seq_kl = ((lp.detach() - ref) * mask).sum(1).to_vector();
      std::vector<double> paid = rewards;
      for (std::size_t i = 0; i < paid.size(); ++i) paid[i] -= task.beta * seq_kl[i];
      const Tensor adv = losses::compute_rloo_advantages(from_vector(paid, {1, task.group_size})).reshape({task.group_size});
      loss = losses::grpo_loss(seq_lp.detach(), seq_lp, adv, task.clip_eps, 0.0);
    } else {
      const Tensor adv = losses::compute_grpo_advantages(from_vector(rewards, {1, task.group_size})).reshape({task.group_size});
      const Tensor kl = losses::compute_kl_penalty(lp, ref, Tensor(), losses::Reduction::None);
      loss = losses::grpo_loss(lp.detach(), lp, adv, task.clip_eps, task.beta, kl, o);
    }

    double mean_reward = 0, mean_len = 0;
    int64_t tokens = 0;
    for (std::size_t i = 0; i < rewards.size(); ++i) {
      mean_reward += rewards[i] / static_cast<double>(rewards.size());
      mean_len += static_cast<double>(c.lengths[i]) / static_cast<double>(rewards.size());
      tokens += c.ids.shape()[1];
    }
    double var = 0;  // TRL's reward_std: the group's standard deviation (unbiased, as torch.std)
    for (double r : rewards) var += (r - mean_reward) * (r - mean_reward) / static_cast<double>(rewards.size() - 1);
    const double kl_mean = losses::compute_kl_penalty(lp.detach(), ref, o.completion_mask).item();
    Metrics m = {{"reward", mean_reward}, {"reward_std", std::sqrt(var)}, {"completion_len", mean_len}, {"kl", kl_mean}};
    if (task.dynamic_sampling > 0) m["redraws"] = static_cast<double>(redraws);
    m.insert(per_reward.begin(), per_reward.end());
    return MicroResult{loss, tokens, m};
  };
  if (task.heldout && !task.heldout->empty())
    loop.evaluate = [&model, rows = head(*task.heldout, task.eval_rows), task](int64_t) {
      return grpo_eval(model, rows, task);
    };
}

}  // namespace xg::finetune

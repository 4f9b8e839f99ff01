// The finetuning objectives xg-finetune runs, each wired into a TrainLoop: what one
// micro-batch computes (micro_step) and what the held-out evaluation reports (evaluate).
// The reference policy of DPO, GRPO and PPO is the same model with its LoRA adapters disabled, or a
// frozen copy of the base when every weight trains (xg-finetune --full).
// Rows become ids by each task's RowFormat (dataset.hpp): the default is the byte tokenizer
// with the plain format; xg-finetune sets the base folder's tokenizer and chat template.
#pragma once

#include <vector>

#include "finetune/dataset.hpp"
#include "finetune/rewards.hpp"
#include "finetune/train_loop.hpp"
#include "finetune/value_head.hpp"
#include "losses/dpo.hpp"
#include "losses/grpo.hpp"
#include "nn/decoder.hpp"

namespace xg::finetune {

// SFT (sft_loss: next-token cross-entropy on the response and its EOS, prompt masked).
// Micro-batches draw `batch` rows uniformly (with replacement) from the data generator.
// Evaluation: the mean loss per response token over (up to `eval_rows` of) the held-out rows.
struct SftTask {
  const std::vector<SftExample>* train = nullptr;
  const std::vector<SftExample>* heldout = nullptr;  // optional
  int64_t batch = 8, max_len = 128, eval_rows = 256;
  RowFormat format;
  // Packing (finetune/packing.hpp): the training rows are packed once into rows of max_len
  // tokens, and a step draws `batch` of those packed rows, not `batch` examples. Evaluation
  // stays on padded batches of examples.
  bool packing = false;
};
void attach_sft(TrainLoop& loop, nn::DecoderLM& model, const SftTask& task);
// Mean per-token loss of `rows` (in batches of `batch`), as attach_sft's evaluation reports it.
Metrics sft_eval(const nn::DecoderLM& model, const std::vector<SftExample>& rows, int64_t batch, int64_t max_len,
                 const RowFormat& format = {});

// DPO (losses::dpo_loss: sigmoid with label smoothing, or TRL's ipo, hinge or robust) on prompt/chosen/rejected rows; the
// reference log-probs come from the adapter-disabled model in the same micro-step.
// Logged: TRL's rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies.
// Evaluation on held-out rows: pref_accuracy (the policy gives the chosen response the
// higher log-probability per token), reward_accuracy and reward_margin (implicit rewards
// against the reference), and the DPO loss.
struct DpoTask {
  const std::vector<DpoExample>* train = nullptr;
  const std::vector<DpoExample>* heldout = nullptr;  // optional
  int64_t batch = 8, max_len = 128, eval_rows = 256;
  double beta = 0.1, label_smoothing = 0.0;
  RowFormat format;
  bool packing = false;  // as SftTask's: pairs packed into rows of max_len tokens (each sequence cut to max_len / 2)
  losses::DpoLossType loss_type = losses::DpoLossType::Sigmoid;
  // The reference policy: null for the model with its adapters disabled; else a frozen model
  // (a copy of the base, for a model whose every weight trains).
  const nn::DecoderLM* reference = nullptr;
};
void attach_dpo(TrainLoop& loop, nn::DecoderLM& model, const DpoTask& task);
Metrics dpo_eval(const nn::DecoderLM& model, const std::vector<DpoExample>& rows, const DpoTask& task);

// GRPO: one prompt per micro-batch; `group_size` completions sampled with the KV-cache
// generator (temperature, up to max_new_tokens, stopping at EOS), each scored by `rewards`
// (their weighted sum; each one's mean logged as rewards/<name> when there are several),
// group-normalised advantages, the clipped surrogate over the completion tokens and the k3
// KL to the adapter-disabled reference (losses::grpo_loss, compute_kl_penalty). One policy
// update per batch of samples, so the old log-probs are the current ones, detached.
// Evaluation on (up to eval_rows) held-out prompts: "reward" (weighted) and "exact_match" of the greedy
// completion, and "sampled_reward", the mean reward of group_size completions sampled as in
// training (the same seeds at every evaluation, so evaluations differ only by the model).
struct GrpoTask {
  const std::vector<GrpoExample>* train = nullptr;
  const std::vector<GrpoExample>* heldout = nullptr;  // optional
  int64_t group_size = 8, max_new_tokens = 24, eval_rows = 128;
  // DAPO's dynamic sampling (Yu et al. 2025): a group whose rewards are all equal has zero
  // advantages and no gradient but the KL's, so up to this many other prompts are drawn in
  // its place (0: off, as TRL). A micro-step logs its redraws and its group's reward_std.
  int64_t dynamic_sampling = 0;
  double temperature = 1.0, beta = 0.04, clip_eps = 0.2;
  // Summed with their weights (TRL's reward_funcs and reward_weights); empty: "exact" alone.
  std::vector<Reward> rewards;
  // How the per-token terms are averaged (losses::GrpoLossType; grpo_loss_type names them).
  losses::GrpoLossType loss_type = losses::GrpoLossType::Grpo;
  RowFormat format;              // prompts by prompt_ids; completions decoded without special tokens
  const nn::DecoderLM* reference = nullptr;  // as DpoTask's
  // RLOO (Ahmadian et al. 2024) instead of GRPO's loss on the same samples and rewards: each
  // completion is one action, its reward minus beta x its summed KL to the reference, its
  // advantage that minus the mean of the group's others (losses::compute_rloo_advantages),
  // the clipped surrogate on its whole log-prob; loss_type does not apply.
  bool rloo = false;
};
// SFT's loss of `model` on tokens [B, T] (packed rows with position_ids) against labels:
// through the head's block-by-block cross-entropy (losses::sft_loss_from_hidden) when the head
// is a plain matrix, so the [B, T, vocab] logits are never whole; else sft_loss on the logits.
Tensor sft_model_loss(const nn::DecoderLM& model, const Tensor& tokens, const Tensor& position_ids, const Tensor& labels,
                      const Tensor& prompt_lengths, const Tensor& padding_mask = Tensor());
// log softmax of `model`'s logits at `targets` per token (losses::token_logprobs; tokens and
// targets [B, T], packed rows with position_ids): through the head a block of rows at a time
// (losses::linear_token_logprobs) when the head is a plain matrix, so DPO's, GRPO's and RLOO's
// [B, T, vocab] logits are never whole; else token_logprobs on the logits. (PPO's objective
// does the same with its temperature.)
Tensor model_token_logprobs(const nn::DecoderLM& model, const Tensor& tokens, const Tensor& position_ids,
                            const Tensor& targets);
void attach_grpo(TrainLoop& loop, nn::DecoderLM& model, const GrpoTask& task);
// TRL's loss_type names: "grpo" (each completion's mean over its tokens, then the mean over
// the group), "bnpo" (the mean over the group's completion tokens), "dr_grpo" (their sum over
// group size x max_new_tokens, a constant; Liu et al. 2025, "Understanding R1-Zero-Like
// Training": the per-completion mean scales a long wrong completion's penalty per token down
// by its length, which pushes a policy to ramble). Other names throw (TRL's "dapo", the mean
// over a whole accumulated batch's tokens, is not offered: a micro-step sees its own only).
losses::GrpoLossType grpo_loss_type(const std::string& name);
// The reward of one completion (decoded text up to EOS; its first line is the answer):
// "exact": 1 when that line equals one of the answers after trimming spaces, else 0;
// "prefix": that, or partial credit 0.5 * (common prefix length) / max(length of the line,
// length of the answer), the best over the answers: a denser, still programmatic signal for
// models that rarely get an answer exactly (e.g. "unhapy" for "unhappy" earns 0.5 * 5/7).
// Other names throw.
double grpo_reward(const std::string& kind, const std::string& completion, const std::vector<std::string>& answers);
Metrics grpo_eval(nn::DecoderLM& model, const std::vector<GrpoExample>& rows, const GrpoTask& task);

// PPO (Schulman et al. 2017) as TRL's PPOTrainer runs it, on GRPO's rows and rewards: every
// steps_per_rollout() optimizer steps the policy samples one completion for each of
// rollout_size() prompts (drawn with replacement); each is scored by `rewards` (one scalar),
// pays k1 = log pi - log pi_ref per token times kl_coef (the reference as GrpoTask's), and
// losses::ppo_advantages turns that into whitened GAE advantages and returns against the
// value head's predictions. Then ppo_epochs passes over the rollout in a fresh random order,
// num_mini_batches optimizer steps each, a step being grad_accum micro-batches of `batch`
// completions: loss = ppo_clip_loss + vf_coef * ppo_value_loss over the completion tokens.
// The value head reads the policy's own final hidden states (one trunk pass for both heads).
// Log-probs are of logits / temperature, the distribution sampled from (TRL's). The rollout's
// forward passes run in eval mode (no dropout), as TRL disables dropout.
// A step's rollout lives in memory, so a run resumes only from a step that starts one: steps,
// checkpoint and early-stopping steps must be multiples of steps_per_rollout() (xg-finetune
// checks). Evaluation: grpo_eval with eval_samples sampled completions per held-out prompt.
struct PpoTask {
  const std::vector<GrpoExample>* train = nullptr;
  const std::vector<GrpoExample>* heldout = nullptr;  // optional
  int64_t batch = 8;             // completions per micro-batch (TRL's per_device_train_batch_size)
  int64_t grad_accum = 1;        // the loop's micro-batches per step (TRL's gradient_accumulation_steps)
  int64_t num_mini_batches = 1;  // optimizer steps per pass over the rollout
  int64_t ppo_epochs = 4;        // passes over each rollout (TRL's num_ppo_epochs)
  int64_t max_new_tokens = 24, eval_rows = 128, eval_samples = 8;
  double temperature = 1.0;
  double kl_coef = 0.05, gamma = 1.0, lam = 0.95;        // TRL's defaults
  double clip_eps = 0.2, clip_value = 0.2, vf_coef = 0.1;  // TRL's cliprange, cliprange_value, vf_coef
  std::vector<Reward> rewards;  // as GrpoTask's
  RowFormat format;
  const nn::DecoderLM* reference = nullptr;  // as DpoTask's

  int64_t steps_per_rollout() const { return ppo_epochs * num_mini_batches; }
  int64_t rollout_size() const { return num_mini_batches * grad_accum * batch; }
};
void attach_ppo(TrainLoop& loop, nn::DecoderLM& model, ValueHead& value_head, const PpoTask& task);

}  // namespace xg::finetune

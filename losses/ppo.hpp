// Proximal Policy Optimization (Schulman et al. 2017): the clipped surrogate loss, TRL's clipped
// value loss and entropy bonus, generalized advantage estimation (GAE, Schulman et al. 2016).
#pragma once

#include "autograd/tensor.hpp"

namespace xg::losses {

// PPO's clipped surrogate L^CLIP, negated: ratio = exp(new - old);
// loss = -mean(min(ratio A, clamp(ratio, 1 - eps, 1 + eps) A)).
// old_log_probs, new_log_probs, advantages share one shape ([B], one per sequence, or [B, T]
// per token); with `mask` (that shape, nonzero = keep) the mean runs over kept entries only.
// Differentiable with respect to all three (old and A normally come detached).
Tensor ppo_clip_loss(const Tensor& old_log_probs, const Tensor& new_log_probs, const Tensor& advantages,
                     double clip_epsilon = 0.2, const Tensor& mask = Tensor());

// TRL's clipped value loss: v_clip = clamp(new_values, old_values - c, old_values + c);
// loss = 0.5 * mean(max((new_values - returns)^2, (v_clip - returns)^2)) (masked mean with
// `mask`). All of one shape.
Tensor ppo_value_loss(const Tensor& new_values, const Tensor& old_values, const Tensor& returns,
                      double clip_range_value = 0.2, const Tensor& mask = Tensor());

// The entropy bonus: the (masked) mean of entropy_from_logits(logits) over positions:
// logits [..., V], mask [...]. Subtract it times a coefficient from the loss:
// loss = pg_loss + vf_coef * value_loss - ent_coef * ppo_entropy_bonus(logits, mask).
Tensor ppo_entropy_bonus(const Tensor& logits, const Tensor& mask = Tensor());

struct Gae {
  Tensor advantages;  // [B, T] (or [T])
  Tensor returns;     // advantages + values
};

// Generalized advantage estimation over the last dim (time), as TRL's PPO trainer:
// delta_t = r_t + gamma V_{t+1} - V_t (V_T = 0), A_t = delta_t + gamma lam A_{t+1}.
// rewards and values: [T] or [B, T], one shape; padded steps should hold reward 0 and
// value 0. Not differentiable (computed under no_grad, as in TRL); whiten the advantages
// with masked_whiten.
Gae compute_gae(const Tensor& rewards, const Tensor& values, double gamma = 1.0, double lam = 0.95);

struct PpoAdvantages {
  Tensor rewards;     // [B, T]: -kl_coef * (logprobs - ref_logprobs) per token, the score added on the last
  Tensor advantages;  // [B, T]: GAE, whitened over the kept tokens, 0 elsewhere
  Tensor returns;     // [B, T]: GAE advantages (before whitening) + values, the value head's targets
};

// TRL PPOTrainer's rollout bookkeeping (its steps 4 to 6) on B completions laid out as [B, T]
// (token t of each completion at column t): per-token KL penalty k1 = logprobs - ref_logprobs,
// each completion's score on its last kept token, values zeroed outside `mask`, compute_gae,
// and whitened advantages (masked_whiten over every kept token of the batch).
// logprobs, ref_logprobs, values: [B, T]; scores: [B]; mask [B, T] (nonzero = a completion
// token; every row keeps at least one). Not differentiable (TRL runs it under no_grad).
// NOTE: TRL puts the score one token past the last (sequence_lengths + 1, inside the padding,
// with a value kept there too); this puts it on the last token, as TRL's earlier PPOTrainer
// (compute_rewards) and Ziegler et al. 2019 do, so every reward and value sits on a token
// the policy chose.
PpoAdvantages ppo_advantages(const Tensor& logprobs, const Tensor& ref_logprobs, const Tensor& values,
                             const Tensor& scores, const Tensor& mask, double kl_coef = 0.05, double gamma = 1.0,
                             double lam = 0.95);

}  // namespace xg::losses

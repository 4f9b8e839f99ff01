// Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath): group-normalised
// advantages, the clipped loss with the KL penalty (token-level with TRL's completion mask and
// loss normalisers), and the k3 KL estimator.
#pragma once

#include "autograd/tensor.hpp"
#include "losses/reduction.hpp"

namespace xg::losses {

// The outcome-supervised advantages of DeepSeekMath: rewards [B, G] (B prompts, G completions
// each) -> (R - mean(R)) / (std(R) + 1e-8) per row, std unbiased (torch's default). Fused: the
// group statistics are computed in double.
// NOTE: a group whose rewards are all equal gets exactly 0 advantages (and 0 gradient).
// The formula written with float32 torch ops, as reference code commonly writes it, only nearly
// does: the float32 mean of seven rewards of 0.1 is off by one rounding, and dividing that by
// 1e-8 gives advantages of -0.745.
// A group needs G >= 2 (the unbiased std of one reward is undefined).
Tensor compute_grpo_advantages(const Tensor& rewards);
// The same for TRL's flat layout: rewards [B * G] grouped by consecutive `group_size`
// entries -> [B * G].
Tensor compute_grpo_advantages(const Tensor& rewards, int64_t group_size);

// REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics"): rewards [B, G] -> each
// reward minus the mean of the other G - 1 in its row, r_i - (sum_j r_j - r_i) / (G - 1)
// = G / (G - 1) (r_i - mean(r)), computed in double (a row of equal rewards gets exactly 0).
// Differentiable: dr = G / (G - 1) (g - mean(g)) per row. Needs G >= 2.
Tensor compute_rloo_advantages(const Tensor& rewards);

enum class GrpoLossType {
  Grpo,    // per sequence: sum over its tokens / its token count; then the mean over sequences
  Bnpo,    // sum over all kept tokens / their count
  DrGrpo,  // sum over all kept tokens / (B * max_completion_length)
  Dapo,    // sum over all kept tokens / num_items_in_batch (the whole accumulated batch's count)
};

// TRL's token-level extras; the defaults give the plain mean over the entries.
struct GrpoOptions {
  Tensor completion_mask;  // [B, T] bool/int64/float, nonzero = completion token
  GrpoLossType loss_type = GrpoLossType::Grpo;
  int64_t max_completion_length = 0;  // DrGrpo's L; 0 = T
  double num_items_in_batch = 0;      // Dapo's normaliser; 0 = this call's kept-token count
};

// The GRPO objective (PPO's clipped surrogate plus an explicit KL penalty): per entry
// -min(r A, clamp(r, 1 - eps, 1 + eps) A) + beta * ref_kl (when ref_kl is defined),
// r = exp(new - old), then normalised by options.loss_type over the mask.
// Shapes: log-probs [B] (one log-prob per sequence, treated as a 1-token sequence)
// or [B, T] per token; advantages of that shape, or [B] per sequence with [B, T] log-probs;
// ref_kl (per-entry KL, e.g. compute_kl_penalty(..., Reduction::None)) of the log-probs'
// shape or 0-d. Differentiable with respect to every float input.
// NOTE: with old == new (the first step on fresh samples) r = 1, the loss is -mean(A) + KL,
// about 0 because advantages are centred per group, yet its gradient -A / n is not 0.
Tensor grpo_loss(const Tensor& old_log_probs, const Tensor& new_log_probs, const Tensor& advantages,
                 double clip_epsilon = 0.2, double beta = 0.01, const Tensor& ref_kl = Tensor(),
                 const GrpoOptions& options = GrpoOptions());

// Schulman's k3 estimator of KL(pi || pi_ref) per entry ("Approximating KL Divergence", 2020),
// exp(r) - r - 1 with r = ref_log_probs - log_probs, reduced: Mean (the default, over the
// kept entries with a mask), Sum, or None (per entry, for grpo_loss's ref_kl; the mask
// is not applied). Differentiable with respect to both.
Tensor compute_kl_penalty(const Tensor& log_probs, const Tensor& ref_log_probs, const Tensor& mask = Tensor(),
                          Reduction reduction = Reduction::Mean);

}  // namespace xg::losses

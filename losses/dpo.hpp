// Direct Preference Optimization (Rafailov et al. 2023): the sigmoid loss with label smoothing
// (conservative DPO) and TRL's ipo, hinge and robust variants, with the metrics TRL logs.
#pragma once

#include "autograd/tensor.hpp"

namespace xg::losses {

enum class DpoLossType {
  Sigmoid,  // -(1 - ls) logsigmoid(beta z) - ls logsigmoid(-beta z)   (ls = 0: the paper's loss)
  Ipo,      // (z - 1 / (2 beta))^2                                   (label smoothing unused, as in TRL)
  Hinge,    // relu(1 - beta z)                                        (label smoothing unused, as in TRL)
  Robust,   // (-(1 - ls) logsigmoid(beta z) + ls logsigmoid(-beta z)) / (1 - 2 ls),  ls < 1/2
};

// z = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected): the DPO logits.
struct DpoOutput {
  Tensor loss;              // 0-d, the mean over the batch of the per-pair losses
  Tensor chosen_rewards;    // [B] beta (policy_chosen - ref_chosen), detached
  Tensor rejected_rewards;  // [B] beta (policy_rejected - ref_rejected), detached
  Tensor reward_margin;     // 0-d mean(chosen_rewards - rejected_rewards), detached (TRL rewards/margins)
  Tensor reward_accuracy;   // 0-d mean(chosen_rewards > rejected_rewards), detached (TRL rewards/accuracies)
};

// dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
// beta, label_smoothing), in the argument order of the DPO authors' code and TRL's: four [B]
// sequence log-probabilities of one shape and dtype (see sequence_logprobs); differentiable
// with respect to all four.
DpoOutput dpo_loss(const Tensor& policy_chosen_logps, const Tensor& policy_rejected_logps,
                   const Tensor& ref_chosen_logps, const Tensor& ref_rejected_logps, double beta = 0.1,
                   double label_smoothing = 0.0, DpoLossType loss_type = DpoLossType::Sigmoid);

}  // namespace xg::losses

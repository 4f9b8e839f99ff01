// DPO and its TRL variants, composed from recorded ops (logsigmoid is the core's stable
// one); [B] sequence log-probabilities are tiny, so nothing here needs fusing.
#include "losses/dpo.hpp"

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

// z = (pc - pr) - (rc - rr);  out = mean(loss_type(z))   (backward through the composed ops)
DpoOutput dpo_loss(const Tensor& policy_chosen_logps, const Tensor& policy_rejected_logps,
                   const Tensor& ref_chosen_logps, const Tensor& ref_rejected_logps, double beta,
                   double label_smoothing, DpoLossType loss_type) {
  const char* op = "dpo_loss";
  detail::check_float(policy_chosen_logps, op, "policy_chosen_logps");
  detail::check_like(policy_chosen_logps, "policy_chosen_logps", policy_rejected_logps, "policy_rejected_logps", op);
  detail::check_like(policy_chosen_logps, "policy_chosen_logps", ref_chosen_logps, "ref_chosen_logps", op);
  detail::check_like(policy_chosen_logps, "policy_chosen_logps", ref_rejected_logps, "ref_rejected_logps", op);
  check(beta > 0, op, ": beta must be > 0, got ", beta);
  check(label_smoothing >= 0 && label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ", label_smoothing);
  check(loss_type != DpoLossType::Robust || label_smoothing < 0.5, op,
        ": the robust loss divides by 1 - 2 label_smoothing and needs label_smoothing < 0.5, got ", label_smoothing);

  const Tensor chosen_ratio = policy_chosen_logps - ref_chosen_logps;
  const Tensor rejected_ratio = policy_rejected_logps - ref_rejected_logps;
  const Tensor z = chosen_ratio - rejected_ratio;
  const double ls = label_smoothing;
  Tensor losses;
  switch (loss_type) {
    case DpoLossType::Sigmoid:
      losses = -logsigmoid(z * beta);
      if (ls > 0) losses = losses * (1 - ls) - logsigmoid(z * -beta) * ls;
      break;
    case DpoLossType::Robust:
      losses = (-logsigmoid(z * beta) * (1 - ls) + logsigmoid(z * -beta) * ls) / (1 - 2 * ls);
      break;
    case DpoLossType::Hinge:
      losses = relu(1.0 - z * beta);
      break;
    case DpoLossType::Ipo:
      losses = pow(z - 1 / (2 * beta), 2.0);
      break;
  }
  DpoOutput out;
  out.loss = mean(losses);
  NoGradGuard no_grad;
  out.chosen_rewards = (chosen_ratio * beta).detach();
  out.rejected_rewards = (rejected_ratio * beta).detach();
  out.reward_margin = mean(out.chosen_rewards - out.rejected_rewards).detach();
  out.reward_accuracy = mean(gt(out.chosen_rewards, out.rejected_rewards).to(z.dtype())).detach();
  return out;
}

}  // namespace xg::losses

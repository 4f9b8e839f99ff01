// PPO losses composed from recorded ops on [B] or [B, T] tensors, and GAE as a plain
// backward-in-time loop (no graph).
#include "losses/ppo.hpp"

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "losses/logprobs.hpp"
#include "losses/masked.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

namespace {

// Mean of `values`, over the kept entries when a mask is given.
Tensor mean_or_masked(const Tensor& values, const Tensor& mask) {
  return mask.defined() ? masked_mean(values, mask) : mean(values);
}

}  // namespace

// r = exp(new - old);  out = -mean(min(r A, clamp(r, 1 - eps, 1 + eps) A))
//   (backward through the composed ops; min sends g to the smaller term, ties split evenly)
Tensor ppo_clip_loss(const Tensor& old_log_probs, const Tensor& new_log_probs, const Tensor& advantages,
                     double clip_epsilon, const Tensor& mask) {
  const char* op = "ppo_clip_loss";
  detail::check_float(old_log_probs, op, "old_log_probs");
  detail::check_like(old_log_probs, "old_log_probs", new_log_probs, "new_log_probs", op);
  detail::check_like(old_log_probs, "old_log_probs", advantages, "advantages", op);
  check(clip_epsilon >= 0, op, ": clip_epsilon must be >= 0, got ", clip_epsilon);
  if (mask.defined()) detail::bool_mask(mask, old_log_probs.shape(), op, "mask");
  const Tensor ratio = exp(new_log_probs - old_log_probs);
  const Tensor clipped = clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon);
  return -mean_or_masked(minimum(ratio * advantages, clipped * advantages), mask);
}

// v_clip = max(min(new, old + c), old - c);  out = 0.5 mean(max((new - R)^2, (v_clip - R)^2))
//   (backward through the composed ops; unclipped, v_clip is new itself and the tie in max
//   splits g evenly between the two equal terms, as in PyTorch)
Tensor ppo_value_loss(const Tensor& new_values, const Tensor& old_values, const Tensor& returns,
                      double clip_range_value, const Tensor& mask) {
  const char* op = "ppo_value_loss";
  detail::check_float(new_values, op, "new_values");
  detail::check_like(new_values, "new_values", old_values, "old_values", op);
  detail::check_like(new_values, "new_values", returns, "returns", op);
  check(clip_range_value >= 0, op, ": clip_range_value must be >= 0, got ", clip_range_value);
  if (mask.defined()) detail::bool_mask(mask, new_values.shape(), op, "mask");
  // TRL's clip_by_value, so that an unclipped prediction is bit-identical to new_values
  const Tensor clipped = maximum(minimum(new_values, old_values + clip_range_value), old_values - clip_range_value);
  const Tensor l1 = pow(new_values - returns, 2.0);
  const Tensor l2 = pow(clipped - returns, 2.0);
  return mean_or_masked(maximum(l1, l2), mask) * 0.5;
}

Tensor ppo_entropy_bonus(const Tensor& logits, const Tensor& mask) {
  const Tensor h = entropy_from_logits(logits);
  if (mask.defined()) detail::bool_mask(mask, h.shape(), "ppo_entropy_bonus", "mask");
  return mean_or_masked(h, mask);
}

Gae compute_gae(const Tensor& rewards, const Tensor& values, double gamma, double lam) {
  const char* op = "compute_gae";
  detail::check_float(rewards, op, "rewards");
  detail::check_like(rewards, "rewards", values, "values", op);
  check(rewards.dim() == 1 || rewards.dim() == 2, op, ": rewards must be [T] or [B, T], got ",
        shape_str(rewards.shape()));
  const int64_t T = rewards.shape().back(), B = T == 0 ? 0 : rewards.numel() / T;
  Gae out;
  out.advantages = empty(rewards.shape(), rewards.dtype());
  out.returns = empty(rewards.shape(), rewards.dtype());
  dispatch_float(rewards.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    const T_* r = rewards.data<T_>();
    const T_* v = values.data<T_>();
    T_* a = out.advantages.data<T_>();
    T_* ret = out.returns.data<T_>();
    for (int64_t b = 0; b < B; ++b) {
      double last = 0;  // A_{t+1}
      for (int64_t t = T - 1; t >= 0; --t) {
        const int64_t i = b * T + t;
        const double next_v = t + 1 < T ? static_cast<double>(v[i + 1]) : 0.0;
        const double delta = static_cast<double>(r[i]) + gamma * next_v - static_cast<double>(v[i]);
        last = delta + gamma * lam * last;
        a[i] = static_cast<T_>(last);
        ret[i] = static_cast<T_>(last + static_cast<double>(v[i]));
      }
    }
  });
  return out;
}

// rewards = -kl_coef (lp - ref) on kept tokens, + score on each row's last kept token;
// (A, R) = compute_gae(rewards, values * mask); advantages = masked_whiten(A, mask) * mask
PpoAdvantages ppo_advantages(const Tensor& logprobs, const Tensor& ref_logprobs, const Tensor& values,
                             const Tensor& scores, const Tensor& mask, double kl_coef, double gamma, double lam) {
  const char* op = "ppo_advantages";
  detail::check_float(logprobs, op, "logprobs");
  check(logprobs.dim() == 2, op, ": logprobs must be [B, T], got ", shape_str(logprobs.shape()));
  detail::check_like(logprobs, "logprobs", ref_logprobs, "ref_logprobs", op);
  detail::check_like(logprobs, "logprobs", values, "values", op);
  const int64_t B = logprobs.shape()[0], T = logprobs.shape()[1];
  check(scores.dtype() == logprobs.dtype() && scores.shape() == Shape{B}, op, ": scores must be ",
        dtype_name(logprobs.dtype()), " [", B, "], got ", dtype_name(scores.dtype()), " ", shape_str(scores.shape()));
  check(kl_coef >= 0 && gamma >= 0 && gamma <= 1 && lam >= 0 && lam <= 1, op,
        ": expected kl_coef >= 0 and gamma, lam in [0, 1], got ", kl_coef, ", ", gamma, ", ", lam);
  NoGradGuard no_grad;
  const Tensor keep = detail::bool_mask(mask, logprobs.shape(), op, "mask").to(logprobs.dtype());
  Tensor rewards = (logprobs - ref_logprobs) * keep * (-kl_coef);
  dispatch_float(rewards.dtype(), op, [&](auto tag) {
    using T_ = decltype(tag);
    T_* r = rewards.data<T_>();
    const T_* k = keep.data<T_>();
    const T_* s = scores.data<T_>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t last = T - 1;
      while (last >= 0 && k[b * T + last] == 0) --last;
      check(last >= 0, op, ": row ", b, " of mask keeps no token");
      r[b * T + last] += s[b];
    }
  });
  const Gae gae = compute_gae(rewards, values * keep, gamma, lam);
  return {rewards, masked_whiten(gae.advantages, keep) * keep, gae.returns};
}

}  // namespace xg::losses

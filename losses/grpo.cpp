// GRPO: group advantages as one fused op (group statistics in double, exact zeros for
// equal groups); the clipped loss and the k3 KL composed from recorded ops on [B, T].
#include "losses/grpo.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "losses/masked.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

using Grads = std::vector<Tensor>;

namespace {

constexpr double kAdvEps = 1e-8;  // eps in (R - mean) / (std + eps)

// r: [B, G] -> a: [B, G], stats: [B, 2] = (mean, unbiased std; std 0 marks an equal group)
template <class T>
void advantages_forward(const T* r, int64_t B, int64_t G, T* a, double* stats) {
  for (int64_t b = 0; b < B; ++b) {
    const T* rr = r + b * G;
    T* ar = a + b * G;
    const auto [lo, hi] = std::minmax_element(rr, rr + G);
    if (*lo == *hi) {  // all equal: exactly zero advantages, whatever the rounding of the mean
      std::fill(ar, ar + G, T(0));
      stats[2 * b] = static_cast<double>(*lo);
      stats[2 * b + 1] = 0;
      continue;
    }
    double m = 0;
    for (int64_t i = 0; i < G; ++i) m += static_cast<double>(rr[i]);
    m /= static_cast<double>(G);
    double ss = 0;
    for (int64_t i = 0; i < G; ++i) ss += (static_cast<double>(rr[i]) - m) * (static_cast<double>(rr[i]) - m);
    const double s = std::sqrt(ss / static_cast<double>(G - 1));
    for (int64_t i = 0; i < G; ++i) ar[i] = static_cast<T>((static_cast<double>(rr[i]) - m) / (s + kAdvEps));
    stats[2 * b] = m;
    stats[2 * b + 1] = s;
  }
}

// dr_k = (g_k - mean(g)) / D - d_k sum_i(g_i d_i) / ((G - 1) s D^2),  d = r - m, D = s + eps;
// 0 for an equal group (s == 0), whose advantages are defined as 0.
template <class T>
void advantages_backward(const T* r, const T* g, const double* stats, int64_t B, int64_t G, T* dr) {
  for (int64_t b = 0; b < B; ++b) {
    const T* rr = r + b * G;
    const T* gr = g + b * G;
    T* d = dr + b * G;
    const double m = stats[2 * b], s = stats[2 * b + 1];
    if (s == 0) {
      std::fill(d, d + G, T(0));
      continue;
    }
    const double D = s + kAdvEps;
    double gmean = 0, gd = 0;
    for (int64_t i = 0; i < G; ++i) {
      gmean += static_cast<double>(gr[i]);
      gd += static_cast<double>(gr[i]) * (static_cast<double>(rr[i]) - m);
    }
    gmean /= static_cast<double>(G);
    const double k = gd / (static_cast<double>(G - 1) * s * D * D);
    for (int64_t i = 0; i < G; ++i)
      d[i] = static_cast<T>((static_cast<double>(gr[i]) - gmean) / D - (static_cast<double>(rr[i]) - m) * k);
  }
}

}  // namespace

namespace {

// x: [B, G] -> G / (G - 1) (x - mean(x)) per row, the mean in double: RLOO's advantages and
// (the map is linear and symmetric) their gradient.
Tensor leave_one_out(const Tensor& x) {
  const int64_t B = x.shape()[0], G = x.shape()[1];
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_float(x.dtype(), "compute_rloo_advantages", [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const double k = static_cast<double>(G) / static_cast<double>(G - 1);
    for (int64_t b = 0; b < B; ++b) {
      double mean = 0;
      bool equal = true;  // then exactly 0: a double mean of seven 0.1s is off by one rounding
      for (int64_t i = 0; i < G; ++i) {
        mean += static_cast<double>(px[b * G + i]);
        equal = equal && px[b * G + i] == px[b * G];
      }
      mean = equal ? static_cast<double>(px[b * G]) : mean / static_cast<double>(G);
      for (int64_t i = 0; i < G; ++i) po[b * G + i] = static_cast<T>(k * (static_cast<double>(px[b * G + i]) - mean));
    }
  });
  return out;
}

}  // namespace

// out = G / (G - 1) (r - mean(r)) per row   =>   dr = G / (G - 1) (g - mean(g))
Tensor compute_rloo_advantages(const Tensor& rewards) {
  const char* op = "compute_rloo_advantages";
  detail::check_float(rewards, op, "rewards");
  check(rewards.dim() == 2, op, ": rewards must be [B, G] (B prompts, G completions each), got ",
        shape_str(rewards.shape()));
  check(rewards.shape()[1] >= 2, op, ": a group needs at least 2 completions (the baseline is the others' mean), got ",
        rewards.shape()[1]);
  return record(leave_one_out(rewards), {rewards}, op, saves_nothing(),
                [](const Tensor& g, const Tensor&, const std::vector<Tensor>&) {
                  return std::vector<Tensor>{leave_one_out(g)};
                });
}

// out = (r - mean(r)) / (std(r) + 1e-8) per row   =>   see advantages_backward
Tensor compute_grpo_advantages(const Tensor& rewards) {
  const char* op = "compute_grpo_advantages";
  detail::check_float(rewards, op, "rewards");
  check(rewards.dim() == 2, op, ": rewards must be [B, G] (B prompts, G completions each), got ",
        shape_str(rewards.shape()), " (for a flat [B * G] layout pass the group size)");
  const int64_t B = rewards.size(0), G = rewards.size(1);
  check(G >= 2 || B == 0, op, ": rewards ", shape_str(rewards.shape()), " have groups of ", G,
        " completion; the unbiased std needs at least 2 per group");
  Tensor out = empty(rewards.shape(), rewards.dtype());
  Tensor stats = empty({B, 2}, kFloat64);
  dispatch_float(rewards.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    advantages_forward(rewards.data<T>(), B, G, out.data<T>(), stats.data<double>());
  });
  return record(out, {rewards}, op, saves({0}), [stats, B, G](const Tensor& g, const Tensor&, const Grads& in) {
    Tensor dr = empty(in[0].shape(), in[0].dtype());
    dispatch_float(g.dtype(), "compute_grpo_advantages backward", [&](auto tag) {
      using T = decltype(tag);
      advantages_backward(in[0].data<T>(), g.data<T>(), stats.data<double>(), B, G, dr.data<T>());
    });
    return Grads{dr};
  });
}

Tensor compute_grpo_advantages(const Tensor& rewards, int64_t group_size) {
  const char* op = "compute_grpo_advantages";
  detail::check_float(rewards, op, "rewards");
  check(rewards.dim() == 1, op, ": with a group size, rewards must be flat [B * G], got ", shape_str(rewards.shape()));
  check(group_size >= 2, op, ": group_size must be >= 2, got ", group_size);
  check(rewards.numel() % group_size == 0, op, ": ", rewards.numel(), " rewards ", shape_str(rewards.shape()),
        " do not split into groups of ", group_size, " (group size mismatch)");
  return reshape(compute_grpo_advantages(reshape(rewards, {-1, group_size})), {-1});
}

// per = -min(r A, clamp(r, 1 - eps, 1 + eps) A) + beta ref_kl,  r = exp(new - old);
// out = per normalised over the mask by loss_type   (backward through the composed ops)
Tensor grpo_loss(const Tensor& old_log_probs, const Tensor& new_log_probs, const Tensor& advantages,
                 double clip_epsilon, double beta, const Tensor& ref_kl, const GrpoOptions& options) {
  const char* op = "grpo_loss";
  detail::check_float(old_log_probs, op, "old_log_probs");
  detail::check_like(old_log_probs, "old_log_probs", new_log_probs, "new_log_probs", op);
  const Shape& shape = old_log_probs.shape();
  check(shape.size() == 1 || shape.size() == 2, op, ": log-probs must be [B] or [B, T], got ", shape_str(shape));
  check(clip_epsilon >= 0, op, ": clip_epsilon must be >= 0, got ", clip_epsilon);
  const int64_t B = shape[0], T = shape.size() == 2 ? shape[1] : 1;

  detail::check_float(advantages, op, "advantages");
  check(advantages.dtype() == old_log_probs.dtype(), op, ": advantages are ", dtype_name(advantages.dtype()),
        " but the log-probs are ", dtype_name(old_log_probs.dtype()));
  Tensor adv = advantages;
  if (shape.size() == 2 && advantages.shape() == Shape{B}) {
    adv = unsqueeze(advantages, -1);  // one advantage per sequence, shared by its tokens
  } else {
    check(advantages.shape() == shape || (shape.size() == 2 && advantages.shape() == Shape{B, 1}), op, ": advantages ",
          shape_str(advantages.shape()), " do not match the log-probs ", shape_str(shape), " (expected ",
          shape_str(shape), shape.size() == 2 ? str_cat(" or [", B, "] per sequence") : "", ")");
  }

  const Tensor ratio = exp(new_log_probs - old_log_probs);
  const Tensor clipped = clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon);
  Tensor per = -minimum(ratio * adv, clipped * adv);
  if (ref_kl.defined()) {
    detail::check_float(ref_kl, op, "ref_kl");
    check(ref_kl.shape() == shape || ref_kl.numel() == 1, op, ": ref_kl ", shape_str(ref_kl.shape()),
          " must have the log-probs' shape ", shape_str(shape), " or be a single value");
    per = per + ref_kl * beta;
  }
  per = reshape(per, {B, T});

  const GrpoLossType type = options.loss_type;
  check(options.max_completion_length >= 0, op, ": max_completion_length must be >= 0, got ",
        options.max_completion_length);
  check(options.num_items_in_batch >= 0, op, ": num_items_in_batch must be >= 0, got ", options.num_items_in_batch);
  Tensor m;  // [B, T] 0/1, or undefined: every token counts
  if (options.completion_mask.defined()) {
    check(options.completion_mask.shape() == shape, op, ": completion_mask ",
          shape_str(options.completion_mask.shape()), " must have the log-probs' shape ", shape_str(shape));
    m = reshape(detail::float_mask(options.completion_mask, old_log_probs, op, "completion_mask"), {B, T});
  }
  const Tensor kept = m.defined() ? per * m : per;
  switch (type) {
    case GrpoLossType::Grpo: {
      if (!m.defined()) return mean(per);
      return mean(sum(kept, {-1}) / clamp_min(sum(m, {-1}), 1.0));
    }
    case GrpoLossType::Bnpo: {
      if (!m.defined()) return mean(per);
      return sum(kept) / std::max(sum(m).item(), 1.0);
    }
    case GrpoLossType::DrGrpo: {
      const int64_t L = options.max_completion_length > 0 ? options.max_completion_length : T;
      return sum(kept) / static_cast<double>(B * L);
    }
    case GrpoLossType::Dapo: {
      const double n = options.num_items_in_batch > 0 ? options.num_items_in_batch
                                                      : std::max(m.defined() ? sum(m).item() : double(B * T), 1.0);
      return sum(kept) / n;
    }
  }
  return mean(per);
}

// r = ref - logp;  out = reduce(exp(r) - r - 1)   (backward through the composed ops)
Tensor compute_kl_penalty(const Tensor& log_probs, const Tensor& ref_log_probs, const Tensor& mask,
                          Reduction reduction) {
  const char* op = "compute_kl_penalty";
  detail::check_float(log_probs, op, "log_probs");
  detail::check_like(log_probs, "log_probs", ref_log_probs, "ref_log_probs", op);
  check(reduction != Reduction::BatchMean, op, ": reduction batchmean is only for kl_div (use mean, sum or none)");
  if (mask.defined()) detail::bool_mask(mask, log_probs.shape(), op, "mask");
  const Tensor r = ref_log_probs - log_probs;
  const Tensor kl = exp(r) - r - 1.0;
  switch (reduction) {
    case Reduction::None:
      return kl;
    case Reduction::Sum:
      return mask.defined() ? masked_sum(kl, mask) : sum(kl);
    default:
      return mask.defined() ? masked_mean(kl, mask) : mean(kl);
  }
}

}  // namespace xg::losses

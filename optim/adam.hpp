// xg::optim::Adam (weight decay as an L2 term in the gradient, optional AMSGrad) and AdamW
// (decoupled weight decay), step for step as torch.optim.Adam / AdamW (torch 1.13).
#pragma once

#include <utility>

#include "optim/optimizer.hpp"

namespace xg::optim {

// torch.optim.Adam's arguments and defaults, in its order.
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // L2: added to the gradient
  bool amsgrad = false;
  bool maximize = false;
};

// torch.optim.AdamW's: the same but for the default weight decay.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay before the update
  bool amsgrad = false;
  bool maximize = false;
};

// For each parameter p with gradient g, at its step t = 1, 2, ... (torch 1.13's
// _single_tensor_adam / _single_tensor_adamw):
//   g = g (or -g with maximize);  Adam: g = g + weight_decay * p;  AdamW: p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//   amsgrad: v_max = max(v_max, v), used below in place of v
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State per parameter: "exp_avg", "exp_avg_sq", "max_exp_avg_sq" (amsgrad) and the step t.
class Adam : public OptimizerBase<AdamOptions> {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups);
  void step() override;

 protected:
  bool can_shard() const override { return true; }
  void validate(const AdamOptions& o) const override;
  OptionValues to_values(const AdamOptions& o) const override;
  AdamOptions from_values(const std::map<std::string, double>& v) const override;
};

class AdamW : public OptimizerBase<AdamWOptions> {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup<AdamWOptions>> groups);
  void step() override;

 protected:
  bool can_shard() const override { return true; }
  void validate(const AdamWOptions& o) const override;
  OptionValues to_values(const AdamWOptions& o) const override;
  AdamWOptions from_values(const std::map<std::string, double>& v) const override;
};

}  // namespace xg::optim

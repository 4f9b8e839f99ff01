// xg::optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum,
// L2 weight decay and maximize, step for step as torch.optim.SGD (torch 1.13).
#pragma once

#include <limits>

#include "optim/optimizer.hpp"

namespace xg::optim {

// torch.optim.SGD's arguments, in its order: SGDOptions{0.1, 0.9} is lr 0.1, momentum 0.9.
struct SGDOptions {
  // NOTE: as in torch, lr has no default: an SGD made with lr unset is an error.
  double lr = std::numeric_limits<double>::quiet_NaN();
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  bool maximize = false;
};

// For each parameter p with gradient g (torch 1.13's _single_tensor_sgd):
//   d = g (or -g with maximize) + weight_decay * p
//   with momentum: buf = d on the first step, else buf = momentum * buf + (1 - dampening) * d;
//                  d = d + momentum * buf (nesterov) or d = buf
//   p = p - lr * d
// State per parameter: "momentum_buffer" (only with momentum).
class SGD : public OptimizerBase<SGDOptions> {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);
  void step() override;

 protected:
  void validate(const SGDOptions& o) const override;
  OptionValues to_values(const SGDOptions& o) const override;
  SGDOptions from_values(const std::map<std::string, double>& v) const override;
};

}  // namespace xg::optim

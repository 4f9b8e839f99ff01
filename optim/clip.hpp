// Gradient clipping, torch.nn.utils.clip_grad_norm_ / clip_grad_value_ under their names
// (the trailing _ : they write in place, as in PyTorch): both scale or
// clamp the .grad of each parameter in place; parameters without a gradient are skipped.
#pragma once

#include <limits>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg::optim {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Total norm of all gradients taken together (norm_type > 0, or kInf for the max-abs norm),
// then every gradient *= min(1, max_norm / (total + 1e-6)). Returns the total norm (before
// clipping; 0 when no parameter has a gradient). A NaN/inf total is an error with
// error_if_nonfinite; otherwise, as in torch, the gradients are scaled by the NaN coefficient.
// NOTE: sums run in double for float32 gradients too (torch sums in float32).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace xg::optim

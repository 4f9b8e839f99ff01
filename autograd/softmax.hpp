// softmax and log_softmax over one dim: fused, numerically stable row kernels with fused
// backward (dx = y * (g - sum(g * y)) and dx = g - exp(y) * sum(g)).
#pragma once

#include "autograd/tensor.hpp"

namespace xg {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace xg

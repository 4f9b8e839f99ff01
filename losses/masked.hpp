// Masked statistics for token-level RL losses (TRL's masked_mean, masked_var and
// masked_whiten): `mask` has the values' shape, bool, int64 or float, nonzero = keep.
#pragma once

#include "autograd/tensor.hpp"

namespace xg::losses {

// sum(values * mask) / sum(mask): a 0-d tensor (NaN when the mask keeps nothing, as TRL).
Tensor masked_mean(const Tensor& values, const Tensor& mask);
// The same along one dim (negative counts from the end), without keepdim.
Tensor masked_mean(const Tensor& values, const Tensor& mask, int64_t dim);
// sum(values * mask): a 0-d tensor.
Tensor masked_sum(const Tensor& values, const Tensor& mask);
// masked_mean((values - masked_mean(values))^2), times n / (n - 1) when unbiased
// (n = kept count; an error when n is 0, or 1 with unbiased, as TRL raises).
Tensor masked_var(const Tensor& values, const Tensor& mask, bool unbiased = true);
// (values - mean) / sqrt(var + 1e-8) over the kept entries (unbiased var), plus the mean
// back when !shift_mean. Every entry is transformed; masked ones are simply not counted.
Tensor masked_whiten(const Tensor& values, const Tensor& mask, bool shift_mean = true);

}  // namespace xg::losses

// Reductions over any set of dims (negative dims count from the end), with keepdim:
// sum, mean, var, std, max, min, amax, amin, logsumexp. An empty dim list means all dims.
#pragma once

#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

using Dims = std::vector<int64_t>;

// out = sum of x over dims   =>   dx = g broadcast back over the reduced dims
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// Variance with Bessel's correction `correction` (1 = unbiased, torch's default; 0 = biased).
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
// amax/amin: the gradient is shared evenly among tied extremes (as torch.amax).
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
// max/min over all elements (gradient shared evenly among ties, as torch.max(x)).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// max/min along one dim, like torch.max(x, dim): values (differentiable; the gradient goes
// to the index returned) and int64 indices of the first extreme.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
// log(sum(exp(x))) over dims, stable   =>   dx = g * exp(x - out)
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim = false);

}  // namespace xg

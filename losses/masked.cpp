// Masked statistics, composed from recorded ops (so their backward comes for free): they
// run on [B, T] token tensors, small next to the logits.
#include "losses/masked.hpp"

#include "autograd/elementwise.hpp"
#include "autograd/reduce.hpp"
#include "losses/detail/util.hpp"

namespace xg::losses {

// out = sum(v m) / sum(m)   =>   dv = g m / sum(m)
Tensor masked_mean(const Tensor& values, const Tensor& mask) {
  detail::check_float(values, "masked_mean", "values");
  const Tensor m = detail::float_mask(mask, values, "masked_mean", "mask");
  return sum(values * m) / sum(m);
}

Tensor masked_mean(const Tensor& values, const Tensor& mask, int64_t dim) {
  detail::check_float(values, "masked_mean", "values");
  const Tensor m = detail::float_mask(mask, values, "masked_mean", "mask");
  return sum(values * m, {dim}) / sum(m, {dim});
}

// out = sum(v m)   =>   dv = g m
Tensor masked_sum(const Tensor& values, const Tensor& mask) {
  detail::check_float(values, "masked_sum", "values");
  return sum(values * detail::float_mask(mask, values, "masked_sum", "mask"));
}

Tensor masked_var(const Tensor& values, const Tensor& mask, bool unbiased) {
  detail::check_float(values, "masked_var", "values");
  const Tensor m = detail::float_mask(mask, values, "masked_var", "mask");
  const double n = sum(m).item();
  check(n > 0, "masked_var: the mask of shape ", shape_str(mask.shape()), " keeps no entry");
  check(!unbiased || n > 1, "masked_var: the mask keeps a single entry; the unbiased variance needs at least 2");
  const Tensor centered = values - sum(values * m) / n;
  Tensor var = sum(centered * centered * m) / n;
  return unbiased ? var * (n / (n - 1)) : var;
}

// out = (v - mean) / sqrt(var + 1e-8) (+ mean)   (backward through the composed ops)
Tensor masked_whiten(const Tensor& values, const Tensor& mask, bool shift_mean) {
  detail::check_float(values, "masked_whiten", "values");
  const Tensor mean = masked_mean(values, mask);
  const Tensor var = masked_var(values, mask, true);
  Tensor whitened = (values - mean) * rsqrt(var + 1e-8);
  return shift_mean ? whitened : whitened + mean;
}

}  // namespace xg::losses

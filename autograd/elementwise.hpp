// Elementwise ops with NumPy/PyTorch broadcasting: arithmetic, math functions,
// activations, clamp/min/max, where/masked_fill, comparisons, and in-place helpers.
// Both operands of a binary op must have the same dtype (no type promotion); a C++ scalar
// takes the tensor's dtype, as a Python scalar does in PyTorch.
#pragma once

#include <limits>

#include "autograd/tensor.hpp"

namespace xg {

// --- arithmetic -----------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// --- math -----------------------------------------------------------------------------
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
// cap * tanh(x / cap), cap > 0: Gemma 2's soft-capping of attention scores and logits.
Tensor softcap(const Tensor& x, double cap);
Tensor sigmoid(const Tensor& x);
Tensor logsigmoid(const Tensor& x);
// log(1 + exp(beta x)) / beta, linear above `threshold` (torch.nn.functional.softplus).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);

// --- activations ----------------------------------------------------------------------
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);  // vectorised, in swiglu.cpp beside the fused swiglu
enum class GeluApprox { None, Tanh };  // erf form (PyTorch's default) or the tanh form
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::None);

// --- clamp, min/max, selection ----------------------------------------------------------
constexpr double kNoBound = std::numeric_limits<double>::quiet_NaN();
// Clamp to [lo, hi]; pass kNoBound for a missing side. The gradient passes where lo <= x <= hi.
Tensor clamp(const Tensor& x, double lo, double hi = kNoBound);
Tensor clamp_min(const Tensor& x, double lo);
Tensor clamp_max(const Tensor& x, double hi);
Tensor minimum(const Tensor& a, const Tensor& b);  // ties split the gradient, as in PyTorch
Tensor maximum(const Tensor& a, const Tensor& b);
// cond ? a : b, elementwise with broadcasting; cond is a bool tensor.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` wherever mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// --- comparisons and logic (bool results, not differentiable) --------------------------------
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
bool isfinite_all(const Tensor& x);  // true when no element is NaN or +-Inf

// --- in place, outside autograd (optimizers, gradient accumulation) --------------------------
void add_(const Tensor& dst, const Tensor& src, double alpha = 1.0);  // dst += alpha * src (src broadcast to dst)
void mul_(const Tensor& dst, double s);                          // dst *= s

}  // namespace xg

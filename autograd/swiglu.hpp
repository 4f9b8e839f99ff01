// The SwiGLU activation as one fused op: silu(gate) * up, forward and backward each one
// vectorised pass (xsimd exp) over the two inputs, parallel over chunks.
#pragma once

#include "autograd/tensor.hpp"

namespace xg {

// silu(gate) * up = gate * sigmoid(gate) * up, for two float tensors of the same shape and
// dtype (torch: F.silu(gate) * up). Backward, with s = sigmoid(gate):
//   d_up = g * gate * s,   d_gate = g * up * s * (1 + gate * (1 - s)).
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace xg

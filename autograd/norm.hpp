// layer_norm and rms_norm over the last dim: fused row kernels that save the mean and
// 1/std of each row, with a fused one-pass backward for dx, dweight and dbias (llm.c style).
#pragma once

#include "autograd/tensor.hpp"

namespace xg {

// x: [..., C], weight and bias: [C] or undefined (no scale / no shift) -> [..., C]
// out = (x - mean) / sqrt(var + eps) * weight + bias, mean and biased var over the last dim
// (torch.nn.functional.layer_norm(x, [C], weight, bias, eps)).
Tensor layer_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

// x: [..., C], weight: [C] or undefined -> [..., C]
// out = x / sqrt(mean(x^2) + eps) * weight, mean over the last dim (LLaMA's RMSNorm; the
// statistics are accumulated in double).
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-6);

}  // namespace xg

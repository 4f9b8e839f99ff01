// Matrix products as gemm calls with transpose flags (on the backend of gemm_backend.hpp):
// matmul with torch.matmul's rules (1-D, 2-D, batched N-D with broadcast batch dims),
// linear (x @ w^T + b, no materialised transpose) and bmm.
//
// bfloat16: a product with a bf16 operand multiplies bf16 values and sums them in float32
// (oneDNN's bf16 kernels, or widened: gemm_backend.hpp). A float32 operand beside a bf16 one is
// rounded to bf16 (a float32 activation times a frozen bf16 weight), and so is every float32
// operand inside xg::autocast (autocast.hpp). The result is bf16 when both operands are bf16
// (torch.matmul's), float32 otherwise; each gradient comes back in its operand's dtype.
#pragma once

#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

// torch.matmul: 1-D @ 1-D is a dot product; a 1-D operand is treated as a row (left) or a
// column (right) and that dim removed from the result; N-D operands are batches of
// matrices whose batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// x: [..., in], w: [out, in], b: [out] or undefined -> [..., out]
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// x: [..., in], ws[i]: [out_i, in], bs[i]: [out_i] (one for each weight, or none) ->
// [..., sum out_i]: torch.cat([linear(x, w, b) for w, b in ...], -1) without stacking the
// weights, each product writing its columns of the result.
Tensor linear_cat(const Tensor& x, const std::vector<Tensor>& ws, const std::vector<Tensor>& bs = {});
// a: [B, n, k], b: [B, k, m] -> [B, n, m]
Tensor bmm(const Tensor& a, const Tensor& b);

}  // namespace xg

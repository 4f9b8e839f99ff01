// Mixed precision: xg::autocast, the scope in which float32 matrix products run in bfloat16,
// as torch.autocast("cpu", dtype=torch.bfloat16) runs them.
//
//   xg::optim::AdamW opt(model.parameters(), opts);   // float32 master weights and state
//   {
//     xg::autocast bf16;                              // products in bf16 from here
//     xg::Tensor loss = xg::losses::cross_entropy(model(x), y);
//     opt.zero_grad();
//     loss.backward();
//   }                                                 // the bf16 weight copies are dropped
//   opt.step();                                       // float32 update
//
// Inside the scope, matmul, bmm, linear and linear_cat round their float32 operands to bf16
// and sum the products in float32 (oneDNN's bf16 kernels where the CPU has them,
// gemm_backend.hpp). So do the products inside attention's fused kernel (q k^T, P v and
// their gradients) on its tiled path where the CPU has bf16 dot products; its softmax stays
// float32, and without bf16 dot products the kernel runs in float32. Everything else runs in
// float32 as before: softmax, norms, losses, the residual stream. That is PyTorch's split too
// (its CPU lists: products "lower_precision_fp", softmax, norms and losses "fp32"). Gradients come back in
// the dtype of each operand, so parameters, their gradients and AdamW's state stay float32.
// A leaf's bf16 copy (a weight) is made once and kept until the outermost scope ends, as
// PyTorch's autocast weight cache is; the backward products reuse it.
// NOTE: PyTorch's autocast returns a product in bf16; xgrad returns the float32 sums, since
// the ops that read it run in float32 anyway. It saves a rounding and a conversion pass; the
// results differ from torch's by that one bf16 rounding of the product's output.
// Autocast state is per thread (as PyTorch's); activation checkpointing recomputes under the
// state its forward ran with.
#pragma once

#include "autograd/tensor.hpp"

namespace xg {

class autocast {
 public:
  explicit autocast(bool enabled = true, Dtype dtype = kBFloat16);
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  bool prev_;
};

// Whether float32 products on this thread run in bf16 now.
bool autocast_enabled();

namespace detail {
// t as bfloat16 for a product: t itself when it is bf16, else a rounded copy (not recorded in
// the graph). With `cache` (a weight: a leaf), under autocast, the copy is made once per scope
// (keyed by the leaf's node and storage, so set_data makes a new one).
Tensor bf16_operand(const Tensor& t, bool cache);
}  // namespace detail

}  // namespace xg

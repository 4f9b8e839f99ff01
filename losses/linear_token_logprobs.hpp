// Per-token log-probabilities under a language-model head, h W^T, a block of rows at a time:
// what DPO, GRPO, RLOO and PPO read, without the [N, vocab] logits ever existing whole (the
// per-token form of linear_cross_entropy; Wijmans et al. 2024, "Cut Your Losses in
// Large-Vocabulary Language Models").
#pragma once

#include "autograd/tensor.hpp"

namespace xg::losses {

// h: [..., C] (float32 or float64), weight: [V, C] (an LM head or the tied embedding; float32,
// bf16 or q8_0), targets: h's leading shape, int64 in [0, V) or ignore_index -> [...], what
// token_logprobs(linear(h, weight), targets, ignore_index) gives: log softmax(h W^T)[target] per
// row, 0 (and no gradient) where the target is ignored. The forward runs `chunk_rows` rows at a
// time (0: as many as make about 8 M logits, 32 MB in float32). The gradient for upstream g is
// dh_i = g_i (onehot - softmax_i) W and dW = sum_i g_i (onehot - softmax_i)^T h_i: for a frozen
// weight (LoRA) the forward keeps each row's (onehot - softmax_i) W, [..., C] like h, and
// backward scales it by g; for a weight that trains, backward makes each block's logits again
// (one more head product) rather than keep them. The products follow autocast as linear's do.
Tensor linear_token_logprobs(const Tensor& h, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                             int64_t chunk_rows = 0);

}  // namespace xg::losses

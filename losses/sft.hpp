// The supervised fine-tuning loss: next-token cross-entropy over the response only (prompt
// tokens and padding masked with -100, PyTorch's default ignore_index).
#pragma once

#include "autograd/tensor.hpp"

namespace xg::losses {

// The targets sft_loss trains on: labels [B, T] with the first prompt_lengths[b] tokens of
// row b (and positions padding_mask marks 0) set to -100, then shifted left by one
// (targets[b, t] = masked labels[b, t + 1], -100 at t = T - 1). Int64 [B, T].
// prompt_lengths: int64 [B], each >= 0 (a length beyond T masks the whole row, as a Python
// slice would). padding_mask: undefined, or [B, T] bool/int64/float with nonzero = real token.
Tensor sft_labels(const Tensor& labels, const Tensor& prompt_lengths, const Tensor& padding_mask = Tensor());

// logits [B, T, V], labels [B, T] int64, prompt_lengths [B] int64: the mean cross-entropy of
// logits[:, :-1] against the masked labels[:, 1:] over the tokens that are not masked (what
// F.cross_entropy(shifted logits, shifted labels, ignore_index=-100) gives). Computed on the
// unshifted logits with shifted targets, so the logits are never copied.
// padding_mask (optional, [B, T]): positions with 0 are padding and never targets.
// num_items_in_batch > 0 divides the summed loss by that many tokens instead of this
// call's count: with the whole accumulated batch's count, the micro-batch losses add up
// to the whole batch's loss (gradient accumulation; count them with sft_labels).
// NOTE: with every target masked the mean is NaN, as F.cross_entropy(..., ignore_index=-100) gives.
Tensor sft_loss(const Tensor& logits, const Tensor& labels, const Tensor& prompt_lengths,
                const Tensor& padding_mask = Tensor(), double num_items_in_batch = 0);
// The same loss from the head's input: hidden [B, T, C] and the head's matrix [V, C], whose
// product would be the logits, through linear_cross_entropy (the logits never whole).
Tensor sft_loss_from_hidden(const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                            const Tensor& prompt_lengths, const Tensor& padding_mask = Tensor(),
                            double num_items_in_batch = 0);

}  // namespace xg::losses

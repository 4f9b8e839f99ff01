// The cross-entropy of a language-model head, h W^T against targets, a block of rows at a
// time: the [N, vocab] logits and their gradient never exist whole (Liger's fused linear
// cross-entropy; Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models").
#pragma once

#include "autograd/tensor.hpp"
#include "losses/reduction.hpp"

namespace xg::losses {

// h: [N, C] (or [..., C]), weight: [V, C] (an LM head or the tied embedding; float32, bf16 or
// q8_0), targets: [N] (or h's leading shape), int64 in [0, V) or ignore_index -> the loss
// cross_entropy(linear(h, weight), targets, ignore_index, reduction) would give, Mean (over
// the targets not ignored) or Sum. The forward runs `chunk_rows` rows at a time (0: as many
// as make about 8 M logits, 32 MB in float32) and computes each block's gradients with
// respect to h and weight right away; backward scales them by the upstream gradient. So a
// step holds one block's logits instead of all of them, at the price of the head's weight
// gradient being summed block by block (the same value to rounding). The products follow
// autocast as linear's do.
Tensor linear_cross_entropy(const Tensor& h, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                            Reduction reduction = Reduction::Mean, int64_t chunk_rows = 0);

}  // namespace xg::losses

// Log-probabilities of label tokens under a model's logits — what SFT, DPO, PPO and GRPO
// consume — and the per-position entropy of the predicted distribution.
#pragma once

#include "autograd/tensor.hpp"

namespace xg::losses {

// labels [..., T] shifted left by one along the last dim, ignore_index at the end: the
// targets that logits[..., t, :] predict in a causal LM (labels[..., t + 1]). Using it with
// the unshifted logits gives the same losses as slicing logits[:, :-1] and labels[:, 1:],
// without copying the logits. Int64 in, int64 out, not differentiable.
Tensor shift_labels(const Tensor& labels, int64_t ignore_index = -100);

// log softmax(logits)[..., labels] per position: logits [..., V], labels [...] int64
// -> [...]; 0 (with no gradient) where labels == ignore_index. One fused pass (it is
// -cross_entropy(..., Reduction::None)): the [..., V] log-softmax is never materialised.
// logits[..., t, :] scores labels[..., t] (already aligned; see shift_labels).
Tensor token_logprobs(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100);

// Sum over the last dim (the sequence) of token_logprobs at the positions `mask` keeps:
// logits [B, T, V], labels [B, T], mask [B, T] (bool, int64 or float; nonzero = keep;
// undefined = every label != -100) -> [B]. With `average`, divided by the number of kept
// tokens per row (TRL's average_log_prob; a row with none gives NaN, 0/0).
Tensor sequence_logprobs(const Tensor& logits, const Tensor& labels, const Tensor& mask = Tensor(),
                         bool average = false);

// Entropy of softmax(logits) over the last dim: [..., V] -> [...], as TRL's
// entropy_from_logits (logsumexp(x) - sum softmax(x) * x), fused and stable: -inf logits
// (masked vocabulary) contribute 0.
Tensor entropy_from_logits(const Tensor& logits);

}  // namespace xg::losses

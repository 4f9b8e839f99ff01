// Cross-entropy of logits against class-index targets, as one fused op (log-softmax and
// NLL in one pass per row; backward softmax - onehot), with PyTorch's ignore_index,
// reduction and label_smoothing.
#pragma once

#include "autograd/tensor.hpp"
#include "losses/reduction.hpp"

namespace xg::losses {

// logits [N, C] with targets [N], or any leading shape: [B, T, V] with [B, T] (classes are
// the LAST dim), int64 targets in [0, C) or == ignore_index. Equal to PyTorch's
// F.cross_entropy(logits.view(-1, C), targets.view(-1), ignore_index=..., reduction=...,
// label_smoothing=...) (reshaped back for Reduction::None).
//   - None: per-target losses in the targets' shape (0 where ignored);
//   - Sum: their sum (0 when every target is ignored, with a zero gradient);
//   - Mean: the sum divided by the number of targets that are not ignored.
//     NOTE: when every target is ignored Mean returns NaN (0/0) with a zero gradient,
//     exactly as PyTorch 1.13 does; use Sum (or sft_loss's num_items_in_batch) when a
//     micro-batch may have no target at all.
// label_smoothing eps in [0, 1] mixes the one-hot target with the uniform distribution:
// loss = (1 - eps) * nll + eps / C * sum_c(-log_softmax(x)_c), PyTorch 1.13's formula.
// NOTE: PyTorch reads [N, C, d1, ...] (class dim 1) for more than 2 dims; here the class
// dim is always last, which is the layout language-model logits come in.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean, double label_smoothing = 0.0);

namespace detail {
// The same op, reporting errors under another loss's name (sft_loss, token_logprobs).
Tensor cross_entropy_as(const char* op, const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                        Reduction reduction, double label_smoothing);
// The summed loss of logits [N, C] (contiguous, float32 or float64) against targets [N], and
// its gradient softmax - onehot written over the logits; no graph. linear_cross_entropy's
// blocks: one [N, C] buffer a block instead of the logits and a second one for their gradient.
double cross_entropy_sum_and_grad_(Tensor& logits, const Tensor& targets, int64_t ignore_index, const char* op);
// Row by row, for linear_token_logprobs's blocks: loss[i] (N doubles, 0 where ignored) the
// cross-entropy of row i; with `grad`, row_scale[i] (softmax - onehot) written over the logits
// (row_scale [N] in the logits' dtype; undefined: 1), 0 on ignored rows.
void cross_entropy_rows_and_grad_(Tensor& logits, const Tensor& targets, int64_t ignore_index, const char* op,
                                  double* loss, bool grad, const Tensor& row_scale);
}  // namespace detail

}  // namespace xg::losses

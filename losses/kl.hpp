// KL divergence: KL(P || Q) between two sets of logits (the row mean), and PyTorch's
// F.kl_div(input_log_probs, target, reduction, log_target) as a fused pointwise op.
#pragma once

#include "autograd/tensor.hpp"
#include "losses/reduction.hpp"

namespace xg::losses {

// KL(P || Q) from logits: per row, sum_c P_c (log P_c - log Q_c) with
// P = softmax(p_logits), Q = softmax(q_logits) over the last dim; then the mean over rows.
// For [N, C] it equals F.kl_div(log_softmax(q), softmax(p), reduction="batchmean").
// NOTE: for more than 2 dims ([B, T, V]) this is the mean over all B * T rows (the plain
// .mean() over rows that hand-written KL code usually ends with), while PyTorch's batchmean
// would divide the sum by B only.
Tensor kl_divergence(const Tensor& p_logits, const Tensor& q_logits);

// F.kl_div: pointwise target * (log(target) - input) (0 where target == 0), or with
// log_target exp(target) * (target - input); then reduced (Mean: over all elements, as
// PyTorch's default; BatchMean: the sum over the size of dim 0). input and target share
// one shape and dtype.
// NOTE: where target == 0 (or exp(target) == 0 with log_target) the gradient with respect
// to the target is 0 here; PyTorch 1.13 returns NaN there.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);

}  // namespace xg::losses

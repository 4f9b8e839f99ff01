// SFT loss: builds the masked, shifted targets (cheap, int64 [B, T]) and runs the fused
// cross-entropy on the unshifted logits; the last position's target is ignored.
#include "losses/sft.hpp"

#include "autograd/elementwise.hpp"
#include "losses/cross_entropy.hpp"
#include "losses/detail/util.hpp"
#include "losses/linear_cross_entropy.hpp"

namespace xg::losses {

namespace {

Tensor sft_labels_as(const char* op, const Tensor& labels, const Tensor& prompt_lengths, const Tensor& padding_mask) {
  check(labels.defined() && labels.dtype() == kInt64 && labels.dim() == 2, op,
        ": labels must be an int64 [B, T] tensor, got ", labels.defined() ? dtype_name(labels.dtype()) : "undefined",
        " ", labels.defined() ? shape_str(labels.shape()).str() : "");
  const int64_t B = labels.size(0), T = labels.size(1);
  check(prompt_lengths.defined() && prompt_lengths.dtype() == kInt64, op,
        ": prompt_lengths must be an int64 tensor of shape [", B, "]");
  check(prompt_lengths.shape() == Shape{B}, op, ": prompt_lengths ", shape_str(prompt_lengths.shape()),
        " must have one length per row of labels ", shape_str(labels.shape()), " (expected [", B, "])");
  Tensor keep;
  if (padding_mask.defined()) keep = detail::bool_mask(padding_mask, labels.shape(), op, "padding_mask");
  const int64_t* l = labels.data<int64_t>();
  const int64_t* pl = prompt_lengths.data<int64_t>();
  const bool* k = keep.defined() ? keep.data<bool>() : nullptr;
  Tensor out = empty({B, T}, kInt64);
  int64_t* o = out.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    check(pl[b] >= 0, op, ": prompt_lengths[", b, "] is ", pl[b], "; lengths must be >= 0");
    for (int64_t t = 0; t < T; ++t) {
      const int64_t src = t + 1;  // logits at t predict the label at t + 1
      const bool target = src < T && src >= pl[b] && (!k || k[b * T + src]);
      o[b * T + t] = target ? l[b * T + src] : -100;
    }
  }
  return out;
}

}  // namespace

Tensor sft_labels(const Tensor& labels, const Tensor& prompt_lengths, const Tensor& padding_mask) {
  return sft_labels_as("sft_labels", labels, prompt_lengths, padding_mask);
}

// out = mean over targets of -log_softmax(logits[b, t])[labels[b, t + 1]]   (backward: the fused CE's)
Tensor sft_loss(const Tensor& logits, const Tensor& labels, const Tensor& prompt_lengths, const Tensor& padding_mask,
                double num_items_in_batch) {
  const char* op = "sft_loss";
  detail::check_float(logits, op, "logits");
  check(logits.dim() == 3, op, ": logits must be [B, T, V], got ", shape_str(logits.shape()));
  check(labels.defined() && labels.dim() == 2 && labels.size(0) == logits.size(0) && labels.size(1) == logits.size(1),
        op, ": logits ", shape_str(logits.shape()), " and labels ",
        labels.defined() ? shape_str(labels.shape()).str() : "(undefined)", " do not match (labels must be [B, T])");
  check(num_items_in_batch >= 0, op, ": num_items_in_batch must be >= 0, got ", num_items_in_batch);
  const Tensor targets = sft_labels_as(op, labels, prompt_lengths, padding_mask);
  if (num_items_in_batch > 0)
    return detail::cross_entropy_as(op, logits, targets, -100, Reduction::Sum, 0.0) / num_items_in_batch;
  return detail::cross_entropy_as(op, logits, targets, -100, Reduction::Mean, 0.0);
}

Tensor sft_loss_from_hidden(const Tensor& hidden, const Tensor& head_weight, const Tensor& labels,
                            const Tensor& prompt_lengths, const Tensor& padding_mask, double num_items_in_batch) {
  const char* op = "sft_loss_from_hidden";
  check(hidden.defined() && hidden.dim() == 3 && labels.defined() && labels.dim() == 2 &&
            hidden.size(0) == labels.size(0) && hidden.size(1) == labels.size(1),
        op, ": hidden must be [B, T, C] beside labels [B, T], got ", hidden.defined() ? shape_str(hidden.shape()).str() : "(undefined)",
        " and ", labels.defined() ? shape_str(labels.shape()).str() : "(undefined)");
  check(num_items_in_batch >= 0, op, ": num_items_in_batch must be >= 0, got ", num_items_in_batch);
  const Tensor targets = sft_labels_as(op, labels, prompt_lengths, padding_mask);
  if (num_items_in_batch > 0) return linear_cross_entropy(hidden, head_weight, targets, -100, Reduction::Sum) / num_items_in_batch;
  return linear_cross_entropy(hidden, head_weight, targets, -100, Reduction::Mean);
}

}  // namespace xg::losses

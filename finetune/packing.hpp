// Packing for SFT and DPO (padding-free training, as TRL's packing with
// padding_free=True and Hugging Face's DataCollatorWithFlattening): whole sequences are placed
// back to back in rows of one fixed length, so that every step has the same shape (its
// memory the same at every step) and few tokens are padding. A sequence attends to itself
// only (nn::DecoderLM::forward_packed, by position_ids that restart at 0), so the loss of a
// sequence is the one it gets alone in a row.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "finetune/dataset.hpp"

namespace xg::finetune {

// One packed row of row_len tokens: sequences back to back, then padding.
struct PackedRow {
  std::vector<int64_t> ids;           // [row_len]; padding is the format's PAD
  std::vector<int64_t> labels;        // [row_len]: the response tokens; -100 on prompts, first tokens, padding
  std::vector<int64_t> position_ids;  // [row_len]: 0, 1, ... from each sequence's start (padding: one more run)
  std::vector<std::array<int64_t, 2>> spans;  // each sequence's {start, length}, in order
};

// Rows of row_len tokens by best-fit decreasing (TRL's packing_strategy="bfd"): sequences
// longest first, each into the row with the least room that holds it, a new row when none
// does. SFT: every row is cut to row_len as collate_sft cuts it. DPO: a pair's chosen and
// rejected sequences share a row (chosen, then rejected: spans 2i and 2i + 1 of the pair's
// row are one pair), so each is cut to row_len / 2. Deterministic: the same rows give the
// same packing. xg::Error when there are no rows or row_len is too small (SFT >= 2, DPO >= 4).
std::vector<PackedRow> pack_sft(const RowFormat& format, const std::vector<SftExample>& rows, int64_t row_len);
std::vector<PackedRow> pack_dpo(const RowFormat& format, const std::vector<DpoExample>& rows, int64_t row_len);

// Packed rows as tensors for DecoderLM::forward_packed and the losses.
struct PackedBatch {
  Tensor input_ids;     // [R, L] int64
  Tensor labels;        // [R, L] int64 (-100 = not a target); losses::shift_labels aligns them with the logits
  Tensor position_ids;  // [R, L] int64
  // Every sequence's {row, start, length}, row by row (DPO: pair i is sequences 2i, 2i + 1).
  std::vector<std::array<int64_t, 3>> spans;
  int64_t real_tokens = 0;  // tokens that are not padding
};
PackedBatch collate_packed(const std::vector<PackedRow>& rows);

// Summed response log-probs of each sequence of a packed batch: token_logprobs [R, L] of the
// unshifted logits against shift_labels(labels) (zero off the targets) -> [S], one per span,
// in spans' order. Differentiable; one product with a 0/1 [S, R * L] selection.
Tensor span_logprob_sums(const Tensor& token_logps, const PackedBatch& batch);

}  // namespace xg::finetune

// One prompt + response as token ids, truncated: shared by the padded collation
// (finetune/dataset.cpp) and packing (finetune/packing.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/dataset.hpp"

namespace xg::finetune {

struct Seq {
  std::vector<int64_t> ids;    // prompt, then response (with EOS unless cut); or a whole conversation
  std::vector<uint8_t> train;  // per id: 1 = the loss trains on it
  int64_t prompt_len = 0;      // leading ids never trained on
};

// The row's ids cut to max_len (>= 2) as collate_sft does: the leading ids not trained on keep
// their first min(len, max_len - 1), the rest its first ids up to max_len in total.
Seq make_seq(const RowFormat& format, const SftExample& row, int64_t max_len);

}  // namespace xg::finetune

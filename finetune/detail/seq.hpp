// One prompt + response as token ids, truncated: shared by the padded collation
// (finetune/dataset.cpp) and packing (finetune/packing.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finetune/dataset.hpp"

namespace xg::finetune {

struct Seq {
  std::vector<int64_t> ids;  // prompt, then response (with EOS unless cut)
  int64_t prompt_len = 0;    // leading ids that are the prompt (never trained on)
};

// The row's ids cut to max_len (>= 2) as collate_sft does: the prompt keeps its first
// min(len, max_len - 1) tokens, the response its first tokens up to max_len in total.
Seq make_seq(const RowFormat& format, const std::string& prompt, const std::string& response, int64_t max_len);

}  // namespace xg::finetune

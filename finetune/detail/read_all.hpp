// A data file read whole, with the errors the finetune readers share (internal to finetune/):
// defined in dataset.cpp, used by TextDataset and the JSONL readers.
#pragma once

#include <string>

namespace xg::finetune {

// The bytes of `path`; a folder, an unopenable file or a read error is an xg::Error naming it.
std::string read_all(const std::string& path);

}  // namespace xg::finetune

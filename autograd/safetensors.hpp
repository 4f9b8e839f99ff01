// safetensors files (https://github.com/huggingface/safetensors format): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, and
// raw little-endian data. Reading validates the format and names the file and the rule
// broken; writing goes to a temporary file renamed into place.
#pragma once

#include <map>
#include <string>

#include "autograd/tensor.hpp"

namespace xg {

using TensorMap = std::map<std::string, Tensor>;

// Reads every tensor (F32, F64, I64, BOOL; also I32/F16/BF16 widened to int64/float32).
TensorMap load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);
// Writes tensors in name order; `metadata` goes under "__metadata__".
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace xg

// Internal to io/: where a weight file's values cross into a tensor. Both readers (safetensors,
// GGUF) widen a chunk of a tensor to float32 and hand it here, which checks every value and
// stores it in the destination's dtype: float32 as it is, bfloat16 rounded (torch's .to), q8_0
// and q4_0 quantized (ggml's rules). A NaN or Inf in a weight file is refused here, at load and before any
// work, naming the file, the tensor and the element (a low-precision file's NaN used to pass
// silently into the model and show up only as a NaN logit or loss).
#pragma once

#include <cstdint>
#include <string>

#include "autograd/tensor.hpp"

namespace xg::io::detail {

// v: elements at..at + len of tensor `name` of `file`, as float32. dst: float32, bfloat16,
// float16, q8_0 or q4_0 (for q8_0 and q4_0, at and len multiples of 32). Throws xg::Error "<file>: tensor '<name>' element <i> is nan ...".
void store_floats(const float* v, int64_t at, int64_t len, const Tensor& dst, const std::string& file,
                  const std::string& name);
// Throws like store_floats when one of v[0..len) (elements at..) is NaN or Inf.
void check_finite(const float* v, int64_t at, int64_t len, const std::string& file, const std::string& name);
void check_finite(const double* v, int64_t at, int64_t len, const std::string& file, const std::string& name);

}  // namespace xg::io::detail

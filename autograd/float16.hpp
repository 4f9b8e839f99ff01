// bfloat16 and IEEE half (float16) bits <-> float: the rounding of torch's .to(torch.bfloat16)
// and numpy's astype(float16), round to nearest even. File formats store these (safetensors
// BF16/F16, GGUF F16/BF16 and Q8_0's scales); the tensor core converts with them.
#pragma once

#include <cstdint>

namespace xg {

// Round to nearest even; NaN stays a quiet NaN.
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);
// Round to nearest even; beyond 65504 rounds to infinity, NaN stays NaN; subnormals kept.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

}  // namespace xg

// GGUF tensor types that xgrad reads but does not compute with: llama.cpp's 2- and 3-bit
// k-quants, super-blocks of 256 values with 4- or 6-bit scales for each 16 of them (Q2_K, Q3_K;
// ggml PR #1684), found in a file's Q2_K or Q3_K_M mix. They are widened to float32 as they are
// read, as ggml's dequantize_row_* (ggml/src/ggml-quants.c) widens them, bit for bit; the block
// layouts are ggml-common.h's. (Every other block type is kept as stored: autograd/blocks.hpp.)
#pragma once

#include <cstdint>

#include "io/gguf.hpp"

namespace xg::io::detail {

// n values (a whole number of the type's blocks) of a read-only block type at p, widened into out.
void dequantize_ggml(GgmlType type, const char* p, int64_t n, float* out);

}  // namespace xg::io::detail

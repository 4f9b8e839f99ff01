// GGUF tensor types that xgrad reads but does not compute with: llama.cpp's legacy 32-value
// blocks with an offset or a fifth bit (Q4_1, Q5_0, Q5_1) and its k-quants, super-blocks of 256
// values with 4- to 8-bit scales for each 16 or 32 of them (Q2_K ... Q6_K; ggml PR #1684). A
// file's Q4_K_M, Q5_K_M, Q3_K_M or Q2_K mix is made of these (with Q6_K for the output head in
// most of them, and in a Q4_0 file of a real model too). They are widened to float32 as they are
// read, as ggml's dequantize_row_* (ggml/src/ggml-quants.c) widens them, bit for bit; the
// block layouts are ggml-common.h's.
#pragma once

#include <cstdint>

#include "io/gguf.hpp"

namespace xg::io::detail {

// n values (a whole number of the type's blocks) of a read-only block type at p, widened into out.
void dequantize_ggml(GgmlType type, const char* p, int64_t n, float* out);

}  // namespace xg::io::detail

// q8_0: frozen weights in 8 bits, ggml's block_q8_0 (ggml-common.h) as GGUF files store it.
// Each block holds 32 consecutive values of a row: an IEEE half scale d, then 32 int8 q, and
// stands for x = d * q (34 bytes for 32 values, 1.0625 bytes a value). A kQ8_0 tensor's last
// dim is a whole number of blocks; its storage is the blocks in row-major order, so a GGUF Q8_0
// tensor loads by copying its bytes.
//
// What reads it: Tensor::to (quantize, dequantize), linear and matmul with a q8_0 weight (its
// blocks widened tile by tile inside the product, never as a whole float copy; a weight never
// gets a gradient: it is a frozen base's), embedding (rows widened): blocks.hpp, shared with
// q4_0. Every other op refuses it.
#pragma once

#include <cstdint>

namespace xg {

// Quantizes n values (n a multiple of 32) into n / 32 blocks at `out`, as ggml's
// quantize_row_q8_0_ref: d = max|x| / 127 rounded to half, q = round(x / d) with 1/d taken
// from the unrounded d, halves away from zero. Returns -1, or the first element of the first
// block it cannot hold (a NaN or Inf, or a scale beyond half's 65504); `out` is then not a
// tensor to keep. The blocks run on the threads (AVX-512 within a block).
int64_t quantize_q8_0(const float* x, int64_t n, void* out);
// Widens n values (n / 32 blocks) to float or double: exactly d * q.
void dequantize_q8_0(const void* blocks, int64_t n, float* out);
void dequantize_q8_0(const void* blocks, int64_t n, double* out);

}  // namespace xg

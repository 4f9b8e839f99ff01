// q4_0: frozen weights in 4 bits, ggml's block_q4_0 (ggml-common.h) as GGUF files store it.
// Each block holds 32 consecutive values of a row: an IEEE half scale d, then 16 bytes whose low
// nibbles are values 0..15 and high nibbles values 16..31, each a code c in 0..15 standing for
// x = d (c - 8) (18 bytes for 32 values, 0.5625 bytes a value). A kQ4_0 tensor's last dim is a
// whole number of blocks; its storage is the blocks in row-major order, so a GGUF Q4_0 tensor
// loads by copying its bytes. The products, lookups and conversions that read it are q8_0's
// (blocks.hpp), each block widened as above.
#pragma once

#include <cstdint>

namespace xg {

// Quantizes n values (n a multiple of 32) into n / 32 blocks at `out`, as ggml's
// quantize_row_q4_0_ref: max is the block's value of largest magnitude (the first, on a tie),
// d = max / -8 rounded to half, c = min(15, trunc(x * (1/d) + 8.5)) with 1/d from the unrounded d
// (so max itself is code 0 and -max code 15, clamped from 16). Returns -1, or the first element of
// the first block it cannot hold (a NaN or Inf, or a scale beyond half's 65504); `out` is then not
// a tensor to keep. The blocks run on the threads (AVX-512 within a block).
int64_t quantize_q4_0(const float* x, int64_t n, void* out);
// Widens n values (n / 32 blocks) to float or double: exactly d * (c - 8).
void dequantize_q4_0(const void* blocks, int64_t n, float* out);
void dequantize_q4_0(const void* blocks, int64_t n, double* out);

}  // namespace xg

// q8_0: frozen weights in 8 bits, ggml's block_q8_0 (ggml-common.h) as GGUF files store it.
// Each block holds 32 consecutive values of a row: an IEEE half scale d, then 32 int8 q, and
// stands for x = d * q (34 bytes for 32 values, 1.0625 bytes a value). A kQ8_0 tensor's last
// dim is a whole number of blocks; its storage is the blocks in row-major order, so a GGUF Q8_0
// tensor loads by copying its bytes.
//
// What reads it: Tensor::to (quantize, dequantize), linear and matmul with a q8_0 weight (its
// blocks widened tile by tile inside the product, never as a whole float copy; a weight never
// gets a gradient: it is a frozen base's), embedding (rows widened). Every other op refuses it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "autograd/tensor.hpp"

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
// The first of `count` blocks whose scale is NaN or Inf, or -1: such a block makes every value
// of its 32 NaN or Inf (or NaN where q = 0), which a file's reader must refuse.
int64_t first_nonfinite_q8_0_scale(const void* blocks, int64_t count);

namespace detail {
// y = x w^T + b with w [out, in] q8_0 and x [..., in] float32 or float64 (linear's case for a
// q8_0 weight): a tile of w's rows widened at a time.   =>   dx = g w (w widened likewise),
// db = the sum of g's rows; w gets no gradient (an error if it requires one).
Tensor linear_q8_0(const Tensor& x, const Tensor& w, const Tensor& b, const char* op);
// y = a w with a [..., n] float32 or float64 and w [n, m] q8_0 (matmul's case).   =>   da = g w^T
Tensor matmul_q8_0(const Tensor& a, const Tensor& w, const char* op);
// Rows ids of w [V, C] q8_0, widened: [ids..., C] float32 (embedding's case; no gradient for w).
Tensor embedding_q8_0(const Tensor& w, const Tensor& ids);
}  // namespace detail

}  // namespace xg

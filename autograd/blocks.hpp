// Quantized blocks by dtype: q8_0 (q8_0.hpp), q4_0 (q4_0.hpp), the k-quants q2_k ... q6_k
// (detail/k_formats.hpp), q4_1, q5_0, q5_1 (detail/legacy_formats.hpp) and iq4_nl, iq4_xs
// (detail/iq4_formats.hpp; these ten read from GGUF files, never made here), ggml's block layouts for
// frozen weights, and float16 (detail/f16_format.hpp: IEEE halves, 32 to a "block"). What the tensor core, the file readers and writers call without caring which
// of them a tensor is, and the products and lookups that read such a weight (each widens a
// tile of the weight at a time, never the whole of it; a weight never gets a gradient: it is a
// frozen base's). Every other op refuses a blocked tensor.
#pragma once

#include <cstdint>

#include "autograd/tensor.hpp"

namespace xg {

// quantize_blocks: d is kQ8_0 or kQ4_0 (anything else is an xg::Error), n a multiple of 32; the
// others take any blocked d, n a multiple of its block (32, or 256 for the k-quants).
// quantize_blocks: -1, or the first element of the first block d cannot hold (a NaN or Inf, or
// a scale beyond half's range); dequantize_blocks: exactly the values the blocks stand for.
int64_t quantize_blocks(Dtype d, const float* x, int64_t n, void* out);
void dequantize_blocks(Dtype d, const void* data, int64_t n, float* out);
void dequantize_blocks(Dtype d, const void* data, int64_t n, double* out);
// The first of `count` blocks whose half scale (or its min's, where it has one) is NaN or Inf, or -1:
// such a block makes its values NaN or Inf, which a file's reader must refuse.
int64_t first_nonfinite_block_scale(Dtype d, const void* data, int64_t count);

namespace detail {
// y = x w^T + b with w [out, in] blocked and x [..., in] float32 or float64 (linear's case for a
// blocked weight): a tile of w's rows widened at a time.   =>   dx = g w (w widened likewise),
// db = the sum of g's rows; w gets no gradient (an error if it requires one).
Tensor linear_blocked(const Tensor& x, const Tensor& w, const Tensor& b, const char* op);
// y = a w with a [..., n] float32 or float64 and w [n, m] blocked (matmul's case).   =>   da = g w^T
Tensor matmul_blocked(const Tensor& a, const Tensor& w, const char* op);
// Rows ids of w [V, C] blocked, widened: [ids..., C] float32 (embedding's case; no gradient for w).
Tensor embedding_blocked(const Tensor& w, const Tensor& ids);
}  // namespace detail

}  // namespace xg

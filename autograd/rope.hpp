// Rotary position embedding (RoPE) as one fused op: rotates each pair of a head's features
// by position * frequency, in LLaMA's interleaved layout or the rotate-half layout.
#pragma once

#include <utility>

#include "autograd/tensor.hpp"

namespace xg {

// Which features form a rotated pair (i = 0 .. hs/2 - 1):
//   Interleaved: (x[2i], x[2i+1])   -- RoFormer's pairs (Su et al.), Meta LLaMA's view_as_complex
//   RotateHalf:  (x[i], x[i + hs/2]) -- x * cos + rotate_half(x) * sin (GPT-NeoX, Hugging Face)
enum class RopeLayout { Interleaved, RotateHalf };

// x: [..., T, hs], cos/sin: [max_T, hs/2] (x's dtype) -> [..., T, hs]. Position t of x uses
// table row offset + t (cached decoding passes the number of tokens already seen). Each pair
// (a, b) becomes (a cos - b sin, b cos + a sin).
//   =>   dx = the inverse rotation of g;  dcos, dsin summed over the rows of each position
//        (only when the tables require grad, which rope_tables' do not)
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t offset, RopeLayout layout);

// The tables of both layouts: freqs[i] = 1 / base^(2i / head_dim), angles = outer(t, freqs) for
// t = 0 .. max_seq_len - 1; returns (cos(angles), sin(angles)), each [max_seq_len, head_dim/2],
// computed in float64 and rounded once to `dtype`.
std::pair<Tensor, Tensor> rope_tables(int64_t head_dim, int64_t max_seq_len, double base = 10000.0,
                                      Dtype dtype = kFloat32);

const char* rope_layout_name(RopeLayout layout);  // "interleaved" / "rotate_half"

}  // namespace xg

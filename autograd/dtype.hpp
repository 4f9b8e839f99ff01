// Runtime element types of a Tensor. float32 is the default, float64 is for gradient
// checks, bfloat16 stores weights and activations in half the bytes (low precision, see
// bfloat16.hpp), int64 holds indices and targets, bool holds masks. q8_0 and q4_0 hold frozen
// weights in 8 and 4 bits (q8_0.hpp, q4_0.hpp): blocks of 32 values along the last dim, in
// ggml's block_q8_0 and block_q4_0 layouts. q2_k, q3_k, q4_k, q5_k and q6_k hold a GGUF file's
// k-quant weights as the file stores them (ggml's block_q2_K ... block_q6_K: super-blocks of 256
// values, about 2.6, 3.4, 4.5, 5.5 and 6.6 bits a value), and q4_1, q5_0 and q5_1 its other 32-value
// blocks (block_q4_1, block_q5_0, block_q5_1: 5, 5.5 and 6 bits a value, the types llama.cpp's
// k-quant mixes fall back to for rows that are not whole super-blocks), and iq4_nl and iq4_xs its
// non-linear 4-bit blocks (block_iq4_nl, block_iq4_xs: 4.5 and 4.25 bits a value, codes that pick
// one of 16 fixed levels); xgrad reads these ten but does not make them (is_read_only_blocked).
// float16 holds frozen weights as IEEE halves, a float16 folder's or a GGUF's F16 tensors as
// stored: in blocks of 32 values (64 bytes, nothing else) so that the block formats' products
// and lookups read it; unlike bfloat16 it is not computed on, only read by those and to().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "autograd/bfloat16.hpp"

namespace xg {

enum class Dtype {
  Float32, Float64, Int64, Bool, BFloat16,
  Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, F16  // blocked
};

constexpr Dtype kFloat32 = Dtype::Float32;
constexpr Dtype kFloat64 = Dtype::Float64;
constexpr Dtype kInt64 = Dtype::Int64;
constexpr Dtype kBool = Dtype::Bool;
constexpr Dtype kBFloat16 = Dtype::BFloat16;
constexpr Dtype kQ8_0 = Dtype::Q8_0;
constexpr Dtype kQ4_0 = Dtype::Q4_0;
constexpr Dtype kQ4_K = Dtype::Q4_K;
constexpr Dtype kQ5_K = Dtype::Q5_K;
constexpr Dtype kQ6_K = Dtype::Q6_K;
constexpr Dtype kQ4_1 = Dtype::Q4_1;
constexpr Dtype kQ5_0 = Dtype::Q5_0;
constexpr Dtype kQ5_1 = Dtype::Q5_1;
constexpr Dtype kIQ4_NL = Dtype::IQ4_NL;
constexpr Dtype kIQ4_XS = Dtype::IQ4_XS;
constexpr Dtype kQ2_K = Dtype::Q2_K;
constexpr Dtype kQ3_K = Dtype::Q3_K;
constexpr Dtype kF16 = Dtype::F16;
// q8_0's block: 32 values, an IEEE half scale and 32 int8 (ggml's block_q8_0).
constexpr int64_t kQ8Block = 32;
constexpr int64_t kQ8BlockBytes = 34;
// q4_0's block: 32 values, an IEEE half scale and 16 bytes of 4-bit codes (ggml's block_q4_0).
constexpr int64_t kQ4Block = 32;
constexpr int64_t kQ4BlockBytes = 18;
// The k-quants' super-block: 256 values (ggml's QK_K) in 84 (q2_k), 110 (q3_k), 144 (q4_k), 176
// (q5_k) or 210 (q6_k) bytes; iq4_xs's too, in 136.
constexpr int64_t kKBlock = 256;

// Bytes of one element; the blocked dtypes have none (their elements come in blocks): an xg::Error.
std::size_t itemsize(Dtype d);
// Bytes of `numel` elements (q8_0: numel / 32 blocks of 34 bytes, q4_0: of 18, q4_k: numel / 256
// super-blocks of 144; numel a multiple of the block).
std::size_t storage_bytes(Dtype d, int64_t numel);
// "float32", "float64", "int64", "bool", "bfloat16" (torch's names), "q8_0", "q4_0", "q4_k", "q5_k",
// "q6_k", "q4_1", "q5_0", "q5_1", "iq4_nl", "iq4_xs", "q2_k", "q3_k", "float16"
const char* dtype_name(Dtype d);
inline bool is_k_quant(Dtype d) {
  return d == Dtype::Q2_K || d == Dtype::Q3_K || d == Dtype::Q4_K || d == Dtype::Q5_K || d == Dtype::Q6_K;
}
// The blocked dtypes xgrad reads from GGUF files but does not make (to() refuses them).
inline bool is_read_only_blocked(Dtype d) {
  return is_k_quant(d) || d == Dtype::Q4_1 || d == Dtype::Q5_0 || d == Dtype::Q5_1 || d == Dtype::IQ4_NL ||
         d == Dtype::IQ4_XS;
}
inline bool is_blocked(Dtype d) {
  return d == Dtype::Q8_0 || d == Dtype::Q4_0 || d == Dtype::F16 || is_read_only_blocked(d);
}
// A blocked dtype's values per block (32, or 256 for the k-quants and iq4_xs) and bytes per block;
// 0 for any other dtype.
inline int64_t block_values(Dtype d) {
  return is_k_quant(d) || d == Dtype::IQ4_XS ? kKBlock : is_blocked(d) ? kQ8Block : 0;
}
inline int64_t block_bytes(Dtype d) {
  switch (d) {
    case Dtype::Q8_0: return kQ8BlockBytes;
    case Dtype::Q4_0: return kQ4BlockBytes;
    case Dtype::Q4_K: return 144;
    case Dtype::Q5_K: return 176;
    case Dtype::Q6_K: return 210;
    case Dtype::Q4_1: return 20;
    case Dtype::Q5_0: return 22;
    case Dtype::Q5_1: return 24;
    case Dtype::IQ4_NL: return 18;
    case Dtype::IQ4_XS: return 136;
    case Dtype::Q2_K: return 84;
    case Dtype::Q3_K: return 110;
    case Dtype::F16: return 64;
    default: return 0;
  }
}
inline bool is_floating(Dtype d) { return d == Dtype::Float32 || d == Dtype::Float64 || d == Dtype::BFloat16; }

// The Dtype of a C++ element type: dtype_of<float>() == kFloat32.
template <class T> constexpr Dtype dtype_of();
template <> constexpr Dtype dtype_of<float>() { return Dtype::Float32; }
template <> constexpr Dtype dtype_of<double>() { return Dtype::Float64; }
template <> constexpr Dtype dtype_of<int64_t>() { return Dtype::Int64; }
template <> constexpr Dtype dtype_of<bool>() { return Dtype::Bool; }
template <> constexpr Dtype dtype_of<bfloat16>() { return Dtype::BFloat16; }

}  // namespace xg

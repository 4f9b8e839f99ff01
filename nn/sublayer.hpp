// The three sublayer families of a Transformer block, each one interface: Norm, Attention and
// FeedForward, and the settings a block shares with all of them (SublayerContext). A kind
// (LayerNorm, GQA, SwiGLU, ...) is a module deriving from its family's base plus a spec
// struct that builds it; nn/registry.hpp lists the kinds (nn/README.md: adding one).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "autograd/attention.hpp"
#include "autograd/rope.hpp"
#include "nn/module.hpp"

namespace xg::nn {

struct KVCache;  // nn/attention.hpp

// A normalisation over the last dim: [..., dim] -> [..., dim].
class Norm : public UnaryModule {};

// Self-attention over a sequence, with an optional per-layer KV cache.
class Attention : public Module {
 public:
  // x: [B, T, d_model] -> [B, T, d_model]. mask: bool keep-mask and/or additive float mask
  // and/or causal (AttnMask). With a cache, x's tokens sit at start_pos (-1: after the cached
  // ones; a smaller value first rolls the cache back to there) and are appended to it; without
  // one, start_pos (-1 or 0: from 0) offsets the RoPE positions.
  virtual Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                         int64_t start_pos = -1) const = 0;
  Tensor operator()(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                    int64_t start_pos = -1) const {
    return forward(x, mask, cache, start_pos);
  }
  // KV-cache bytes per token at `bytes_per_element` bytes per cached number.
  virtual int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const = 0;
};

// What a routed FFN returns besides its output: aux_loss is its load-balancing loss times
// its coefficient (0-d), undefined for a dense FFN.
struct FFNOutput {
  Tensor out;       // [..., d_model]
  Tensor aux_loss;  // 0-d, or undefined
};

// Token-wise [..., d_model] -> [..., d_model]: the two-layer FFN, SwiGLU, MoE.
class FeedForward : public UnaryModule {
 public:
  // The block's call: the output and, for a mixture of experts, its auxiliary loss.
  virtual FFNOutput forward_with_aux(const Tensor& x) const { return {forward(x), Tensor()}; }
  virtual int64_t d_model() const = 0;
  virtual int64_t d_ff() const = 0;
};

// What a block decides for all of its sublayers; a spec's build() takes it beside the
// spec's own fields, so that d_model or the RoPE settings are written once per block.
struct SublayerContext {
  int64_t d_model = 0;
  double dropout = 0.0;   // on the attention weights
  double norm_eps = 1e-6; // of the block's norms, and so of QK-Norm
  bool rope = false;      // RoPE on q and k (PositionKind::RoPE)
  RopeLayout rope_layout = RopeLayout::RotateHalf;
  double rope_base = 10000.0;
  RopeScaling rope_scaling;    // of RoPE's frequencies (Llama 3.1); GQA and MHA only
  int64_t max_seq_len = 2048;  // rows of the RoPE tables
};

// An enum's names in config files: specialise EnumNames<E> with `values`, a std::array of
// {value, name} pairs, beside the enum's spec (nn/registry.hpp reads and writes them).
template <class E>
struct EnumNames;

template <class E>
const char* enum_name(E e) {
  for (const auto& [v, n] : EnumNames<E>::values)
    if (v == e) return n;
  return "?";
}

template <>
struct EnumNames<RopeScalingKind> {
  static constexpr std::array<std::pair<RopeScalingKind, const char*>, 2> values{
      {{RopeScalingKind::None, "none"}, {RopeScalingKind::Llama3, "llama3"}}};
};

template <>
struct EnumNames<RopeLayout> {
  static constexpr std::array<std::pair<RopeLayout, const char*>, 2> values{
      {{RopeLayout::Interleaved, "interleaved"}, {RopeLayout::RotateHalf, "rotate_half"}}};
};

}  // namespace xg::nn

// The three sublayer families of a Transformer block, each one interface: Norm, Attention and
// FeedForward, and the settings a block shares with all of them (SublayerContext). A kind
// (LayerNorm, GQA, SwiGLU, ...) is a spec struct plus the module built from it (its
// constructor takes the spec and the SublayerContext); nn/registry.hpp lists the kinds
// (nn/README.md: adding one). What other formats need to know of a sublayer (RoPE rows, head
// counts, an FFN's shape) is asked here, so that interop code never names a kind.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "autograd/attention.hpp"
#include "autograd/rope.hpp"
#include "nn/module.hpp"

namespace xg::nn {

struct KVCache;  // nn/attention_parts.hpp

// A normalisation over the last dim: [..., dim] -> [..., dim].
class Norm : public UnaryModule {};

// The rows of a parameter that hold RoPE-rotated features: heads x head_dim of them, each
// head's features in the attention's RoPE layout.
struct RopeRows {
  int64_t n_heads = 0;
  int64_t head_dim = 0;
};

// Where an attention's RoPE-rotated features sit in its parameters, so that a checkpoint stored
// in the other RoPE layout is converted by permuting their rows (nn/naming.hpp: state dicts,
// finetune/gguf_export.hpp: LoRA adapters).
struct RopeParams {
  RopeLayout layout = RopeLayout::RotateHalf;  // the pair order q and k are rotated in
  // Parameter name relative to the attention ("w_q.weight", "q_norm.weight") -> its rows.
  std::map<std::string, RopeRows> rows;
  // false: some rotated features share rows with unrotated ones (MLA's per-head RoPE keys sit
  // inside kv_up_proj), so the weights can be stored in `layout` only.
  bool permutable = true;
};

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
  // RoPE's layout and rows in the parameters; nullopt when the attention applies no RoPE.
  virtual std::optional<RopeParams> rope_params() const { return std::nullopt; }
};

// Any module's RoPE layout and rows: an attention's rope_params(), nullopt for other modules.
inline std::optional<RopeParams> rope_params_of(const Module& m) {
  const auto* attention = dynamic_cast<const Attention*>(&m);
  return attention ? attention->rope_params() : std::nullopt;
}

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

// What a block decides for all of its sublayers; a module's constructor (and so its spec's
// build()) takes it beside the spec's own fields, so that d_model or the RoPE settings are
// written once per block.
struct SublayerContext {
  int64_t d_model = 0;
  double dropout = 0.0;   // on the attention weights
  double norm_eps = 1e-6; // of the block's norms, and so of QK-Norm
  bool norm_unit_offset = false;  // the block's RMSNorms scale by 1 + weight (Gemma), QK-Norm's too
  bool rope = false;      // RoPE on q and k (PositionKind::RoPE)
  RopeLayout rope_layout = RopeLayout::RotateHalf;
  double rope_base = 10000.0;
  RopeScaling rope_scaling;    // of RoPE's frequencies (Llama 3.1); GQA and MHA only
  int64_t max_seq_len = 2048;  // rows of the RoPE tables
  // > 0: a query attends to the last sliding_window positions only, itself included (Mistral,
  // Gemma 2's local layers); 0: to every earlier position. GQA and MHA with RoPE only.
  int64_t sliding_window = 0;
};

// An attention as grouped-query attention lays it out: w_q [n_heads head_dim, d_model], w_k and
// w_v [n_kv_heads head_dim, d_model], w_o [d_model, n_heads head_dim], RoPE (when the block
// uses it) on every feature of a head, QK-Norm an option. What Hugging Face's Llama-family
// configs and llama.cpp's GGUF metadata describe; an attention spec's gqa_shape(ctx) gives it,
// or nullopt when the kind is laid out otherwise (MLA).
struct GQAShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // resolved: no 0 for a default
  bool qkv_bias = false;  // on w_q, w_k, w_v
  bool out_bias = false;  // on w_o
  bool qk_norm = false;
  double scale = 0;    // of the scores; 0: 1/sqrt(head_dim)
  double softcap = 0;  // > 0: scores = softcap * tanh(scores / softcap) before the mask (Gemma 2)
};

// A dense FFN as checkpoint configs describe one: down(act(gate(x)) * up(x)) when gated,
// down(act(up(x))) when not, with up and gate [d_ff, d_model] and down [d_model, d_ff]. An
// FFN spec's dense_shape(ctx) gives it, or nullopt for a routed FFN (MoE).
struct DenseFFNShape {
  int64_t d_ff = 0;  // resolved: no 0 for a default
  bool gated = false;
  std::string activation;  // "silu", or an Activation's name ("relu", "gelu", "gelu_tanh")
  bool bias = false;
};

// An enum's names in config files: specialise EnumNames<E> with `values`, a std::array of
// {value, name} pairs, beside the enum's spec (nn/registry.hpp reads and writes them).
template <class E>
struct EnumNames;

// A config.json field added after its kind's first version: a file that leaves it out keeps the
// default, the model such files described, so readers do not require it. In a visit function:
// f("softcap", later(s.softcap)).
template <class T>
struct Later {
  T& value;
};
template <class T>
Later<T> later(T& v) {
  return Later<T>{v};
}

template <class E>
const char* enum_name(E e) {
  for (const auto& [v, n] : EnumNames<E>::values)
    if (v == e) return n;
  return "?";
}

template <>
struct EnumNames<RopeScalingKind> {
  static constexpr std::array<std::pair<RopeScalingKind, const char*>, 5> values{
      {{RopeScalingKind::None, "none"},
       {RopeScalingKind::Llama3, "llama3"},
       {RopeScalingKind::Linear, "linear"},
       {RopeScalingKind::Dynamic, "dynamic"},
       {RopeScalingKind::Yarn, "yarn"}}};
};

template <>
struct EnumNames<RopeLayout> {
  static constexpr std::array<std::pair<RopeLayout, const char*>, 2> values{
      {{RopeLayout::Interleaved, "interleaved"}, {RopeLayout::RotateHalf, "rotate_half"}}};
};

}  // namespace xg::nn

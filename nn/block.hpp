// The configurable Transformer block: norm position (Post, Pre, DeepNorm) around one norm,
// one attention and one FFN sublayer, each of any registered kind (nn/registry.hpp:
// LayerNorm/RMSNorm; MHA, GQA/MQA, MLA, QK-Norm; MLP, SwiGLU, MoE), RoPE inside the attention.
// The original Transformer's block and a LLaMA-style block are two presets of it.
#pragma once

#include <memory>
#include <string>

#include "nn/registry.hpp"

namespace xg::nn {

enum class NormPosition {
  Post,      // x = norm(x + f(x))                  (the original Transformer, Vaswani et al. 2017)
  Pre,       // x = x + f(norm(x))                  (GPT-2, LLaMA)
  DeepNorm,  // x = norm(alpha x + f(x)), alpha = (2N)^(1/4), init gain beta = (8N)^(-1/4) (DeepNet)
  Sandwich,  // x = x + post_norm(f(norm(x)))       (Gemma 2 and 3: a second norm on each output)
};
// Sinusoidal and Learned are added to the token embeddings by the LM (DecoderLM's "pos"), not
// in the block; RoPE is applied to q and k inside the attention; None uses no positions.
enum class PositionKind { Sinusoidal, Learned, RoPE, None };
// The block's norm children: "norm1"/"norm2" after the original Transformer's block, or
// "norm_attn"/"norm_ffn" (LLaMA-style code). Either way the sublayers are "attention" and "ffn".
enum class BlockNaming { Teaching, LLaMA };

template <>
struct EnumNames<NormPosition> {
  static constexpr std::array<std::pair<NormPosition, const char*>, 4> values{
      {{NormPosition::Post, "post"}, {NormPosition::Pre, "pre"}, {NormPosition::DeepNorm, "deepnorm"},
       {NormPosition::Sandwich, "sandwich"}}};
};
template <>
struct EnumNames<PositionKind> {
  static constexpr std::array<std::pair<PositionKind, const char*>, 4> values{
      {{PositionKind::Sinusoidal, "sinusoidal"}, {PositionKind::Learned, "learned"}, {PositionKind::RoPE, "rope"},
       {PositionKind::None, "none"}}};
};
template <>
struct EnumNames<BlockNaming> {
  static constexpr std::array<std::pair<BlockNaming, const char*>, 2> values{
      {{BlockNaming::Teaching, "teaching"}, {BlockNaming::LLaMA, "llama"}}};
};

const char* norm_position_name(NormPosition p);  // "post", "pre", "deepnorm"
const char* position_kind_name(PositionKind k);  // "sinusoidal", "learned", "rope", "none"
const char* block_naming_name(BlockNaming n);    // "teaching", "llama"

// A block: the norm position and positions it uses, and one spec per sublayer family
// (nn/registry.hpp), each holding that kind's own options. Defaults: a GPT-2-style block
// (Pre-Norm, LayerNorm, GELU MLP with bias, MHA with bias, learned positions).
//   BlockConfig b;  b.attention = GQASpec{};  std::get<GQASpec>(b.attention).n_kv_heads = 2;
struct BlockConfig {
  int64_t d_model = 512;
  NormPosition norm_position = NormPosition::Pre;
  int64_t n_layers = 1;  // N of DeepNorm's alpha and beta (DecoderLM sets it to its n_layers)
  NormSpec norm = LayerNormSpec{};          // both block norms; its eps is QK-Norm's too
  AttentionSpec attention = MHASpec{};
  FFNSpec ffn = MLPSpec{};

  PositionKind position = PositionKind::Learned;
  RopeLayout rope_layout = RopeLayout::RotateHalf;
  double rope_base = 10000.0;
  // A rescaling of RoPE's frequencies (Llama 3.1's "llama3"); GQA and MHA attention only. In
  // config.json "rope_scaling": {"kind": "llama3", "factor": .., "low_freq_factor": ..,
  // "high_freq_factor": .., "original_max_seq_len": ..}, written only when active.
  RopeScaling rope_scaling;
  int64_t max_seq_len = 2048;  // of the position tables (and of RoPE)
  // > 0: each query attends to the last sliding_window positions only (SublayerContext); 0: all.
  int64_t sliding_window = 0;

  double dropout = 0.0;  // on the attention weights and on each sublayer's output
  BlockNaming naming = BlockNaming::Teaching;

  // The original Transformer's block as teaching code writes it: Post-Norm, LayerNorm (eps
  // 1e-5), ReLU MLP (fc1, fc2), multi-head attention with bias, sinusoidal positions;
  // children attention, ffn, norm1, norm2.
  static BlockConfig teaching(int64_t d_model, int64_t n_heads);
  // A LLaMA-style block: Pre-Norm, RMSNorm (eps 1e-6), SwiGLU (W_gate, W_up, W_down),
  // grouped-query attention with RoPE on interleaved pairs (Meta's LLaMA layout), no bias;
  // children norm_attn, attention, norm_ffn, ffn.
  static BlockConfig llama(int64_t d_model, int64_t n_heads, int64_t n_kv_heads);

  int64_t n_heads() const;  // the attention spec's
  // The settings the block passes to each sublayer's build().
  SublayerContext context() const;
  // Throws xg::Error naming `who`, the field and the rule broken.
  void validate(const std::string& who = "BlockConfig") const;

  // The block's own scalar fields, in config.json order (the specs have theirs).
  template <class Self, class F>
  static void visit(Self& c, F&& f) {
    f("d_model", c.d_model);
    f("norm_position", c.norm_position);
    f("position", c.position);
    f("rope_layout", c.rope_layout);
    f("rope_base", c.rope_base);
    f("max_seq_len", c.max_seq_len);
    f("dropout", c.dropout);
    f("naming", c.naming);
    f("sliding_window", later(c.sliding_window));
  }
  // rope_scaling's fields, in config.json order.
  template <class Self, class F>
  static void visit_rope_scaling(Self& r, F&& f) {
    f("kind", r.kind);
    f("factor", r.factor);
    f("low_freq_factor", r.low_freq_factor);
    f("high_freq_factor", r.high_freq_factor);
    f("original_max_seq_len", r.original_max_seq_len);
    f("beta_fast", later(r.beta_fast));
    f("beta_slow", later(r.beta_slow));
    f("attention_factor", later(r.attention_factor));
    f("truncate", later(r.truncate));
  }
};

struct BlockOutput {
  Tensor out;       // [B, T, d_model]
  Tensor aux_loss;  // 0-d MoE load-balancing loss (already times its coefficient); undefined otherwise
};

class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const BlockConfig& config);
  // x: [B, T, d_model] -> [B, T, d_model]. mask and cache go to the attention; with a cache,
  // x's tokens sit at start_pos (-1: after the cached ones); without one, start_pos (-1 or 0:
  // from 0) offsets RoPE's positions.
  BlockOutput forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                      int64_t start_pos = -1) const;
  BlockOutput operator()(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                         int64_t start_pos = -1) const {
    return forward(x, mask, cache, start_pos);
  }

  const BlockConfig& config() const { return config_; }
  // DeepNorm's residual scale alpha = (2N)^(1/4) and init gain beta = (8N)^(-1/4) for a
  // decoder of N layers (DeepNet, Wang et al. 2022, table 1: decoder-only).
  static double deepnorm_alpha(int64_t n_layers);
  static double deepnorm_beta(int64_t n_layers);
  double residual_scale() const { return alpha_; }  // alpha with DeepNorm, 1 otherwise
  // KV-cache bytes per token of this block's attention.
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const;

  const std::shared_ptr<Attention>& attention() const { return attention_; }
  const std::shared_ptr<FeedForward>& ffn() const { return ffn_; }
  const std::shared_ptr<Norm>& norm1() const { return norm1_; }  // before/after the attention
  const std::shared_ptr<Norm>& norm2() const { return norm2_; }  // before/after the FFN
  // Sandwich only: on the attention's and the FFN's outputs (post_norm_attn / post_norm_ffn,
  // or post_norm1 / post_norm2 under the teaching naming); null otherwise.
  const std::shared_ptr<Norm>& post_norm1() const { return post_norm1_; }
  const std::shared_ptr<Norm>& post_norm2() const { return post_norm2_; }
  std::string name() const override { return "TransformerBlock"; }
  std::string extra_repr() const override;

 private:
  void deepnorm_init();

  BlockConfig config_;
  double alpha_ = 1.0;
  std::shared_ptr<Attention> attention_;
  std::shared_ptr<FeedForward> ffn_;
  std::shared_ptr<Norm> norm1_, norm2_, post_norm1_, post_norm2_;
};

}  // namespace xg::nn

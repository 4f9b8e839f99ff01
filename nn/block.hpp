// The configurable Transformer block: norm position (Post, Pre, DeepNorm), norm kind
// (LayerNorm, RMSNorm), FFN kind (ReLU, GELU, SwiGLU, MoE), attention kind (MHA, GQA/MQA, MLA,
// QK-Norm) and RoPE inside the attention. The first seed's teaching block (§0) and its
// LLaMA block (§5) are two configurations of it (BlockConfig::teaching / ::llama).
#pragma once

#include <memory>
#include <string>

#include "nn/attention.hpp"
#include "nn/ffn.hpp"
#include "nn/norm.hpp"

namespace xg::nn {

enum class NormPosition {
  Post,      // x = norm(x + f(x))                  (the original Transformer, the teaching block)
  Pre,       // x = x + f(norm(x))                  (GPT-2, LLaMA)
  DeepNorm,  // x = norm(alpha x + f(x)), alpha = (2N)^(1/4), init gain beta = (8N)^(-1/4) (DeepNet)
};
enum class NormKind { LayerNorm, RMSNorm };
enum class FFNKind { ReLU, GELU, SwiGLU, MoE };
enum class AttentionKind { MHA, GQA, MLA };  // MQA = GQA with n_kv_heads = 1
// Sinusoidal and Learned are added to the token embeddings by the LM (DecoderLM's "pos"), not
// in the block; RoPE is applied to q and k inside the attention; None uses no positions.
enum class PositionKind { Sinusoidal, Learned, RoPE, None };
// The block's norm children: "norm1"/"norm2" (the teaching block) or "norm_attn"/"norm_ffn"
// (the LLaMA block). Either way the sublayers are "attention" and "ffn".
enum class BlockNaming { Teaching, LLaMA };

const char* norm_position_name(NormPosition p);  // "post", "pre", "deepnorm"
const char* norm_kind_name(NormKind k);          // "layernorm", "rmsnorm"
const char* ffn_kind_name(FFNKind k);            // "relu", "gelu", "swiglu", "moe"
const char* attention_kind_name(AttentionKind k);  // "mha", "gqa", "mla"
const char* position_kind_name(PositionKind k);  // "sinusoidal", "learned", "rope", "none"
const char* block_naming_name(BlockNaming n);    // "teaching", "llama"

// Defaults: a GPT-2-style block (Pre-Norm, LayerNorm, GELU, MHA, learned positions, bias).
struct BlockConfig {
  int64_t d_model = 512;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 0;  // GQA: 0 = n_heads; 1 = MQA; must divide n_heads
  int64_t d_ff = 0;        // 0: the FFN kind's default (4 d_model; SwiGLU::default_d_ff for SwiGLU)

  NormPosition norm_position = NormPosition::Pre;
  int64_t n_layers = 1;  // N of DeepNorm's alpha and beta (DecoderLM sets it to its n_layers)
  NormKind norm = NormKind::LayerNorm;
  double norm_eps = 1e-5;  // of the block norms and of QK-Norm

  FFNKind ffn = FFNKind::GELU;
  FFNNaming ffn_naming = FFNNaming::FC;              // ReLU/GELU: fc1, fc2 (the first seed)
  SwiGLUNaming swiglu_naming = SwiGLUNaming::Seed;   // SwiGLU: W_gate, W_up, W_down (the first seed)
  int64_t num_experts = 8;                           // MoE
  int64_t top_k = 2;                                 // MoE
  double moe_aux_loss_coef = 0.01;                   // MoE
  ExpertKind moe_expert = ExpertKind::FFN;           // MoE: ReLU FFN experts with bias (the second seed)

  AttentionKind attention = AttentionKind::MHA;
  bool qk_norm = false;  // RMSNorm of each head's q and k (MHA/GQA)
  // MLA (MultiLatentAttentionOptions): 0 picks the default noted.
  int64_t mla_head_dim = 0;         // 0: d_model / n_heads
  int64_t mla_latent_dim = 0;       // 0: 4 * head_dim (DeepSeek-V2's 512 for 128)
  int64_t mla_rope_dim = 0;         // with RoPE; 0: head_dim / 2 (DeepSeek-V2's 64 for 128)
  int64_t mla_q_latent_dim = -1;    // -1: latent_dim, 0: no q compression
  bool mla_decoupled_rope_key = false;

  PositionKind position = PositionKind::Learned;
  RopeLayout rope_layout = RopeLayout::RotateHalf;
  double rope_base = 10000.0;
  int64_t max_seq_len = 2048;  // of the position tables (and of RoPE)

  double dropout = 0.0;  // on the attention weights and on each sublayer's output
  bool bias = true;      // on every Linear of the attention and of a ReLU/GELU/SwiGLU FFN
  BlockNaming naming = BlockNaming::Teaching;

  // The first seed's teaching block (§0): Post-Norm, LayerNorm (eps 1e-5), ReLU FFN (fc1, fc2),
  // multi-head attention with bias, sinusoidal positions; children attention, ffn, norm1, norm2.
  static BlockConfig teaching(int64_t d_model, int64_t n_heads);
  // The first seed's LLaMA block (§5): Pre-Norm, RMSNorm (eps 1e-6), SwiGLU (W_gate, W_up,
  // W_down), grouped-query attention with RoPE (interleaved pairs, the first seed's §4.1 and
  // LLaMA's), no bias; children norm_attn, attention, norm_ffn, ffn.
  static BlockConfig llama(int64_t d_model, int64_t n_heads, int64_t n_kv_heads);

  // Throws xg::Error naming `who`, the field and the rule broken.
  void validate(const std::string& who = "BlockConfig") const;
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

  const std::shared_ptr<Module>& attention() const { return attention_; }
  const std::shared_ptr<Module>& ffn() const { return ffn_; }
  const std::shared_ptr<Module>& norm1() const { return norm1_; }  // before/after the attention
  const std::shared_ptr<Module>& norm2() const { return norm2_; }  // before/after the FFN
  std::string name() const override { return "TransformerBlock"; }
  std::string extra_repr() const override;

 private:
  Tensor attend(const Tensor& h, const AttnMask& mask, KVCache* cache, int64_t start_pos) const;
  void deepnorm_init();

  BlockConfig config_;
  double alpha_ = 1.0;
  std::shared_ptr<Module> attention_, ffn_, norm1_, norm2_;
  // The same modules, typed (one of each group is set).
  std::shared_ptr<MultiHeadAttention> mha_;
  std::shared_ptr<GroupedQueryAttention> gqa_;
  std::shared_ptr<MultiLatentAttention> mla_;
  std::shared_ptr<FeedForward> dense_ffn_;
  std::shared_ptr<MoE> moe_;
};

// A norm module of the given kind over d_model (LayerNorm or RMSNorm), and applying one.
std::shared_ptr<Module> make_norm(NormKind kind, int64_t dim, double eps);
Tensor apply_norm(const Module& norm, const Tensor& x);

}  // namespace xg::nn

// Multi-head latent attention (DeepSeek-V2): keys and values from a low-rank latent, the one
// thing the KV cache keeps, with a decoupled RoPE part of q and k; and its block spec "mla".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "nn/attention_parts.hpp"
#include "nn/position.hpp"

namespace xg::nn {

// "mla": multi-head latent attention. 0 picks the default noted. Its fields are its
// config.json fields; d_model, the dropout on the weights and RoPE (its layout, base and
// table length) come from the block (SublayerContext): without RoPE there is no RoPE part.
struct MLASpec {
  static constexpr const char* kind = "mla";
  int64_t n_heads = 8;
  int64_t head_dim = 0;        // content part of q and k, and the size of v, per head; 0: d_model / n_heads
  int64_t latent_dim = 0;      // c_KV, what the cache keeps per token; 0: 4 head_dim (DeepSeek-V2: 512 for 128)
  int64_t rope_dim = 0;        // RoPE part of q and k per head, with RoPE; 0: head_dim / 2 (DeepSeek-V2: 64 for 128)
  int64_t q_latent_dim = -1;   // q compression: -1 = latent_dim, 0 = none (one q_proj)
  // false (the simplified MLA of hand-written code): each head's k_rope comes out of
  //   kv_up_proj(latent) and is rotated at its position, so the cache keeps the latent alone;
  // true (DeepSeek-V2): one k_rope shared by all heads from its own projection of x
  //   (k_rope_proj), cached after RoPE beside the latent: latent_dim + rope_dim per token.
  bool decoupled_rope_key = false;
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("n_heads", s.n_heads);
    f("head_dim", s.head_dim);
    f("latent_dim", s.latent_dim);
    f("rope_dim", s.rope_dim);
    f("q_latent_dim", s.q_latent_dim);
    f("decoupled_rope_key", s.decoupled_rope_key);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Attention> build(const SublayerContext& ctx) const;
  std::optional<GQAShape> gqa_shape(const SublayerContext&) const { return std::nullopt; }  // its own layout
  // latent_dim (+ rope_dim with decoupled_rope_key) elements per token.
  int64_t kv_cache_bytes_per_token(const SublayerContext& ctx, int64_t bytes_per_element) const;
};

// Attribute names of the projections. A module-only choice (hand-written code's names), not a
// config.json field: a constructor argument, not a spec field.
enum class LatentAttentionNaming {
  // kv_down_proj, kv_up_proj (fused k_content | k_rope | v per head), q_down_proj, q_up_proj
  // (or q_proj without q compression), k_rope_proj (decoupled key), o_proj: the *_proj names
  // of DeepSeek-style hand-written MLA
  Projections,
  // W_q, W_kv_down, W_k_up, W_v_up, W_o: the minimal low-rank-KV attention of teaching code
  // (no RoPE, no q compression: needs ctx.rope off and q_latent_dim = 0)
  Capitalized,
};

// q = [q_content, rope(q_rope)] and k = [k_content, rope(k_rope)] per head (scores are the sum
// of a content and a position dot product), v from the latent; softmax scale
// 1/sqrt(head_dim + rope_dim); out = o_proj(concat of the heads' [head_dim] outputs).
class MultiLatentAttention : public Attention {
 public:
  MultiLatentAttention(const MLASpec& spec, const SublayerContext& ctx,
                       LatentAttentionNaming naming = LatentAttentionNaming::Projections);
  // x: [B, T, d_model] -> [B, T, d_model] (the Attention interface's cache and start_pos).
  Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                 int64_t start_pos = -1) const override;
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const override;
  // With RoPE: its layout, not permutable (each head's RoPE rows sit beside content rows).
  std::optional<RopeParams> rope_params() const override;
  const MLASpec& spec() const { return spec_; }  // as given (0 for the defaults)
  const SublayerContext& context() const { return ctx_; }
  int64_t d_model() const { return ctx_.d_model; }
  int64_t n_heads() const { return spec_.n_heads; }
  int64_t head_dim() const { return head_dim_; }
  int64_t latent_dim() const { return latent_dim_; }
  int64_t rope_dim() const { return rope_dim_; }  // 0 without RoPE
  int64_t q_latent_dim() const { return q_latent_dim_; }
  std::string name() const override { return "MultiLatentAttention"; }
  std::string extra_repr() const override;

 private:
  // k [B, H, L, head_dim + rope_dim] and v [B, H, L, head_dim] from the latents of positions
  // 0 .. L-1 (and the cached, rotated shared k_rope when decoupled).
  std::pair<Tensor, Tensor> keys_values(const Tensor& latent, const Tensor& k_rope_shared) const;

  MLASpec spec_;
  SublayerContext ctx_;
  int64_t head_dim_, latent_dim_, rope_dim_, q_latent_dim_;
  std::shared_ptr<Linear> q_down_, q_up_, q_proj_;     // q_proj_ without q compression
  std::shared_ptr<Linear> kv_down_, kv_up_, k_up_, v_up_;  // kv_up_ (Projections) or k_up_, v_up_ (Capitalized)
  std::shared_ptr<Linear> k_rope_proj_, o_proj_;
  std::shared_ptr<RotaryEmbedding> rope_;
};

}  // namespace xg::nn

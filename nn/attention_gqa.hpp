// Grouped-query attention (Ainslie et al. 2023; MQA at one kv head) with QK-Norm, RoPE, q/k/v
// biases and a head width of its own as options, and its block spec "gqa".
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "nn/attention_parts.hpp"
#include "nn/norm.hpp"
#include "nn/position.hpp"

namespace xg::nn {

// "gqa": grouped-query attention (MQA with n_kv_heads = 1), LLaMA-2/3, Mistral, Qwen2/3. Its
// fields are its config.json fields; d_model, the dropout on the weights, RoPE (on q and k
// of each head, positions start_pos ..) and QK-Norm's eps come from the block
// (SublayerContext).
struct GQASpec {
  static constexpr const char* kind = "gqa";
  int64_t n_heads = 8;
  int64_t n_kv_heads = 0;  // 0: n_heads (MHA), 1: MQA; must divide n_heads
  // Features per head; 0: d_model / n_heads. Set it to decouple the heads' width from d_model
  // (Qwen3: hidden 1024 with 16 heads of 128): q is [n_heads * head_dim], k and v
  // [n_kv_heads * head_dim], and w_o maps n_heads * head_dim back to d_model.
  int64_t head_dim = 0;
  bool qkv_bias = false;  // on w_q, w_k, w_v (LLaMA has none; Qwen2 has them)
  bool out_bias = false;  // on w_o (nn.Linear's default is true: hand-written GQA code often has it)
  // QK-Norm (Henry et al. 2020; Dehghani et al. 2023): RMSNorm q_norm / k_norm over each
  // head's features, applied after the projection and before RoPE (Qwen3).
  bool qk_norm = false;
  // The scores' scale; 0: 1/sqrt(head_dim). Gemma 2: query_pre_attn_scalar^-1/2.
  double scale = 0;
  // > 0: the scores (scaled) become softcap * tanh(scores / softcap) before the mask (Gemma 2's
  // attn_logit_softcapping); the attention then runs op by op, not in the fused kernel.
  double softcap = 0;
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("n_heads", s.n_heads);
    f("n_kv_heads", s.n_kv_heads);
    f("head_dim", s.head_dim);
    f("qkv_bias", s.qkv_bias);
    f("out_bias", s.out_bias);
    f("qk_norm", s.qk_norm);
    f("scale", later(s.scale));
    f("softcap", later(s.softcap));
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Attention> build(const SublayerContext& ctx) const;
  // Its heads with the defaults resolved (n_kv_heads, head_dim).
  std::optional<GQAShape> gqa_shape(const SublayerContext& ctx) const;
  // The spec of attention laid out as `shape` in a block of width d_model (head_dim 0 when it
  // is d_model / n_heads): what another format's GQA-shaped attention reads as.
  static GQASpec of(const GQAShape& shape, int64_t d_model);
  // K and V of the kv heads: 2 n_kv_heads head_dim elements per token.
  int64_t kv_cache_bytes_per_token(const SublayerContext& ctx, int64_t bytes_per_element) const;
};

// Attribute names of the projections. A module-only choice (hand-written code's names), not a
// config.json field: a constructor argument, not a spec field.
enum class AttentionNaming {
  Lowercase,  // w_q, w_k, w_v, w_o: the usual names of hand-written MHA/GQA (MultiHeadAttention's)
  Uppercase,  // W_q, W_k, W_v, W_o: the capitalised matrix names other hand-written GQA uses
};

// Query heads h = 0 .. n_heads-1 share kv head h / (n_heads / n_kv_heads) (repeat_kv's
// order); the kernel indexes the shared heads instead of repeating them.
// NOTE: some hand-written GQA expands k, v as k[:, :, None].expand(B, S, q_per_group,
// n_kv_heads, d).reshape(B, S, n_heads, d), which pairs query head h with kv head
// h % n_kv_heads; we follow repeat_kv's order (as LLaMA and PyTorch's enable_gqa do), so
// weights from such code load but its heads pair differently.
class GroupedQueryAttention : public Attention {
 public:
  GroupedQueryAttention(const GQASpec& spec, const SublayerContext& ctx,
                        AttentionNaming naming = AttentionNaming::Lowercase);
  // x: [B, T, d_model] -> [B, T, d_model] (the Attention interface's cache and start_pos).
  Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                 int64_t start_pos = -1) const override;
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const override;
  // With RoPE: w_q's rows (weight and bias) are n_heads heads, w_k's n_kv_heads, q_norm's and
  // k_norm's weights one head.
  std::optional<RopeParams> rope_params() const override;
  const GQASpec& spec() const { return spec_; }  // as given (0 for the defaults)
  const SublayerContext& context() const { return ctx_; }
  int64_t d_model() const { return ctx_.d_model; }
  int64_t n_heads() const { return spec_.n_heads; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  const std::shared_ptr<Linear>& w_q() const { return w_q_; }
  const std::shared_ptr<Linear>& w_k() const { return w_k_; }
  const std::shared_ptr<Linear>& w_v() const { return w_v_; }
  const std::shared_ptr<Linear>& w_o() const { return w_o_; }
  const std::shared_ptr<RMSNorm>& q_norm() const { return q_norm_; }  // null without qk_norm
  const std::shared_ptr<RMSNorm>& k_norm() const { return k_norm_; }
  std::string name() const override { return "GroupedQueryAttention"; }
  std::string extra_repr() const override;

 private:
  GQASpec spec_;
  SublayerContext ctx_;
  AttentionNaming naming_;
  int64_t n_kv_heads_, head_dim_;
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
  std::shared_ptr<RMSNorm> q_norm_, k_norm_;
  std::shared_ptr<RotaryEmbedding> rope_;
};

}  // namespace xg::nn

// Multi-head attention (Vaswani et al. 2017), self and cross, and its block spec "mha" (which
// builds a GroupedQueryAttention when the block asks for RoPE or QK-Norm).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "nn/attention_parts.hpp"

namespace xg::nn {

// "mha": multi-head attention, w_q, w_k, w_v, w_o all with or without bias. With RoPE or
// QK-Norm it is built as a GroupedQueryAttention with n_kv_heads = n_heads (the same
// parameters under the same names). Its fields are its config.json fields.
struct MHASpec {
  static constexpr const char* kind = "mha";
  int64_t n_heads = 8;
  bool bias = true;
  bool qk_norm = false;
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("n_heads", s.n_heads);
    f("bias", s.bias);
    f("qk_norm", s.qk_norm);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Attention> build(const SublayerContext& ctx) const;
  std::optional<GQAShape> gqa_shape(const SublayerContext& ctx) const;
  // K and V of every head: 2 d_model elements per token.
  int64_t kv_cache_bytes_per_token(const SublayerContext& ctx, int64_t bytes_per_element) const;
};

// out = w_o(concat_h softmax(q_h k_h^T / sqrt(hs) + mask) v_h), q = w_q(x_query),
// k = w_k(x_context), v = w_v(x_context); self-attention when x_context is undefined.
// Parameters w_q, w_k, w_v, w_o: Linear(d_model, d_model, bias). Dropout on the weights.
// NOTE: hand-written MHA classes often default dropout to 0.1 (the original Transformer's
// rate); ours defaults to 0, as torch.nn.MultiheadAttention's does.
class MultiHeadAttention : public Attention {
 public:
  // torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, bias), for use outside a block
  // (cross-attention).
  MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout = 0.0, bool bias = true);
  // The block's: d_model and dropout from ctx; RoPE and QK-Norm are GroupedQueryAttention's
  // (MHASpec::build picks it), so ctx.rope and spec.qk_norm must be off.
  MultiHeadAttention(const MHASpec& spec, const SublayerContext& ctx);
  // Self-attention (the Attention interface): forward(x, x) below.
  Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                 int64_t start_pos = -1) const override {
    return forward(x, Tensor(), mask, cache, start_pos);
  }
  // x_query: [B, Tq, d_model], x_context: [B, Tk, d_model] (cross-attention) or undefined
  // (self-attention) -> [B, Tq, d_model]. With a cache (self-attention only), x's keys and
  // values are appended at position start_pos (-1: the cache's length; a smaller value first
  // drops the cached tokens from there on).
  Tensor forward(const Tensor& x_query, const Tensor& x_context, const AttnMask& mask = {},
                 KVCache* cache = nullptr, int64_t start_pos = -1) const;
  Tensor operator()(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                    int64_t start_pos = -1) const {
    return forward(x, Tensor(), mask, cache, start_pos);
  }
  Tensor operator()(const Tensor& x_query, const Tensor& x_context, const AttnMask& mask = {},
                    KVCache* cache = nullptr, int64_t start_pos = -1) const {
    return forward(x_query, x_context, mask, cache, start_pos);
  }
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const override;
  const std::shared_ptr<Linear>& w_q() const { return w_q_; }
  const std::shared_ptr<Linear>& w_k() const { return w_k_; }
  const std::shared_ptr<Linear>& w_v() const { return w_v_; }
  const std::shared_ptr<Linear>& w_o() const { return w_o_; }
  int64_t d_model() const { return d_model_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t head_dim() const { return head_dim_; }
  std::string name() const override { return "MultiHeadAttention"; }
  std::string extra_repr() const override;

 private:
  int64_t d_model_, n_heads_, head_dim_;
  double dropout_;
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
};

}  // namespace xg::nn

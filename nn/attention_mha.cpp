// MultiHeadAttention and MHASpec.
#include "nn/attention_mha.hpp"

#include "autograd/shape.hpp"
#include "nn/attention_gqa.hpp"

namespace xg::nn {

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout, bool bias)
    : d_model_(d_model), n_heads_(n_heads), head_dim_(0), dropout_(dropout) {
  check(d_model > 0 && n_heads > 0, "MultiHeadAttention: d_model and n_heads must be positive, got ", d_model, " and ",
        n_heads);
  check(d_model % n_heads == 0, "MultiHeadAttention: d_model ", d_model, " is not divisible by n_heads ", n_heads);
  check(dropout >= 0 && dropout < 1, "MultiHeadAttention: dropout must be in [0, 1), got ", dropout);
  head_dim_ = d_model / n_heads;
  w_q_ = register_module("w_q", std::make_shared<Linear>(d_model, d_model, bias));
  w_k_ = register_module("w_k", std::make_shared<Linear>(d_model, d_model, bias));
  w_v_ = register_module("w_v", std::make_shared<Linear>(d_model, d_model, bias));
  w_o_ = register_module("w_o", std::make_shared<Linear>(d_model, d_model, bias));
}

MultiHeadAttention::MultiHeadAttention(const MHASpec& spec, const SublayerContext& ctx)
    : MultiHeadAttention(ctx.d_model, spec.n_heads, ctx.dropout, spec.bias) {
  check(!ctx.rope && !spec.qk_norm && ctx.sliding_window == 0,
        "MultiHeadAttention: RoPE, qk_norm and a sliding window are GroupedQueryAttention's ",
        "(MHASpec::build builds one with n_kv_heads = n_heads)");
}

Tensor MultiHeadAttention::forward(const Tensor& x_query, const Tensor& x_context, const AttnMask& mask,
                                   KVCache* cache, int64_t start_pos) const {
  const std::string who = str_cat("MultiHeadAttention(d_model=", d_model_, ", n_heads=", n_heads_, ")");
  check_attention_input(x_query, d_model_, who, "x_query");
  const bool self = !x_context.defined();
  if (!self) {
    check_attention_input(x_context, d_model_, who, "x_context");
    check(x_context.size(0) == x_query.size(0), who, ": x_query ", shape_str(x_query.shape()), " and x_context ",
          shape_str(x_context.shape()), " have different batch sizes");
  }
  check(self || !cache, who, ": a KV cache is for self-attention (x_context must be undefined)");
  if (self && can_pack(*w_q_, *w_k_, *w_v_, cache)) {  // one projection, read in place (as GQA's)
    const int64_t B = x_query.size(0), T = x_query.size(1);
    Tensor qkv = reshape(linear_stacked(x_query, {w_q_.get(), w_k_.get(), w_v_.get()}), {B, T, 3 * n_heads_, head_dim_});
    return w_o_->forward(scaled_dot_product_attention_packed(qkv, n_heads_, n_heads_, mask, dropout_, is_training()));
  }
  const Tensor& ctx = self ? x_query : x_context;
  Tensor q = split_heads(w_q_->forward(x_query), n_heads_);
  Tensor k = split_heads(w_k_->forward(ctx), n_heads_);
  Tensor v = split_heads(w_v_->forward(ctx), n_heads_);
  if (cache) {
    const int64_t pos = start_position(cache, start_pos, who);
    return w_o_->forward(merge_heads(attend_cached(*cache, q, k, v, pos, mask, dropout_, is_training(), who)));
  }
  Tensor out = scaled_dot_product_attention(q, k, v, mask, dropout_, is_training());
  return w_o_->forward(merge_heads(out));
}

int64_t MultiHeadAttention::kv_cache_bytes_per_token(int64_t bytes_per_element) const {
  return 2 * d_model_ * bytes_per_element;
}

std::string MultiHeadAttention::extra_repr() const {
  return str_cat("d_model=", d_model_, ", n_heads=", n_heads_, ", head_dim=", head_dim_, ", dropout=", dropout_);
}

// ---------------------------------------------------------------------------------------------
// MHASpec

void MHASpec::validate(const SublayerContext& ctx, const std::string& who) const {
  check_heads(n_heads, who);
  check_split(ctx, n_heads, who);
  check_rope_dim(ctx, ctx.d_model / n_heads, who);
}

std::shared_ptr<Attention> MHASpec::build(const SublayerContext& ctx) const {
  // GroupedQueryAttention computes RoPE, QK-Norm and the sliding window.
  if (!ctx.rope && !qk_norm && ctx.sliding_window == 0) return std::make_shared<MultiHeadAttention>(*this, ctx);
  return std::make_shared<GroupedQueryAttention>(GQASpec::of(*gqa_shape(ctx), ctx.d_model), ctx);
}

std::optional<GQAShape> MHASpec::gqa_shape(const SublayerContext& ctx) const {
  return GQAShape{n_heads, n_heads, ctx.d_model / n_heads, bias, bias, qk_norm, 0, 0};
}

int64_t MHASpec::kv_cache_bytes_per_token(const SublayerContext& ctx, int64_t bytes_per_element) const {
  return 2 * ctx.d_model * bytes_per_element;
}

}  // namespace xg::nn

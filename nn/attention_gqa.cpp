// GroupedQueryAttention and GQASpec.
#include "nn/attention_gqa.hpp"

#include <cmath>
#include <tuple>

#include "autograd/shape.hpp"

namespace xg::nn {

GroupedQueryAttention::GroupedQueryAttention(const GQASpec& spec, const SublayerContext& ctx, AttentionNaming naming)
    : spec_(spec), ctx_(ctx), naming_(naming), n_kv_heads_(spec.n_kv_heads == 0 ? spec.n_heads : spec.n_kv_heads),
      head_dim_(0) {
  const int64_t d = ctx.d_model, H = spec.n_heads, Hkv = n_kv_heads_;
  check(d > 0 && H > 0 && Hkv > 0, "GroupedQueryAttention: d_model, n_heads and n_kv_heads must be positive, got ", d,
        ", ", H, ", ", Hkv);
  check(spec.head_dim >= 0, "GroupedQueryAttention: head_dim must be >= 0 (0 = d_model / n_heads), got ", spec.head_dim);
  check(spec.head_dim > 0 || d % H == 0, "GroupedQueryAttention: d_model ", d, " is not divisible by n_heads ", H,
        " (or set head_dim)");
  check(H % Hkv == 0, "GroupedQueryAttention: n_heads ", H, " is not divisible by n_kv_heads ", Hkv);
  check(ctx.dropout >= 0 && ctx.dropout < 1, "GroupedQueryAttention: dropout must be in [0, 1), got ", ctx.dropout);
  head_dim_ = spec.head_dim > 0 ? spec.head_dim : d / H;
  check(!ctx.rope || head_dim_ % 2 == 0, "GroupedQueryAttention: RoPE needs an even head_dim, got ", head_dim_);
  const bool upper = naming == AttentionNaming::Uppercase;
  const int64_t q_dim = H * head_dim_, kv_dim = Hkv * head_dim_;
  w_q_ = register_module(upper ? "W_q" : "w_q", std::make_shared<Linear>(d, q_dim, spec.qkv_bias));
  w_k_ = register_module(upper ? "W_k" : "w_k", std::make_shared<Linear>(d, kv_dim, spec.qkv_bias));
  w_v_ = register_module(upper ? "W_v" : "w_v", std::make_shared<Linear>(d, kv_dim, spec.qkv_bias));
  w_o_ = register_module(upper ? "W_o" : "w_o", std::make_shared<Linear>(q_dim, d, spec.out_bias));
  if (spec.qk_norm) {
    q_norm_ = register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, ctx.norm_eps, ctx.norm_unit_offset));
    k_norm_ = register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, ctx.norm_eps, ctx.norm_unit_offset));
  }
  if (ctx.rope)
    rope_ = register_module("rope", std::make_shared<RotaryEmbedding>(head_dim_, ctx.max_seq_len, ctx.rope_base,
                                                                      ctx.rope_layout, kFloat32, ctx.rope_scaling));
}

Tensor GroupedQueryAttention::forward(const Tensor& x, const AttnMask& mask, KVCache* cache,
                                      int64_t start_pos) const {
  const int64_t H = spec_.n_heads, Hkv = n_kv_heads_;
  const double dropout = ctx_.dropout;
  const std::string who =
      str_cat("GroupedQueryAttention(d_model=", ctx_.d_model, ", n_heads=", H, ", n_kv_heads=", Hkv, ")");
  check_attention_input(x, ctx_.d_model, who);
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t pos = start_position(cache, start_pos, who);
  const int64_t window = ctx_.sliding_window, keys = cache ? pos + T : T;
  // Keys at positions 0.. of the cache, or at x's own positions.
  const AttnMask m = windowed_mask(mask, window, T, keys, pos, cache ? 0 : pos, who);
  const double scale = spec_.scale;
  if (!q_norm_ && spec_.softcap == 0 && can_pack(*w_q_, *w_k_, *w_v_, cache)) {
    // One projection [B, T, Hq + 2 Hkv, hs], RoPE on its query and key heads, attention read in
    // place and written as [B, T, Hq hs]: no head splits, merges or dx sums.
    Tensor qkv = reshape(linear_stacked(x, {w_q_.get(), w_k_.get(), w_v_.get()}), {B, T, H + 2 * Hkv, head_dim_});
    if (rope_) qkv = rope_->forward_packed(qkv, pos, H + Hkv);
    return w_o_->forward(scaled_dot_product_attention_packed(qkv, H, Hkv, m, dropout, is_training(), scale));
  }
  // [B, T, heads * hs] -> [B, T, heads, hs] (QK-Norm over hs) -> [B, heads, T, hs] (RoPE)
  Tensor q = reshape(w_q_->forward(x), {B, T, H, head_dim_});
  Tensor k = reshape(w_k_->forward(x), {B, T, Hkv, head_dim_});
  Tensor v = transpose(reshape(w_v_->forward(x), {B, T, Hkv, head_dim_}), 1, 2);
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = transpose(q, 1, 2);
  k = transpose(k, 1, 2);
  if (rope_) {
    q = rope_->forward(q, pos);
    k = rope_->forward(k, pos);
  }
  if (spec_.softcap > 0) {
    if (cache) std::tie(k, v) = store_cached(*cache, k, v, pos, who);
    return w_o_->forward(merge_heads(softcapped_attention(q, k, v, m, scale, spec_.softcap, dropout, is_training())));
  }
  if (cache)
    return w_o_->forward(merge_heads(attend_cached(*cache, q, k, v, pos, m, dropout, is_training(), who, scale)));
  Tensor out = scaled_dot_product_attention(q, k, v, m, dropout, is_training(), scale);
  return w_o_->forward(merge_heads(out));
}

int64_t GroupedQueryAttention::kv_cache_bytes_per_token(int64_t bytes_per_element) const {
  return 2 * n_kv_heads_ * head_dim_ * bytes_per_element;
}

std::optional<RopeParams> GroupedQueryAttention::rope_params() const {
  if (!rope_) return std::nullopt;
  RopeParams p;
  p.layout = ctx_.rope_layout;
  const bool upper = naming_ == AttentionNaming::Uppercase;
  for (const auto& [proj, name, n_heads] : {std::tuple{w_q_.get(), upper ? "W_q" : "w_q", spec_.n_heads},
                                          std::tuple{w_k_.get(), upper ? "W_k" : "w_k", n_kv_heads_}}) {
    p.rows[str_cat(name, ".weight")] = RopeRows{n_heads, head_dim_};
    if (proj->bias().defined()) p.rows[str_cat(name, ".bias")] = RopeRows{n_heads, head_dim_};
  }
  if (q_norm_) p.rows["q_norm.weight"] = p.rows["k_norm.weight"] = RopeRows{1, head_dim_};
  return p;
}

std::string GroupedQueryAttention::extra_repr() const {
  std::string s = str_cat("d_model=", ctx_.d_model, ", n_heads=", spec_.n_heads, ", n_kv_heads=", n_kv_heads_,
                          ", head_dim=", head_dim_);
  if (ctx_.dropout > 0) s += str_cat(", dropout=", ctx_.dropout);
  if (spec_.qk_norm) s += ", qk_norm=true";
  if (spec_.scale > 0) s += str_cat(", scale=", spec_.scale);
  if (spec_.softcap > 0) s += str_cat(", softcap=", spec_.softcap);
  if (ctx_.sliding_window > 0) s += str_cat(", sliding_window=", ctx_.sliding_window);
  if (rope_) s += str_cat(", rope=", rope_layout_name(ctx_.rope_layout));
  return s;
}

// ---------------------------------------------------------------------------------------------
// GQASpec

void GQASpec::validate(const SublayerContext& ctx, const std::string& who) const {
  check_heads(n_heads, who);
  check(n_kv_heads >= 0, who, ": field 'attention.n_kv_heads' must be >= 0 (0 = n_heads), got ", n_kv_heads);
  check(n_kv_heads == 0 || n_heads % n_kv_heads == 0, who, ": field 'attention.n_kv_heads' (", n_kv_heads,
        ") must divide n_heads (", n_heads, ")");
  check(head_dim >= 0, who, ": field 'attention.head_dim' must be >= 0 (0 = d_model / n_heads), got ", head_dim);
  if (head_dim == 0) check_split(ctx, n_heads, who);
  check_rope_dim(ctx, head_dim > 0 ? head_dim : ctx.d_model / n_heads, who);
  check(std::isfinite(scale) && scale >= 0, who, ": field 'attention.scale' must be >= 0 (0 = 1/sqrt(head_dim)), got ", scale);
  check(std::isfinite(softcap) && softcap >= 0, who, ": field 'attention.softcap' must be >= 0 (0 = off), got ", softcap);
}

std::shared_ptr<Attention> GQASpec::build(const SublayerContext& ctx) const {
  return std::make_shared<GroupedQueryAttention>(*this, ctx);
}

std::optional<GQAShape> GQASpec::gqa_shape(const SublayerContext& ctx) const {
  return GQAShape{n_heads, n_kv_heads > 0 ? n_kv_heads : n_heads, head_dim > 0 ? head_dim : ctx.d_model / n_heads,
                  qkv_bias, out_bias, qk_norm, scale, softcap};
}

GQASpec GQASpec::of(const GQAShape& shape, int64_t d_model) {
  GQASpec s;
  s.n_heads = shape.n_heads;
  s.n_kv_heads = shape.n_kv_heads;
  s.head_dim = shape.head_dim == d_model / shape.n_heads && d_model % shape.n_heads == 0 ? 0 : shape.head_dim;
  s.qkv_bias = shape.qkv_bias;
  s.out_bias = shape.out_bias;
  s.qk_norm = shape.qk_norm;
  s.scale = shape.scale;
  s.softcap = shape.softcap;
  return s;
}

int64_t GQASpec::kv_cache_bytes_per_token(const SublayerContext& ctx, int64_t bytes_per_element) const {
  const GQAShape g = *gqa_shape(ctx);
  return 2 * g.n_kv_heads * g.head_dim * bytes_per_element;
}

}  // namespace xg::nn

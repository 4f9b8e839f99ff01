// MultiLatentAttention and MLASpec.
#include "nn/attention_mla.hpp"

#include "autograd/shape.hpp"

namespace xg::nn {

namespace {

// The spec's dims with its 0s resolved to the defaults noted in MLASpec (needs n_heads > 0).
struct MLADims {
  int64_t head_dim, latent_dim, rope_dim, q_latent_dim;
};
MLADims resolve(const MLASpec& s, const SublayerContext& ctx) {
  MLADims m{};
  m.head_dim = s.head_dim > 0 ? s.head_dim : ctx.d_model / s.n_heads;
  m.latent_dim = s.latent_dim > 0 ? s.latent_dim : 4 * m.head_dim;
  m.rope_dim = !ctx.rope ? 0 : s.rope_dim > 0 ? s.rope_dim : m.head_dim / 2;
  m.q_latent_dim = s.q_latent_dim < 0 ? m.latent_dim : s.q_latent_dim;
  return m;
}

}  // namespace

MultiLatentAttention::MultiLatentAttention(const MLASpec& spec, const SublayerContext& ctx, LatentAttentionNaming naming)
    : spec_(spec), ctx_(ctx), head_dim_(0), latent_dim_(0), rope_dim_(0), q_latent_dim_(0) {
  const char* who = "MultiLatentAttention";
  const int64_t d = ctx.d_model, H = spec.n_heads;
  check(d > 0 && H > 0, who, ": d_model and n_heads must be positive, got ", d, " and ", H);
  check(spec.head_dim >= 0 && spec.latent_dim >= 0 && spec.rope_dim >= 0, who,
        ": head_dim, latent_dim and rope_dim must be >= 0 (0 = the default), got ", spec.head_dim, ", ",
        spec.latent_dim, " and ", spec.rope_dim);
  check(spec.q_latent_dim >= -1, who,
        ": q_latent_dim must be -1 (= latent_dim), 0 (no q compression) or positive, got ", spec.q_latent_dim);
  const MLADims m = resolve(spec, ctx);
  head_dim_ = m.head_dim;
  latent_dim_ = m.latent_dim;
  rope_dim_ = m.rope_dim;
  q_latent_dim_ = m.q_latent_dim;
  check(head_dim_ > 0, who, ": head_dim must be positive, got ", head_dim_, " (d_model ", d, " over ", H, " heads)");
  check(rope_dim_ % 2 == 0, who, ": rope_dim must be 0 or a positive even number, got ", rope_dim_);
  check(ctx.dropout >= 0 && ctx.dropout < 1, who, ": dropout must be in [0, 1), got ", ctx.dropout);
  check(!spec.decoupled_rope_key || rope_dim_ > 0, who, ": decoupled_rope_key needs RoPE (ctx.rope)");
  check(!ctx.rope || !ctx.rope_scaling.active(), who, ": rope_scaling is supported with gqa and mha attention only");
  // NOTE: hand-written MLA classes often assert d_model % n_heads == 0, which nothing here
  // needs (head_dim is its own field), so we do not.
  const int64_t hd = head_dim_, rd = rope_dim_;
  if (naming == LatentAttentionNaming::Capitalized) {
    check(rd == 0 && q_latent_dim_ == 0, who,
          ": LatentAttentionNaming::Capitalized (W_q, W_kv_down, W_k_up, W_v_up, W_o) has no RoPE and ",
          "no q compression; build it without RoPE and with q_latent_dim = 0 (got rope_dim ", rd, " and q_latent_dim ",
          spec.q_latent_dim, ")");
    q_proj_ = register_module("W_q", std::make_shared<Linear>(d, H * hd, false));
    kv_down_ = register_module("W_kv_down", std::make_shared<Linear>(d, latent_dim_, false));
    k_up_ = register_module("W_k_up", std::make_shared<Linear>(latent_dim_, H * hd, false));
    v_up_ = register_module("W_v_up", std::make_shared<Linear>(latent_dim_, H * hd, false));
    o_proj_ = register_module("W_o", std::make_shared<Linear>(H * hd, d, false));
    return;
  }
  // Registered in the order hand-written MLA with these names uses (kv_down_proj, kv_up_proj,
  // q_down_proj, q_up_proj, rope, o_proj), so that named_parameters() walks alike.
  kv_down_ = register_module("kv_down_proj", std::make_shared<Linear>(d, latent_dim_, false));
  const int64_t kv_rope = spec.decoupled_rope_key ? 0 : rd;  // k_rope per head from the latent
  kv_up_ = register_module("kv_up_proj", std::make_shared<Linear>(latent_dim_, H * (hd + kv_rope + hd), false));
  if (spec.decoupled_rope_key)
    k_rope_proj_ = register_module("k_rope_proj", std::make_shared<Linear>(d, rd, false));
  if (q_latent_dim_ > 0) {
    q_down_ = register_module("q_down_proj", std::make_shared<Linear>(d, q_latent_dim_, false));
    q_up_ = register_module("q_up_proj", std::make_shared<Linear>(q_latent_dim_, H * (hd + rd), false));
  } else {
    q_proj_ = register_module("q_proj", std::make_shared<Linear>(d, H * (hd + rd), false));
  }
  if (rd > 0)
    rope_ = register_module("rope", std::make_shared<RotaryEmbedding>(rd, ctx.max_seq_len, ctx.rope_base, ctx.rope_layout));
  o_proj_ = register_module("o_proj", std::make_shared<Linear>(H * hd, d, false));
}

std::pair<Tensor, Tensor> MultiLatentAttention::keys_values(const Tensor& latent, const Tensor& k_rope_shared) const {
  const int64_t H = spec_.n_heads, hd = head_dim_, rd = rope_dim_;
  if (!kv_up_) return {split_heads(k_up_->forward(latent), H), split_heads(v_up_->forward(latent), H)};
  Tensor kv = split_heads(kv_up_->forward(latent), H);  // [B, H, L, hd (+ rd) + hd]
  if (rd == 0) {
    auto parts = split(kv, {hd, hd}, -1);
    return {parts[0], parts[1]};
  }
  if (spec_.decoupled_rope_key) {
    auto parts = split(kv, {hd, hd}, -1);
    const Tensor& kc = parts[0];
    Tensor kr = expand(k_rope_shared, {kc.size(0), H, kc.size(2), rd});  // one rope key for every head
    return {cat({kc, kr}, -1), parts[1]};
  }
  auto parts = split(kv, {hd, rd, hd}, -1);  // k_content, k_rope, v_content
  return {cat({parts[0], rope_->forward(parts[1], 0)}, -1), parts[2]};  // positions 0 .. L-1
}

Tensor MultiLatentAttention::forward(const Tensor& x, const AttnMask& mask, KVCache* cache, int64_t start_pos) const {
  const std::string who = str_cat("MultiLatentAttention(d_model=", ctx_.d_model, ", n_heads=", spec_.n_heads,
                                  ", head_dim=", head_dim_, ", latent_dim=", latent_dim_, ", rope_dim=", rope_dim_, ")");
  check_attention_input(x, ctx_.d_model, who);
  const int64_t B = x.size(0), T = x.size(1), H = spec_.n_heads, hd = head_dim_, rd = rope_dim_;
  const int64_t pos = start_position(cache, start_pos, who);
  Tensor latent = kv_down_->forward(x);  // [B, T, latent_dim]: what the cache keeps
  Tensor k_rope;                         // [B, 1, T, rd] after RoPE (decoupled key only)
  if (k_rope_proj_) k_rope = rope_->forward(reshape(k_rope_proj_->forward(x), {B, 1, T, rd}), pos);
  if (cache) {
    cache->latent = latent = append_cached(cache->latent, latent, 1, who, "latents");
    if (k_rope.defined()) cache->k_rope = k_rope = append_cached(cache->k_rope, k_rope, 2, who, "rope keys");
    cache->length = pos + T;
  }
  auto [k, v] = keys_values(latent, k_rope);
  Tensor q = split_heads(q_proj_ ? q_proj_->forward(x) : q_up_->forward(q_down_->forward(x)), H);  // [B, H, T, hd + rd]
  if (rd > 0) {
    auto parts = split(q, {hd, rd}, -1);
    q = cat({parts[0], rope_->forward(parts[1], pos)}, -1);
  }
  // NOTE: hand-written MLA sometimes fills masked scores with -inf (masked_fill(mask == 0,
  // -inf)) where the usual MHA/GQA code uses -1e9; a bool mask here uses -1e9, which differs
  // only in a fully masked row (uniform weights instead of NaN).
  Tensor out = scaled_dot_product_attention(q, k, v, mask, ctx_.dropout, is_training());  // [B, H, T, hd]
  return o_proj_->forward(merge_heads(out));
}

int64_t MultiLatentAttention::kv_cache_bytes_per_token(int64_t bytes_per_element) const {
  return (latent_dim_ + (spec_.decoupled_rope_key ? rope_dim_ : 0)) * bytes_per_element;
}

std::optional<RopeParams> MultiLatentAttention::rope_params() const {
  if (!rope_) return std::nullopt;
  RopeParams p;
  p.layout = ctx_.rope_layout;
  p.permutable = false;
  return p;
}

std::string MultiLatentAttention::extra_repr() const {
  std::string s = str_cat("d_model=", ctx_.d_model, ", n_heads=", spec_.n_heads, ", head_dim=", head_dim_,
                          ", latent_dim=", latent_dim_, ", rope_dim=", rope_dim_);
  if (q_latent_dim_ != latent_dim_) s += str_cat(", q_latent_dim=", q_latent_dim_);
  if (spec_.decoupled_rope_key) s += ", decoupled_rope_key=true";
  return s;
}

// ---------------------------------------------------------------------------------------------
// MLASpec

void MLASpec::validate(const SublayerContext& ctx, const std::string& who) const {
  check_heads(n_heads, who);
  check(head_dim >= 0, who, ": field 'attention.head_dim' must be >= 0 (0 = d_model / n_heads), got ", head_dim);
  if (head_dim == 0) check_split(ctx, n_heads, who);
  check(latent_dim >= 0, who, ": field 'attention.latent_dim' must be >= 0 (0 = 4 head_dim), got ", latent_dim);
  check(q_latent_dim >= -1, who,
        ": field 'attention.q_latent_dim' must be -1 (= latent_dim), 0 (none) or positive, got ", q_latent_dim);
  const int64_t rd = resolve(*this, ctx).rope_dim;
  check(!ctx.rope || (rope_dim >= 0 && rd > 0 && rd % 2 == 0), who,
        ": field 'attention.rope_dim' must give an even RoPE part (0 = head_dim / 2), got ", rope_dim, " (-> ", rd,
        ")");
  check(ctx.rope || !decoupled_rope_key, who,
        ": field 'attention.decoupled_rope_key' needs position = rope (a decoupled key is a RoPE key)");
  check(!ctx.rope_scaling.active(), who, ": field 'rope_scaling' is supported with gqa and mha attention, not mla");
}

std::shared_ptr<Attention> MLASpec::build(const SublayerContext& ctx) const {
  return std::make_shared<MultiLatentAttention>(*this, ctx);
}

int64_t MLASpec::kv_cache_bytes_per_token(const SublayerContext& ctx, int64_t bytes_per_element) const {
  const MLADims m = resolve(*this, ctx);
  return (m.latent_dim + (decoupled_rope_key ? m.rope_dim : 0)) * bytes_per_element;
}

}  // namespace xg::nn

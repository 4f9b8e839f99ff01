// TransformerBlock: one block for every norm position, norm, FFN and attention kind.
#include "nn/block.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/random.hpp"
#include "nn/init.hpp"

namespace xg::nn {

const char* norm_position_name(NormPosition p) { return enum_name(p); }
const char* position_kind_name(PositionKind k) { return enum_name(k); }
const char* block_naming_name(BlockNaming n) { return enum_name(n); }

// ---------------------------------------------------------------------------------------------
// BlockConfig

BlockConfig BlockConfig::teaching(int64_t d_model, int64_t n_heads) {
  BlockConfig c;
  c.d_model = d_model;
  c.norm_position = NormPosition::Post;
  c.norm = LayerNormSpec{1e-5};
  MHASpec mha;
  mha.n_heads = n_heads;
  mha.bias = true;
  c.attention = mha;
  MLPSpec mlp;
  mlp.activation = Activation::ReLU;
  mlp.bias = true;
  mlp.naming = FFNNaming::FC;
  c.ffn = mlp;
  c.position = PositionKind::Sinusoidal;
  c.naming = BlockNaming::Teaching;
  return c;
}

BlockConfig BlockConfig::llama(int64_t d_model, int64_t n_heads, int64_t n_kv_heads) {
  BlockConfig c;
  c.d_model = d_model;
  c.norm_position = NormPosition::Pre;
  c.norm = RMSNormSpec{1e-6};
  GQASpec gqa;
  gqa.n_heads = n_heads;
  gqa.n_kv_heads = n_kv_heads;
  c.attention = gqa;
  c.ffn = SwiGLUSpec{};
  c.position = PositionKind::RoPE;
  c.rope_layout = RopeLayout::Interleaved;
  c.naming = BlockNaming::LLaMA;
  return c;
}

int64_t BlockConfig::n_heads() const {
  return std::visit([](const auto& s) { return s.n_heads; }, attention);
}

SublayerContext BlockConfig::context() const {
  SublayerContext ctx;
  ctx.d_model = d_model;
  ctx.dropout = dropout;
  ctx.norm_eps = norm_eps(norm);
  ctx.norm_unit_offset = std::holds_alternative<UnitOffsetRMSNormSpec>(norm);
  ctx.rope = position == PositionKind::RoPE;
  ctx.rope_layout = rope_layout;
  ctx.rope_base = rope_base;
  ctx.rope_scaling = rope_scaling;
  ctx.max_seq_len = max_seq_len;
  ctx.sliding_window = sliding_window;
  return ctx;
}

void BlockConfig::validate(const std::string& who) const {
  const BlockConfig& c = *this;
  check(c.d_model > 0, who, ": field 'd_model' must be positive, got ", c.d_model);
  check(c.n_layers > 0, who, ": field 'n_layers' must be positive, got ", c.n_layers);
  if (c.position == PositionKind::Sinusoidal)
    check(c.d_model % 2 == 0, who, ": field 'position' = sinusoidal needs an even d_model, got ", c.d_model);
  if (c.position != PositionKind::None)
    check(c.max_seq_len > 0, who, ": field 'max_seq_len' must be positive, got ", c.max_seq_len);
  check(c.rope_base > 0, who, ": field 'rope_base' must be positive, got ", c.rope_base);
  check(c.dropout >= 0 && c.dropout < 1, who, ": field 'dropout' must be in [0, 1), got ", c.dropout);
  check(c.sliding_window >= 0, who, ": field 'sliding_window' must be >= 0 (0 = none), got ", c.sliding_window);
  if (c.sliding_window > 0)
    check(gqa_shape(c.attention, context()).has_value(), who, ": field 'sliding_window' needs attention gqa or mha, got ",
          spec_kind(c.attention));
  if (c.rope_scaling.active()) {
    check(c.position == PositionKind::RoPE, who, ": field 'rope_scaling' needs position = rope, got ",
          position_kind_name(c.position));
    c.rope_scaling.validate(who);
  }
  const SublayerContext ctx = context();
  validate_spec(c.norm, ctx, who);
  validate_spec(c.attention, ctx, who);
  validate_spec(c.ffn, ctx, who);
}

// ---------------------------------------------------------------------------------------------
// TransformerBlock

double TransformerBlock::deepnorm_alpha(int64_t n_layers) { return std::pow(2.0 * static_cast<double>(n_layers), 0.25); }
double TransformerBlock::deepnorm_beta(int64_t n_layers) { return std::pow(8.0 * static_cast<double>(n_layers), -0.25); }

TransformerBlock::TransformerBlock(const BlockConfig& config) : config_(config) {
  config_.validate("TransformerBlock");
  const SublayerContext ctx = config_.context();
  attention_ = make_sublayer(config_.attention, ctx);
  ffn_ = make_sublayer(config_.ffn, ctx);
  norm1_ = make_sublayer(config_.norm, ctx);
  norm2_ = make_sublayer(config_.norm, ctx);
  const BlockConfig& c = config_;
  const bool sandwich = c.norm_position == NormPosition::Sandwich;
  if (sandwich) {
    post_norm1_ = make_sublayer(config_.norm, ctx);
    post_norm2_ = make_sublayer(config_.norm, ctx);
  }

  // The two conventions' registration orders (and so named_parameters' order).
  if (c.naming == BlockNaming::Teaching) {
    register_module("attention", attention_);
    register_module("ffn", ffn_);
    register_module("norm1", norm1_);
    register_module("norm2", norm2_);
    if (sandwich) {
      register_module("post_norm1", post_norm1_);
      register_module("post_norm2", post_norm2_);
    }
  } else {
    register_module("norm_attn", norm1_);
    register_module("attention", attention_);
    if (sandwich) register_module("post_norm_attn", post_norm1_);
    register_module("norm_ffn", norm2_);
    register_module("ffn", ffn_);
    if (sandwich) register_module("post_norm_ffn", post_norm2_);
  }

  if (c.norm_position == NormPosition::DeepNorm) {
    alpha_ = deepnorm_alpha(c.n_layers);
    deepnorm_init();
  }
}

// DeepNet's initialisation (Wang et al. 2022, figure 2): xavier_normal_ with gain beta on the
// FFN weights and on the attention's value and output projections, gain 1 on the query and
// key projections. Biases and norm weights keep their defaults.
// NOTE: MLA has no separate value projection (v comes out of the fused kv_up_proj with the
// keys), so only its o_proj gets beta; its other projections get gain 1. An MoE's router
// keeps nn.Linear's init (it scales the gates, not the sublayer's output).
void TransformerBlock::deepnorm_init() {
  const double beta = deepnorm_beta(config_.n_layers);
  auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
  for (auto& [name, p] : attention_->named_parameters()) {
    if (p.dim() != 2) continue;
    const bool scaled = starts(name, "w_v.") || starts(name, "w_o.") || starts(name, "o_proj.");
    init::xavier_normal_(p, scaled ? beta : 1.0);
  }
  for (auto& [name, p] : ffn_->named_parameters()) {
    if (p.dim() != 2 || starts(name, "router.")) continue;
    init::xavier_normal_(p, beta);
  }
}

// x: [B, T, C] -> [B, T, C], with a = attention, f = FFN, d = dropout (training only):
//   Post:     x = norm1(x + d(a(x)));          x = norm2(x + d(f(x)))
//   Pre:      x = x + d(a(norm1(x)));          x = x + d(f(norm2(x)))
//   DeepNorm: x = norm1(alpha x + d(a(x)));    x = norm2(alpha x + d(f(x)))
//   Sandwich: x = x + d(post_norm1(a(norm1(x))));   x = x + d(post_norm2(f(norm2(x))))
// NOTE: teaching code often takes a mask in the block's forward and never passes it to the
// attention (every token then sees every other, even in a decoder); the mask is applied here.
BlockOutput TransformerBlock::forward(const Tensor& x, const AttnMask& mask, KVCache* cache, int64_t start_pos) const {
  const BlockConfig& c = config_;
  if (!x.defined() || x.dim() != 3 || x.size(2) != c.d_model)
    throw Error(str_cat("TransformerBlock(d_model=", c.d_model, ", n_heads=", c.n_heads(), "): expected x [B, T, ",
                        c.d_model, "], got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor")));
  const bool drop = c.dropout > 0 && is_training();
  auto resid = [&](const Tensor& t) { return drop ? dropout(t, c.dropout, true) : t; };
  Tensor aux;
  auto attn_sub = [&](const Tensor& h) { return resid(attention_->forward(h, mask, cache, start_pos)); };
  auto ffn_sub = [&](const Tensor& h) {
    FFNOutput r = ffn_->forward_with_aux(h);
    aux = r.aux_loss;
    return resid(r.out);
  };
  Tensor h;
  switch (c.norm_position) {
    case NormPosition::Post:
      h = norm1_->forward(x + attn_sub(x));
      h = norm2_->forward(h + ffn_sub(h));
      break;
    case NormPosition::Pre:
      h = x + attn_sub(norm1_->forward(x));
      h = h + ffn_sub(norm2_->forward(h));
      break;
    case NormPosition::DeepNorm:
      h = norm1_->forward(x * alpha_ + attn_sub(x));
      h = norm2_->forward(h * alpha_ + ffn_sub(h));
      break;
    case NormPosition::Sandwich:  // the post norms before the dropout, as the sublayer's output
      h = x + resid(post_norm1_->forward(attention_->forward(norm1_->forward(x), mask, cache, start_pos)));
      {
        FFNOutput r = ffn_->forward_with_aux(norm2_->forward(h));
        aux = r.aux_loss;
        h = h + resid(post_norm2_->forward(r.out));
      }
      break;
  }
  return {h, aux};
}

int64_t TransformerBlock::kv_cache_bytes_per_token(int64_t bytes_per_element) const {
  return attention_->kv_cache_bytes_per_token(bytes_per_element);
}

std::string TransformerBlock::extra_repr() const {
  const BlockConfig& c = config_;
  std::string s = str_cat("d_model=", c.d_model, ", n_heads=", c.n_heads(), ", norm_position=",
                          norm_position_name(c.norm_position), ", norm=", spec_kind(c.norm),
                          ", ffn=", spec_kind(c.ffn), ", attention=", spec_kind(c.attention));
  if (c.norm_position == NormPosition::DeepNorm) s += str_cat(", alpha=", alpha_);
  if (c.position == PositionKind::RoPE) s += ", rope=true";
  if (c.dropout > 0) s += str_cat(", dropout=", c.dropout);
  return s;
}

}  // namespace xg::nn

// TransformerBlock: one block for every norm position, norm, FFN and attention kind.
#include "nn/block.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/random.hpp"
#include "nn/init.hpp"

namespace xg::nn {

const char* norm_position_name(NormPosition p) {
  switch (p) {
    case NormPosition::Post: return "post";
    case NormPosition::Pre: return "pre";
    case NormPosition::DeepNorm: return "deepnorm";
  }
  return "?";
}

const char* norm_kind_name(NormKind k) { return k == NormKind::LayerNorm ? "layernorm" : "rmsnorm"; }

const char* ffn_kind_name(FFNKind k) {
  switch (k) {
    case FFNKind::ReLU: return "relu";
    case FFNKind::GELU: return "gelu";
    case FFNKind::SwiGLU: return "swiglu";
    case FFNKind::MoE: return "moe";
  }
  return "?";
}

const char* attention_kind_name(AttentionKind k) {
  switch (k) {
    case AttentionKind::MHA: return "mha";
    case AttentionKind::GQA: return "gqa";
    case AttentionKind::MLA: return "mla";
  }
  return "?";
}

const char* position_kind_name(PositionKind k) {
  switch (k) {
    case PositionKind::Sinusoidal: return "sinusoidal";
    case PositionKind::Learned: return "learned";
    case PositionKind::RoPE: return "rope";
    case PositionKind::None: return "none";
  }
  return "?";
}

const char* block_naming_name(BlockNaming n) { return n == BlockNaming::Teaching ? "teaching" : "llama"; }

// ---------------------------------------------------------------------------------------------
// BlockConfig

BlockConfig BlockConfig::teaching(int64_t d_model, int64_t n_heads) {
  BlockConfig c;
  c.d_model = d_model;
  c.n_heads = n_heads;
  c.norm_position = NormPosition::Post;
  c.norm = NormKind::LayerNorm;
  c.norm_eps = 1e-5;
  c.ffn = FFNKind::ReLU;
  c.ffn_naming = FFNNaming::FC;
  c.attention = AttentionKind::MHA;
  c.position = PositionKind::Sinusoidal;
  c.bias = true;
  c.naming = BlockNaming::Teaching;
  return c;
}

BlockConfig BlockConfig::llama(int64_t d_model, int64_t n_heads, int64_t n_kv_heads) {
  BlockConfig c;
  c.d_model = d_model;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.norm_position = NormPosition::Pre;
  c.norm = NormKind::RMSNorm;
  c.norm_eps = 1e-6;
  c.ffn = FFNKind::SwiGLU;
  c.swiglu_naming = SwiGLUNaming::Seed;
  c.attention = AttentionKind::GQA;
  c.position = PositionKind::RoPE;
  c.rope_layout = RopeLayout::Interleaved;
  c.bias = false;
  c.naming = BlockNaming::LLaMA;
  return c;
}

namespace {

int64_t resolved_head_dim(const BlockConfig& c) { return c.mla_head_dim > 0 ? c.mla_head_dim : c.d_model / c.n_heads; }

}  // namespace

void BlockConfig::validate(const std::string& who) const {
  const BlockConfig& c = *this;
  check(c.d_model > 0, who, ": field 'd_model' must be positive, got ", c.d_model);
  check(c.n_heads > 0, who, ": field 'n_heads' must be positive, got ", c.n_heads);
  const bool needs_split = c.attention != AttentionKind::MLA || c.mla_head_dim == 0;
  check(!needs_split || c.d_model % c.n_heads == 0, who, ": field 'n_heads' (", c.n_heads,
        ") must divide d_model (", c.d_model, ")");
  check(c.n_kv_heads >= 0, who, ": field 'n_kv_heads' must be >= 0 (0 = n_heads), got ", c.n_kv_heads);
  if (c.attention == AttentionKind::GQA && c.n_kv_heads > 0)
    check(c.n_heads % c.n_kv_heads == 0, who, ": field 'n_kv_heads' (", c.n_kv_heads, ") must divide n_heads (",
          c.n_heads, ")");
  check(c.d_ff >= 0, who, ": field 'd_ff' must be >= 0 (0 = the FFN kind's default), got ", c.d_ff);
  check(c.n_layers > 0, who, ": field 'n_layers' must be positive, got ", c.n_layers);
  check(c.norm_eps > 0, who, ": field 'norm_eps' must be positive, got ", c.norm_eps);
  if (c.ffn == FFNKind::MoE) {
    check(c.num_experts > 0, who, ": field 'num_experts' must be positive, got ", c.num_experts);
    check(c.top_k > 0 && c.top_k <= c.num_experts, who, ": field 'top_k' must be in [1, num_experts = ",
          c.num_experts, "], got ", c.top_k);
    check(c.moe_aux_loss_coef >= 0, who, ": field 'moe_aux_loss_coef' must be >= 0, got ", c.moe_aux_loss_coef);
  }
  const bool rope = c.position == PositionKind::RoPE;
  if (c.attention == AttentionKind::MLA) {
    check(!c.qk_norm, who, ": field 'qk_norm' is for MHA/GQA attention (MultiLatentAttention has no QK-Norm)");
    check(c.mla_head_dim >= 0, who, ": field 'mla_head_dim' must be >= 0 (0 = d_model / n_heads), got ",
          c.mla_head_dim);
    check(c.mla_latent_dim >= 0, who, ": field 'mla_latent_dim' must be >= 0 (0 = 4 head_dim), got ",
          c.mla_latent_dim);
    check(c.mla_q_latent_dim >= -1, who, ": field 'mla_q_latent_dim' must be -1 (= latent), 0 (none) or positive, got ",
          c.mla_q_latent_dim);
    const int64_t rd = c.mla_rope_dim > 0 ? c.mla_rope_dim : resolved_head_dim(c) / 2;
    check(!rope || (c.mla_rope_dim >= 0 && rd > 0 && rd % 2 == 0), who,
          ": field 'mla_rope_dim' must give an even RoPE part (0 = head_dim / 2), got ", c.mla_rope_dim, " (-> ",
          rd, ")");
    check(rope || !c.mla_decoupled_rope_key, who,
          ": field 'mla_decoupled_rope_key' needs position = rope (a decoupled key is a RoPE key)");
  } else if (rope) {
    const int64_t hs = c.d_model / c.n_heads;
    check(hs % 2 == 0, who, ": field 'position' = rope needs an even head dim, got d_model / n_heads = ", hs);
  }
  if (c.position == PositionKind::Sinusoidal)
    check(c.d_model % 2 == 0, who, ": field 'position' = sinusoidal needs an even d_model, got ", c.d_model);
  if (c.position != PositionKind::None)
    check(c.max_seq_len > 0, who, ": field 'max_seq_len' must be positive, got ", c.max_seq_len);
  check(c.rope_base > 0, who, ": field 'rope_base' must be positive, got ", c.rope_base);
  check(c.dropout >= 0 && c.dropout < 1, who, ": field 'dropout' must be in [0, 1), got ", c.dropout);
}

// ---------------------------------------------------------------------------------------------
// norms

std::shared_ptr<Module> make_norm(NormKind kind, int64_t dim, double eps) {
  if (kind == NormKind::LayerNorm) return std::make_shared<LayerNorm>(dim, eps);
  return std::make_shared<RMSNorm>(dim, eps);
}

Tensor apply_norm(const Module& norm, const Tensor& x) {
  if (auto* ln = dynamic_cast<const LayerNorm*>(&norm)) return ln->forward(x);
  if (auto* rms = dynamic_cast<const RMSNorm*>(&norm)) return rms->forward(x);
  throw Error(str_cat("apply_norm: expected a LayerNorm or an RMSNorm, got ", norm.name()));
}

// ---------------------------------------------------------------------------------------------
// TransformerBlock

double TransformerBlock::deepnorm_alpha(int64_t n_layers) { return std::pow(2.0 * static_cast<double>(n_layers), 0.25); }
double TransformerBlock::deepnorm_beta(int64_t n_layers) { return std::pow(8.0 * static_cast<double>(n_layers), -0.25); }

TransformerBlock::TransformerBlock(const BlockConfig& config) : config_(config) {
  const BlockConfig& c = config_;
  c.validate("TransformerBlock");
  const bool rope = c.position == PositionKind::RoPE;
  // NOTE: the seeds' blocks use torch.nn.MultiheadAttention (one packed in_proj_weight); ours
  // is the second seed's MultiHeadAttention (§1.2: w_q, w_k, w_v, w_o), which computes the
  // same function. MultiHeadAttention has no RoPE or QK-Norm, so MHA with either is a
  // GroupedQueryAttention with n_kv_heads = n_heads: the same parameters under the same names.
  if (c.attention == AttentionKind::MHA && !rope && !c.qk_norm) {
    mha_ = std::make_shared<MultiHeadAttention>(c.d_model, c.n_heads, c.dropout, c.bias);
    attention_ = mha_;
  } else if (c.attention != AttentionKind::MLA) {
    GroupedQueryAttentionOptions o;
    o.d_model = c.d_model;
    o.n_heads = c.n_heads;
    o.n_kv_heads = c.attention == AttentionKind::GQA && c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
    o.bias = c.bias;
    o.out_bias = c.bias;
    o.dropout = c.dropout;
    o.qk_norm = c.qk_norm;
    o.norm_eps = c.norm_eps;
    o.rope = rope;
    o.rope_layout = c.rope_layout;
    o.max_seq_len = c.max_seq_len;
    o.rope_base = c.rope_base;
    gqa_ = std::make_shared<GroupedQueryAttention>(o);
    attention_ = gqa_;
  } else {
    MultiLatentAttentionOptions o;
    o.model_dim = c.d_model;
    o.head_num = c.n_heads;
    o.head_dim = resolved_head_dim(c);
    o.latent_dim = c.mla_latent_dim > 0 ? c.mla_latent_dim : 4 * o.head_dim;
    o.rope_dim = rope ? (c.mla_rope_dim > 0 ? c.mla_rope_dim : o.head_dim / 2) : 0;
    o.q_latent_dim = c.mla_q_latent_dim;
    o.decoupled_rope_key = c.mla_decoupled_rope_key;
    o.dropout = c.dropout;
    o.max_seq_len = c.max_seq_len;
    o.rope_base = c.rope_base;
    o.rope_layout = c.rope_layout;
    mla_ = std::make_shared<MultiLatentAttention>(o);
    attention_ = mla_;
  }

  switch (c.ffn) {
    case FFNKind::ReLU:
    case FFNKind::GELU:
      dense_ffn_ = std::make_shared<FFN>(c.d_model, c.d_ff, c.ffn == FFNKind::ReLU ? Activation::ReLU : Activation::GELU,
                                         0.0, c.bias, c.ffn_naming);
      ffn_ = dense_ffn_;
      break;
    case FFNKind::SwiGLU:
      dense_ffn_ = std::make_shared<SwiGLU>(c.d_model, c.d_ff, c.bias, c.swiglu_naming);
      ffn_ = dense_ffn_;
      break;
    case FFNKind::MoE: {
      // NOTE: `bias` does not reach the experts: FFN experts keep the second seed's biases
      // and SwiGLU experts have none, as MoE builds them.
      MoEOptions o;
      o.d_model = c.d_model;
      o.d_ff = c.d_ff;
      o.num_experts = c.num_experts;
      o.top_k = c.top_k;
      o.expert = c.moe_expert;
      o.activation = Activation::ReLU;
      o.aux_loss_coef = c.moe_aux_loss_coef;
      moe_ = std::make_shared<MoE>(o);
      ffn_ = moe_;
      break;
    }
  }
  norm1_ = make_norm(c.norm, c.d_model, c.norm_eps);
  norm2_ = make_norm(c.norm, c.d_model, c.norm_eps);

  // The seeds' registration orders (and so named_parameters' order).
  if (c.naming == BlockNaming::Teaching) {
    register_module("attention", attention_);
    register_module("ffn", ffn_);
    register_module("norm1", norm1_);
    register_module("norm2", norm2_);
  } else {
    register_module("norm_attn", norm1_);
    register_module("attention", attention_);
    register_module("norm_ffn", norm2_);
    register_module("ffn", ffn_);
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

Tensor TransformerBlock::attend(const Tensor& h, const AttnMask& mask, KVCache* cache, int64_t start_pos) const {
  if (mha_) return mha_->forward(h, Tensor(), mask, cache, start_pos);
  if (gqa_) return gqa_->forward(h, mask, cache, start_pos);
  return mla_->forward(h, mask, cache, start_pos);
}

// x: [B, T, C] -> [B, T, C], with a = attention, f = FFN, d = dropout (training only):
//   Post:     x = norm1(x + d(a(x)));          x = norm2(x + d(f(x)))
//   Pre:      x = x + d(a(norm1(x)));          x = x + d(f(norm2(x)))
//   DeepNorm: x = norm1(alpha x + d(a(x)));    x = norm2(alpha x + d(f(x)))
// NOTE: the first seed's TransformerBlock_Old.forward takes a mask but never passes it to
// its attention (every token sees every other, even in a decoder); the mask is applied here.
BlockOutput TransformerBlock::forward(const Tensor& x, const AttnMask& mask, KVCache* cache, int64_t start_pos) const {
  const BlockConfig& c = config_;
  if (!x.defined() || x.dim() != 3 || x.size(2) != c.d_model)
    throw Error(str_cat("TransformerBlock(d_model=", c.d_model, ", n_heads=", c.n_heads, "): expected x [B, T, ",
                        c.d_model, "], got ", x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor")));
  const bool drop = c.dropout > 0 && is_training();
  auto resid = [&](const Tensor& t) { return drop ? dropout(t, c.dropout, true) : t; };
  Tensor aux;
  auto attn_sub = [&](const Tensor& h) { return resid(attend(h, mask, cache, start_pos)); };
  auto ffn_sub = [&](const Tensor& h) {
    if (!moe_) return resid(dense_ffn_->forward(h));
    MoEOutput r = moe_->forward(h);
    aux = r.aux_loss;
    return resid(r.out);
  };
  Tensor h;
  switch (c.norm_position) {
    case NormPosition::Post:
      h = apply_norm(*norm1_, x + attn_sub(x));
      h = apply_norm(*norm2_, h + ffn_sub(h));
      break;
    case NormPosition::Pre:
      h = x + attn_sub(apply_norm(*norm1_, x));
      h = h + ffn_sub(apply_norm(*norm2_, h));
      break;
    case NormPosition::DeepNorm:
      h = apply_norm(*norm1_, x * alpha_ + attn_sub(x));
      h = apply_norm(*norm2_, h * alpha_ + ffn_sub(h));
      break;
  }
  return {h, aux};
}

int64_t TransformerBlock::kv_cache_bytes_per_token(int64_t bytes_per_element) const {
  if (mha_) return mha_->kv_cache_bytes_per_token(bytes_per_element);
  if (gqa_) return gqa_->kv_cache_bytes_per_token(bytes_per_element);
  return mla_->kv_cache_bytes_per_token(bytes_per_element);
}

std::string TransformerBlock::extra_repr() const {
  const BlockConfig& c = config_;
  std::string s = str_cat("d_model=", c.d_model, ", n_heads=", c.n_heads, ", norm_position=",
                          norm_position_name(c.norm_position), ", norm=", norm_kind_name(c.norm),
                          ", ffn=", ffn_kind_name(c.ffn), ", attention=", attention_kind_name(c.attention));
  if (c.norm_position == NormPosition::DeepNorm) s += str_cat(", alpha=", alpha_);
  if (c.position == PositionKind::RoPE) s += ", rope=true";
  if (c.dropout > 0) s += str_cat(", dropout=", c.dropout);
  return s;
}

}  // namespace xg::nn

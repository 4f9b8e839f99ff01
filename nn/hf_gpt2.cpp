// GPT2LMHeadModel's config.json <-> LMConfig: Pre-Norm LayerNorm (with bias), multi-head
// attention and a two-layer MLP with biases, learned positions, a final ln_f, tied head.
#include <cmath>

#include "nn/hf_keys.hpp"

namespace xg::nn {

namespace {

using hf_detail::json;
using hf_detail::Keys;

// activation_function as transformers' ACT2FN names it.
struct Gpt2Activation {
  const char* name;
  Activation act;
};
constexpr Gpt2Activation kGpt2Activations[] = {{"gelu_new", Activation::GELUTanh},
                                               {"gelu_pytorch_tanh", Activation::GELUTanh},
                                               {"gelu", Activation::GELU},
                                               {"relu", Activation::ReLU}};

const char* const kGpt2Needs = "save_hf: a Hugging Face GPT-2 model needs ";

}  // namespace

void hf_detail::read_gpt2(const Keys& k, LMConfig& lm) {
  // Keys that change the forward in ways xgrad does not compute.
  if (!k.boolean("scale_attn_weights", true)) k.refuse("scale_attn_weights", "xgrad scales scores by 1/sqrt(head_dim)");
  if (k.boolean("scale_attn_by_inverse_layer_idx", false))
    k.refuse("scale_attn_by_inverse_layer_idx", "xgrad's attention scale is the same in every layer");
  if (k.boolean("add_cross_attention", false)) k.refuse("add_cross_attention", "xgrad's GPT-2 is decoder-only");
  // reorder_and_upcast_attn computes the same scores in float32: nothing to do in float32.
  const std::string act = k.string("activation_function", "gelu_new");
  const Gpt2Activation* a = nullptr;
  for (const Gpt2Activation& g : kGpt2Activations)
    if (act == g.name) a = &g;
  if (!a) k.refuse("activation_function", "xgrad computes gelu_new, gelu_pytorch_tanh, gelu and relu");
  // One dropout rate serves the embeddings, the attention weights and each sublayer's output.
  const double resid = k.number("resid_pdrop", 0.1);
  if (!(resid >= 0 && resid < 1)) k.bad("resid_pdrop", "in [0, 1)");
  for (const char* key : {"embd_pdrop", "attn_pdrop"})
    if (k.number(key, 0.1) != resid)
      k.refuse(key, str_cat("xgrad applies one dropout rate, and resid_pdrop is ", resid));

  // config.json uses GPT2Config's own names (n_embd, n_head, ...), not the aliases.
  const int64_t d = k.positive("n_embd", 768);
  const int64_t n_heads = k.positive("n_head", 12);
  if (d % n_heads != 0) k.bad("n_head", str_cat("a divisor of n_embd (", d, ")"));
  lm.vocab_size = k.positive("vocab_size", 50257);
  lm.n_layers = k.positive("n_layer", 12);
  lm.tie_embeddings = k.boolean("tie_word_embeddings", true);
  lm.final_norm = true;
  lm.dtype = kFloat32;
  lm.embed_scale = 1.0;
  BlockConfig b;  // GPT-2's block is BlockConfig's default
  b.d_model = d;
  b.norm_position = NormPosition::Pre;
  const double eps = k.number("layer_norm_epsilon", 1e-5);
  if (!(eps > 0)) k.bad("layer_norm_epsilon", "positive");
  b.norm = LayerNormSpec{eps};
  MHASpec attn;
  attn.n_heads = n_heads;
  attn.bias = true;
  b.attention = attn;
  MLPSpec mlp;
  mlp.activation = a->act;
  mlp.d_ff = k.has("n_inner") ? k.positive("n_inner", 0) : 4 * d;
  mlp.bias = true;
  mlp.naming = FFNNaming::FC;
  b.ffn = mlp;
  b.position = PositionKind::Learned;
  b.max_seq_len = k.positive("n_positions", 1024);
  b.dropout = resid;
  lm.block = b;
}

std::string hf_detail::gpt2_to_json(const HFConfig& c) {
  const BlockConfig& b = c.lm.block;
  const GQAShape g = c.attention();
  const DenseFFNShape f = c.mlp();
  const char* act = "gelu_new";
  for (const Gpt2Activation& a : kGpt2Activations)
    if (f.activation == activation_name(a.act)) {
      act = a.name;
      break;
    }
  json j;
  j["activation_function"] = act;
  j["architectures"] = {hf_architecture_name(c.architecture)};
  j["attn_pdrop"] = b.dropout;
  write_token_ids(j, c);
  j["embd_pdrop"] = b.dropout;
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = norm_eps(b.norm);
  j["model_type"] = hf_model_type(c.architecture);
  j["n_embd"] = b.d_model;
  j["n_head"] = g.n_heads;
  j["n_inner"] = f.d_ff;
  j["n_layer"] = c.lm.n_layers;
  j["n_positions"] = b.max_seq_len;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = b.dropout;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = c.lm.tie_embeddings;
  j["torch_dtype"] = c.torch_dtype;
  j["use_cache"] = true;
  j["vocab_size"] = c.lm.vocab_size;
  return j.dump(2) + "\n";
}

HFConfig hf_detail::gpt2_from_lm(const LMConfig& lm) {
  const BlockConfig& b = lm.block;
  check(b.norm_position == NormPosition::Pre, kGpt2Needs, "norm_position pre, got ", norm_position_name(b.norm_position));
  check(lm.final_norm, kGpt2Needs, "final_norm true");
  check(lm.embed_scale == 1.0, kGpt2Needs, "embed_scale 1, got ", lm.embed_scale);
  HFConfig c;
  c.architecture = HFArchitecture::GPT2;
  c.lm = lm;
  const std::optional<GQAShape> g = gqa_shape(b.attention, b.context());
  check(g && g->n_kv_heads == g->n_heads && g->head_dim * g->n_heads == b.d_model && g->qkv_bias && g->out_bias &&
            !g->qk_norm,
        kGpt2Needs, "attention mha with bias and head_dim d_model / n_heads, got ", spec_kind(b.attention));
  const DenseFFNShape f = c.mlp();
  check(f.bias && f.activation != "silu", kGpt2Needs, "ffn mlp with bias and a GELU or ReLU, got ",
        spec_kind(b.ffn));
  // HF's block as read_gpt2 builds it, whatever kinds of spec described these shapes.
  MHASpec attn;
  attn.n_heads = g->n_heads;
  attn.bias = true;
  c.lm.block.attention = attn;
  MLPSpec mlp;
  mlp.d_ff = f.d_ff;
  mlp.bias = true;
  mlp.naming = FFNNaming::FC;
  for (const Gpt2Activation& a : kGpt2Activations)
    if (f.activation == activation_name(a.act)) mlp.activation = a.act;
  c.lm.block.ffn = mlp;
  c.lm.dtype = kFloat32;
  return c;
}

}  // namespace xg::nn

// Checkpoint names as data: a naming scheme says how another framework names a model's
// tensors (a table of renames from xgrad's dotted names, plus the few structural steps a
// format needs: packing q/k/v into one in_proj, RoPE's q/k row order). Module's
// state_dict(scheme) and load_state_dict(dict, scheme) use one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/rope.hpp"
#include "nn/module.hpp"

namespace xg::nn {

// A dotted-name pattern: "*" matches one segment, a leading "**" any number of them (also
// none); the external pattern uses the same wildcards, filled in the same order.
struct NameRule {
  std::string xgrad;     // e.g. "layers.*.attention.w_q.weight"
  std::string external;  // e.g. "model.layers.*.self_attn.q_proj.weight"
  // Only for tensors owned directly by a module of this kind (Module::name(), e.g. "RMSNorm");
  // empty: any module.
  std::string module;
  // The checkpoint stores the 2-D tensor transposed: GPT-2's Conv1D weights are [in, out].
  bool transposed = false;
};

// One external tensor made of several of xgrad's, concatenated along `dim` on the way out and
// split back into their shapes on the way in: torch.nn.MultiheadAttention's in_proj_weight is
// cat(w_q.weight, w_k.weight, w_v.weight).
struct PackRule {
  std::vector<std::string> xgrad;  // e.g. {"**.w_q.weight", "**.w_k.weight", "**.w_v.weight"}
  std::string external;            // e.g. "**.in_proj_weight"
  int64_t dim = 0;
  // The concatenation is stored transposed (GPT-2's c_attn: [d_model, 3 d_model]).
  bool transposed = false;
};

struct NamingScheme {
  std::string name;
  std::vector<PackRule> packs;  // tried first
  std::vector<NameRule> rules;  // the first that matches renames a tensor
  // true: every tensor must match a rule (a complete table, e.g. Hugging Face's Llama);
  // false: a tensor no rule matches keeps its xgrad name.
  bool complete = false;
  // The checkpoint's RoPE layout: the rows an attention whose layout differs names in its
  // rope_params() (GQA's q/k projections, their biases and QK-Norm weights) are permuted
  // between the two pair orders (Hugging Face's Llama conversion does the same to Meta's
  // weights); an attention whose rows cannot be permuted (MLA) must be in this layout. Unset:
  // as the model.
  std::optional<RopeLayout> rope_layout;
  // External tensors a checkpoint may hold that the model does not need (patterns as in
  // NameRule; Hugging Face's older Llama checkpoints keep RoPE's rotary_emb.inv_freq):
  // load_state_dict skips them.
  std::vector<std::string> ignored;
  bool ignores(const std::string& external) const;
  // A prefix a checkpoint may leave out: GPT-2's folders on the Hub were saved from the base
  // model (h.0.attn.c_attn.weight for transformer.h.0.attn.c_attn.weight). canonical() puts it
  // back on a name that lacks it and is not one of the scheme's names as it is.
  std::string optional_prefix;
  std::string canonical(const std::string& external) const;

  // The schemes xgrad knows (naming_schemes() lists them):
  //  "xgrad":      xgrad's own names (the identity).
  //  "torch":      torch.nn.MultiheadAttention's packed in_proj_weight / in_proj_bias and
  //                out_proj in place of w_q, w_k, w_v, w_o; the rest unchanged.
  //  "gamma":      "torch", and RMSNorm's weight named gamma (tutorial code commonly writes
  //                self.gamma = nn.Parameter(torch.ones(d))).
  //  "meta_llama": Meta's LLaMA checkpoints (tok_embeddings, layers.N.attention.wq ..,
  //                feed_forward.w1/w2/w3, attention_norm, ffn_norm, norm, output); interleaved RoPE.
  //  "hf_llama":   Hugging Face's LlamaForCausalLM (model.embed_tokens, model.layers.N.self_attn
  //                .q_proj .., mlp.gate_proj/up_proj/down_proj, input_layernorm,
  //                post_attention_layernorm, model.norm, lm_head); rotate-half RoPE. Also
  //                Mistral's and Qwen2/3's (q/k/v biases, q_norm/k_norm).
  //  "hf_gpt2":    Hugging Face's GPT2LMHeadModel (transformer.wte, wpe, h.N.ln_1, attn.c_attn
  //                packing q, k, v, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, ln_f, lm_head), its
  //                Conv1D weights stored transposed ([in, out]).
  //  "hf_gemma2":  Hugging Face's Gemma2ForCausalLM: hf_llama's names, with the sandwich
  //                block's norms input_layernorm, post_attention_layernorm (after the
  //                attention), pre_feedforward_layernorm and post_feedforward_layernorm.
  //                Also Gemma 3's (with q_norm / k_norm).
  //  "hf_phi3":    Hugging Face's Phi3ForCausalLM: hf_llama's names with q, k and v packed
  //                into self_attn.qkv_proj and gate, up into mlp.gate_up_proj.
  static const NamingScheme& get(const std::string& name);
};

std::vector<std::string> naming_schemes();  // the names NamingScheme::get accepts

// The name `scheme` gives one of a model's tensors by its rename rules alone (packs are not
// applied), `owner` being the kind (Module::name()) of the module that holds it: a name no rule
// matches keeps its name under an incomplete scheme and has none (nullopt) under a complete one.
// hf_llama: "layers.0.attention.w_q.weight" -> "model.layers.0.self_attn.q_proj.weight".
std::optional<std::string> rename_tensor(const NamingScheme& scheme, const std::string& name, const std::string& owner = "");

// The external name of the tensor `scheme` packs `name` into with other tensors (GPT-2's
// c_attn holding w_q, w_k, w_v: "transformer.h.0.attn.c_attn.weight"), nullopt when no pack
// holds it.
std::optional<std::string> packed_name(const NamingScheme& scheme, const std::string& name);

// One tensor of the model under a scheme: the model's tensors it is made of (in order,
// concatenated along `dim`), its shape, and whether its rows are permuted between RoPE layouts.
struct ExternalTensor {
  std::vector<std::string> parts;
  int64_t dim = 0;
  Shape shape;  // as stored (transposed when `transposed`)
  bool rope_permuted = false;
  bool transposed = false;  // the concatenation of the parts is stored transposed
};
// Every external name of the model's state dict under `scheme` (as state_dict(scheme) names
// them), so that a loader can read tensor by tensor into the model's storage.
std::map<std::string, ExternalTensor> external_tensors(const Module& m, const NamingScheme& scheme);

// Reorders the rows of t ([heads * head_dim, ...]: a q/k projection's weight, bias or LoRA B)
// from RoPE layout `from` to `to`; within a head, interleaved pairs (2i, 2i+1) are rotate-half
// features (i, i + head_dim/2). t itself when the layouts are the same.
Tensor permute_rope_rows(const Tensor& t, int64_t n_heads, int64_t head_dim, RopeLayout from, RopeLayout to);

// The name in `candidates` closest to `name` (Levenshtein distance), for error hints; empty
// when there are none.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace xg::nn

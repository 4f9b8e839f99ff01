// Hugging Face config.json <-> LMConfig for LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM and Gemma 1/2/3 (GPT-2's keys are
// nn/hf_gpt2.cpp's): the keys each uses, their transformers defaults, sliding windows and RoPE
// scaling, and the refusals (anything xgrad would compute differently).
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "nn/hf.hpp"
#include "nn/hf_keys.hpp"

namespace xg::nn {

namespace {

using hf_detail::json;
using hf_detail::Keys;
using hf_detail::read_ids;

struct ArchInfo {
  HFArchitecture arch;
  const char* name;
  const char* model_type;
};
constexpr ArchInfo kArchs[] = {{HFArchitecture::Llama, "LlamaForCausalLM", "llama"},
                               {HFArchitecture::Mistral, "MistralForCausalLM", "mistral"},
                               {HFArchitecture::Qwen2, "Qwen2ForCausalLM", "qwen2"},
                               {HFArchitecture::Qwen3, "Qwen3ForCausalLM", "qwen3"},
                               {HFArchitecture::Gemma, "GemmaForCausalLM", "gemma"},
                               {HFArchitecture::Gemma2, "Gemma2ForCausalLM", "gemma2"},
                               {HFArchitecture::Gemma3, "Gemma3ForCausalLM", "gemma3_text"},
                               {HFArchitecture::Phi3, "Phi3ForCausalLM", "phi3"},
                               {HFArchitecture::GPT2, "GPT2LMHeadModel", "gpt2"}};

std::string supported_list(bool model_types) {
  std::string s;
  for (const ArchInfo& a : kArchs) s += std::string(s.empty() ? "" : ", ") + (model_types ? a.model_type : a.name);
  return s;
}

// The defaults of transformers' config classes (LlamaConfig, MistralConfig, Qwen2Config,
// Qwen3Config, GemmaConfig; GPT2Config's bos/eos) for the keys a config.json may leave out.
struct Defaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads;  // -1: num_attention_heads
  int64_t head_dim;             // -1: hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  double rms_norm_eps, rope_theta;
  std::optional<int64_t> bos, eos;
};
Defaults defaults_of(HFArchitecture a) {
  switch (a) {
    case HFArchitecture::Llama: return {32000, 4096, 11008, 32, 32, -1, -1, 2048, 1e-6, 10000.0, 1, 2};
    case HFArchitecture::Mistral: return {32000, 4096, 14336, 32, 32, 8, -1, 4096 * 32, 1e-6, 10000.0, 1, 2};
    case HFArchitecture::Qwen2: return {151936, 4096, 22016, 32, 32, 32, -1, 32768, 1e-6, 10000.0, {}, {}};
    case HFArchitecture::Qwen3: return {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 10000.0, {}, {}};
    case HFArchitecture::Gemma: return {256000, 3072, 24576, 28, 16, 16, 256, 8192, 1e-6, 10000.0, 2, 1};
    case HFArchitecture::Gemma2: return {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 10000.0, 2, 1};
    case HFArchitecture::Gemma3: return {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, 1000000.0, 2, 1};
    case HFArchitecture::Phi3: return {32064, 3072, 8192, 32, 32, -1, -1, 4096, 1e-5, 10000.0, 1, 32000};
    case HFArchitecture::GPT2: return {50257, 768, 3072, 12, 12, -1, -1, 1024, 1e-5, 0.0, 50256, 50256};
  }
  return {};
}

HFArchitecture read_architecture(const Keys& k) {
  std::optional<HFArchitecture> from_arch, from_type;
  if (k.has("architectures")) {
    const json& a = k.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string()) {
      if (a.is_array() && a.size() > 1) k.refuse("architectures", "exactly one architecture, one of " + supported_list(false));
      k.bad("architectures", "a list of one architecture name");
    }
    for (const ArchInfo& i : kArchs)
      if (a[0].get<std::string>() == i.name) from_arch = i.arch;
    if (!from_arch) k.refuse("architectures", "xgrad reads " + supported_list(false));
  }
  if (k.has("model_type")) {
    const std::string t = k.string("model_type", "");
    for (const ArchInfo& i : kArchs)
      if (t == i.model_type) from_type = i.arch;
    if (!from_type) k.refuse("model_type", "xgrad reads " + supported_list(true));
  }
  if (!from_arch && !from_type) k.bad("architectures", "one of " + supported_list(false) + " (or model_type given)");
  if (from_arch && from_type && *from_arch != *from_type)
    k.refuse("model_type", str_cat("it disagrees with architectures ", hf_architecture_name(*from_arch)));
  return from_arch ? *from_arch : *from_type;
}

// YaRN as transformers' _compute_yarn_parameters: factor as given, the correction range over
// original_max_position_embeddings (max_position_embeddings when absent), beta_fast 32 and
// beta_slow 1 by default (also when 0 or null, as its `or`), truncate, and attention_factor,
// else mscale / mscale_all_dim, else 0.1 ln(factor) + 1. Errors name the rope_scaling key.
RopeScaling read_yarn(const Keys& k, const Keys& rs, int64_t max_pos) {
  RopeScaling r;
  r.kind = RopeScalingKind::Yarn;
  if (!rs.has("factor")) k.bad("rope_scaling.factor", "given for rope_type \"yarn\"");
  r.factor = rs.number("factor", 0);
  if (!(r.factor > 0)) k.bad("rope_scaling.factor", "positive");
  r.original_max_seq_len = rs.integer("original_max_position_embeddings", max_pos);
  if (r.original_max_seq_len <= 0) k.bad("rope_scaling.original_max_position_embeddings", "a positive integer");
  r.beta_fast = rs.number("beta_fast", 0) != 0 ? rs.number("beta_fast", 0) : 32.0;
  r.beta_slow = rs.number("beta_slow", 0) != 0 ? rs.number("beta_slow", 0) : 1.0;
  if (!(r.beta_fast > 0)) k.bad("rope_scaling.beta_fast", "positive");
  if (!(r.beta_slow > 0)) k.bad("rope_scaling.beta_slow", "positive");
  r.truncate = rs.boolean("truncate", true);
  auto get_mscale = [&](double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; };
  const double mscale = rs.number("mscale", 0), mscale_all_dim = rs.number("mscale_all_dim", 0);
  if (rs.has("attention_factor"))
    r.attention_factor = rs.number("attention_factor", 1);
  else if (mscale != 0 && mscale_all_dim != 0)
    r.attention_factor = get_mscale(r.factor, mscale) / get_mscale(r.factor, mscale_all_dim);
  else
    r.attention_factor = get_mscale(r.factor, 1.0);
  if (!(r.attention_factor > 0)) k.bad("rope_scaling.attention_factor", "positive");
  for (const char* f : {"extrapolation_factor", "attn_factor", "low_freq_factor", "high_freq_factor"})
    if (rs.has(f)) k.refuse(std::string("rope_scaling.") + f, "transformers' yarn does not read it");
  return r;
}

RopeScaling read_rope_scaling(const Keys& k, const json& j, const std::string& source, int64_t max_pos) {
  RopeScaling r;
  if (!k.has("rope_scaling")) return r;
  const json& s = j["rope_scaling"];
  if (!s.is_object()) k.bad("rope_scaling", "an object or null");
  Keys rs(s, source);
  // transformers reads "rope_type", and "type" from older configs.
  const char* type_key = rs.has("rope_type") ? "rope_type" : "type";
  const std::string type = rs.string(type_key, "default");
  const std::string key = std::string("rope_scaling.") + type_key;
  if (type == "default") return r;
  if (type == "linear" || type == "dynamic") {
    // linear: the frequencies / factor. dynamic: transformers changes the base only for
    // sequences longer than max_position_embeddings, which xgrad's tables do not reach.
    r.kind = type == "linear" ? RopeScalingKind::Linear : RopeScalingKind::Dynamic;
    if (!rs.has("factor")) k.bad("rope_scaling.factor", str_cat("given for rope_type \"", type, "\""));
    r.factor = rs.number("factor", 0);
    if (!(r.factor > 0)) k.bad("rope_scaling.factor", "positive");
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string f = it.key();
      if (f == "original_max_position_embeddings" && type == "dynamic" &&
          rs.integer("original_max_position_embeddings", 0) == max_pos)
        continue;  // the same length: the same frequencies
      if (f != "rope_type" && f != "type" && f != "factor")
        k.refuse("rope_scaling." + f, str_cat("rope_type \"", type, "\" takes factor only"));
    }
    return r;
  }
  if (type == "yarn") return read_yarn(k, rs, max_pos);
  if (type != "llama3")
    k.refuse(key, "xgrad computes rope_scaling types \"default\", \"linear\", \"dynamic\", \"yarn\" and \"llama3\"");
  r.kind = RopeScalingKind::Llama3;
  auto need = [&](const char* f) {
    if (!rs.has(f)) k.bad(std::string("rope_scaling.") + f, "given for rope_type \"llama3\"");
  };
  for (const char* f : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) need(f);
  r.factor = rs.number("factor", 0);
  r.low_freq_factor = rs.number("low_freq_factor", 0);
  r.high_freq_factor = rs.number("high_freq_factor", 0);
  r.original_max_seq_len = rs.integer("original_max_position_embeddings", 0);
  if (!(r.factor > 0)) k.bad("rope_scaling.factor", "positive");
  if (!(r.low_freq_factor > 0)) k.bad("rope_scaling.low_freq_factor", "positive");
  if (!(r.high_freq_factor > r.low_freq_factor)) k.bad("rope_scaling.high_freq_factor", "greater than low_freq_factor");
  if (r.original_max_seq_len <= 0) k.bad("rope_scaling.original_max_position_embeddings", "a positive integer");
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string f = it.key();
    if (f != "rope_type" && f != "type" && f != "factor" && f != "low_freq_factor" && f != "high_freq_factor" &&
        f != "original_max_position_embeddings")
      k.refuse("rope_scaling." + f, "rope_type \"llama3\" takes factor, low_freq_factor, high_freq_factor and "
                                    "original_max_position_embeddings only");
  }
  return r;
}

// Each layer's sliding window (0: full attention), empty when no layer has one that masks (a
// window as long as max_position_embeddings masks nothing). Mistral: every layer; Qwen2/3 with
// use_sliding_window: layer_types, or the layers from max_window_layers on; Gemma 2:
// layer_types, or the even layers (its sliding_window defaults to 4096); Gemma 3: layer_types,
// or all but every sliding_window_pattern-th (default 6); Phi-3: every layer, as Mistral.
std::vector<int64_t> read_layer_windows(const Keys& k, HFArchitecture arch, int64_t max_pos, int64_t n_layers) {
  const bool qwen = arch == HFArchitecture::Qwen2 || arch == HFArchitecture::Qwen3;
  const bool gemma3 = arch == HFArchitecture::Gemma3;
  const bool gemma2 = arch == HFArchitecture::Gemma2 || gemma3;  // local and global layers
  if (arch == HFArchitecture::Llama || arch == HFArchitecture::Gemma) return {};
  if (!k.has("sliding_window") && !(gemma2 && !k.present("sliding_window"))) return {};  // null: none
  const int64_t window = k.positive("sliding_window", 4096);
  if (qwen && !k.boolean("use_sliding_window", false)) return {};
  std::vector<int64_t> w(static_cast<std::size_t>(n_layers), window);
  if ((qwen || gemma2) && k.has("layer_types")) {
    const json& lt = k.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != n_layers)
      k.bad("layer_types", str_cat("a list of ", n_layers, " layer types (num_hidden_layers)"));
    for (std::size_t i = 0; i < lt.size(); ++i) {
      if (lt[i] == "full_attention")
        w[i] = 0;
      else if (lt[i] != "sliding_attention")
        k.refuse("layer_types", "layer types are \"full_attention\" or \"sliding_attention\"");
    }
  } else if (qwen) {  // transformers: layers from max_window_layers on use the window
    const int64_t from = k.integer("max_window_layers", 28);
    for (int64_t i = 0; i < n_layers && i < from; ++i) w[static_cast<std::size_t>(i)] = 0;
  } else if (gemma3) {  // Gemma3TextConfig: every sliding_window_pattern-th layer is global
    const int64_t pattern = k.positive("sliding_window_pattern", 6);
    for (int64_t i = pattern - 1; i < n_layers; i += pattern) w[static_cast<std::size_t>(i)] = 0;
  } else if (gemma2) {  // Gemma2Attention: the even layers are local
    for (int64_t i = 1; i < n_layers; i += 2) w[static_cast<std::size_t>(i)] = 0;
  }
  if (window >= max_pos || std::all_of(w.begin(), w.end(), [](int64_t x) { return x == 0; })) return {};
  return w;
}

}  // namespace

const char* hf_architecture_name(HFArchitecture a) {
  for (const ArchInfo& i : kArchs)
    if (i.arch == a) return i.name;
  return "?";
}

const char* hf_naming_scheme(HFArchitecture a) {
  switch (a) {
    case HFArchitecture::GPT2: return "hf_gpt2";
    case HFArchitecture::Gemma2:
    case HFArchitecture::Gemma3: return "hf_gemma2";
    case HFArchitecture::Phi3: return "hf_phi3";
    default: return "hf_llama";
  }
}

void hf_detail::write_token_ids(json& j, const HFConfig& c) {
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  if (c.eos_token_ids.empty())
    j["eos_token_id"] = nullptr;
  else if (c.eos_is_list || c.eos_token_ids.size() > 1)
    j["eos_token_id"] = c.eos_token_ids;
  else
    j["eos_token_id"] = c.eos_token_ids[0];
}

const char* hf_model_type(HFArchitecture a) {
  for (const ArchInfo& i : kArchs)
    if (i.arch == a) return i.model_type;
  return "?";
}

namespace {
void read_llama_family(const Keys& k, const json& j, const std::string& source, HFConfig& c);
}  // namespace

HFConfig HFConfig::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(str_cat(source, ": not valid JSON (", e.what(), ")"));
  }
  check(j.is_object(), source, ": the config must be a JSON object, got ", j.dump().substr(0, 80));
  const Keys k(j, source);
  HFConfig c;
  c.architecture = read_architecture(k);
  const HFArchitecture arch = c.architecture;
  const Defaults d = defaults_of(arch);
  if (k.has("quantization_config")) k.refuse("quantization_config", "xgrad reads unquantized weights only");
  if (arch == HFArchitecture::GPT2)
    hf_detail::read_gpt2(k, c.lm);
  else
    read_llama_family(k, j, source, c);
  c.lm.validate(source);

  // torch_dtype (transformers >= 4.56 writes "dtype").
  const char* dtype_key = k.has("torch_dtype") ? "torch_dtype" : "dtype";
  c.torch_dtype = k.string(dtype_key, "float32");
  if (c.torch_dtype != "float32" && c.torch_dtype != "bfloat16" && c.torch_dtype != "float16")
    k.refuse(dtype_key, "xgrad reads weights stored as float32, bfloat16 or float16");

  bool bos_list = false;
  const std::vector<int64_t> bos = j.contains("bos_token_id") ? read_ids(k, j, "bos_token_id", bos_list)
                                                                : (d.bos ? std::vector<int64_t>{*d.bos} : std::vector<int64_t>{});
  if (bos_list && bos.size() != 1) k.bad("bos_token_id", "one integer");
  if (!bos.empty()) c.bos_token_id = bos[0];
  c.eos_token_ids = j.contains("eos_token_id") ? read_ids(k, j, "eos_token_id", c.eos_is_list)
                                               : (d.eos ? std::vector<int64_t>{*d.eos} : std::vector<int64_t>{});
  return c;
}

namespace {

// Gemma's MLP activation: hidden_activation, or gelu_pytorch_tanh when it is not given
// (transformers' GemmaMLP ignores hidden_act, with a warning).
Activation gemma_activation(const Keys& k) {
  const std::string act = k.string("hidden_activation", "gelu_pytorch_tanh");
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return Activation::GELUTanh;
  if (act == "gelu") return Activation::GELU;
  k.refuse("hidden_activation", "xgrad's GeGLU uses \"gelu_pytorch_tanh\" or \"gelu\"");
}

// Llama, Mistral, Qwen2, Qwen3 and Gemma: a Pre-Norm RMSNorm block of GQA with rotate-half RoPE
// and a gated MLP (SwiGLU; Gemma: GeGLU, RMSNorm with a unit offset, embeddings times
// sqrt(hidden_size)).
void read_llama_family(const Keys& k, const json& j, const std::string& source, HFConfig& c) {
  const HFArchitecture arch = c.architecture;
  const Defaults d = defaults_of(arch);
  const bool gemma3 = arch == HFArchitecture::Gemma3;
  const bool gemma2 = arch == HFArchitecture::Gemma2 || gemma3;  // Gemma 3 is Gemma 2's block with q/k norms
  const bool gemma = arch == HFArchitecture::Gemma || gemma2;

  // Keys that change the forward in ways xgrad does not compute.
  if (!gemma) {
    const std::string act = k.string("hidden_act", "silu");
    if (act != "silu") k.refuse("hidden_act", "xgrad's SwiGLU uses \"silu\"");
    if (k.has("hidden_activation")) k.refuse("hidden_activation", "xgrad's SwiGLU uses hidden_act \"silu\"");
  }
  if (k.boolean("mlp_bias", false)) k.refuse("mlp_bias", "xgrad's gated MLP of these architectures has no biases");
  if (k.number("attention_dropout", 0.0) != 0.0) k.refuse("attention_dropout", "xgrad reads 0.0 only");
  if (k.has("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    k.refuse("partial_rotary_factor", "xgrad rotates every feature of a head (1.0)");
  if (k.integer("pretraining_tp", 1) < 1) k.bad("pretraining_tp", "a positive integer");  // its split is exact
  if (arch == HFArchitecture::Phi3)  // dropout on the embeddings and the residual branches
    for (const char* key : {"resid_pdrop", "embd_pdrop"})
      if (k.number(key, 0.0) != 0.0) k.refuse(key, "xgrad reads 0.0 only");

  LMConfig& lm = c.lm;
  lm.vocab_size = k.positive("vocab_size", d.vocab_size);
  lm.n_layers = k.positive("num_hidden_layers", d.num_hidden_layers);
  lm.tie_embeddings = k.boolean("tie_word_embeddings", gemma);
  lm.final_norm = true;
  lm.dtype = kFloat32;
  const int64_t d_model = k.positive("hidden_size", d.hidden_size);
  const int64_t n_heads = k.positive("num_attention_heads", d.num_attention_heads);
  const int64_t n_kv_heads =
      k.positive("num_key_value_heads", d.num_key_value_heads > 0 ? d.num_key_value_heads : n_heads);
  if (n_heads % n_kv_heads != 0)
    k.bad("num_key_value_heads", str_cat("a divisor of num_attention_heads (", n_heads, ")"));
  int64_t head_dim = d.head_dim;
  if (k.has("head_dim")) head_dim = k.positive("head_dim", 0);
  if (head_dim < 0) {
    if (d_model % n_heads != 0)
      k.bad("hidden_size", str_cat("a multiple of num_attention_heads (", n_heads, ") when head_dim is not given"));
    head_dim = d_model / n_heads;
  }
  if (head_dim % 2 != 0) k.bad("head_dim", "even (RoPE rotates pairs of features)");
  const int64_t max_pos = k.positive("max_position_embeddings", d.max_position_embeddings);
  lm.layer_windows = read_layer_windows(k, arch, max_pos, lm.n_layers);

  BlockConfig b = BlockConfig::llama(d_model, n_heads, n_kv_heads);
  b.rope_layout = RopeLayout::RotateHalf;  // HF's layout: no q/k row permutation
  if (gemma2) b.norm_position = NormPosition::Sandwich;  // post_attention / pre_ and post_feedforward norms
  const double eps = k.number("rms_norm_eps", d.rms_norm_eps);
  if (!(eps > 0)) k.bad("rms_norm_eps", "positive");
  if (gemma)
    b.norm = UnitOffsetRMSNormSpec{eps};
  else
    b.norm = RMSNormSpec{eps};
  b.rope_base = k.number("rope_theta", d.rope_theta);
  if (!(b.rope_base > 0)) k.bad("rope_theta", "positive");
  b.rope_scaling = read_rope_scaling(k, j, source, max_pos);
  b.max_seq_len = max_pos;
  GQAShape gqa{n_heads, n_kv_heads, head_dim};
  const bool attention_bias = k.boolean("attention_bias", false);
  switch (arch) {
    case HFArchitecture::Llama:
    case HFArchitecture::Qwen3:
    case HFArchitecture::Gemma:
    case HFArchitecture::Gemma2:
    case HFArchitecture::Gemma3:
    case HFArchitecture::GPT2:
      gqa.qkv_bias = gqa.out_bias = attention_bias;
      break;
    case HFArchitecture::Phi3:     // Phi3Attention's qkv_proj and o_proj have no biases
    case HFArchitecture::Mistral:  // MistralAttention has no biases whatever the key says
      gqa.qkv_bias = gqa.out_bias = false;
      break;
    case HFArchitecture::Qwen2:  // q/k/v biases, none on o_proj
      gqa.qkv_bias = true;
      gqa.out_bias = false;
      break;
  }
  gqa.qk_norm = arch == HFArchitecture::Qwen3 || gemma3;
  if (gemma3) {  // the local layers' RoPE: rope_local_base_freq, unscaled
    lm.local_rope_base = k.number("rope_local_base_freq", 10000.0);
    if (!(lm.local_rope_base > 0)) k.bad("rope_local_base_freq", "positive");
  }
  if (gemma2) {
    // Gemma2Attention: scaling query_pre_attn_scalar**-0.5, scores soft-capped before the mask;
    // Gemma2ForCausalLM caps the logits. A key given as null turns the cap off.
    const double scalar = k.number("query_pre_attn_scalar", 256);
    if (!(scalar > 0)) k.bad("query_pre_attn_scalar", "positive");
    gqa.scale = std::pow(scalar, -0.5);
    // Gemma 2 caps at 50 and 30 by default, Gemma 3 not at all.
    gqa.softcap = k.present("attn_logit_softcapping") ? k.number("attn_logit_softcapping", 0) : gemma3 ? 0 : 50.0;
    lm.final_logit_softcap = k.present("final_logit_softcapping") ? k.number("final_logit_softcapping", 0)
                             : gemma3                              ? 0
                                                                   : 30.0;
    if (!(gqa.softcap >= 0)) k.bad("attn_logit_softcapping", "positive or null");
    if (!(lm.final_logit_softcap >= 0)) k.bad("final_logit_softcapping", "positive or null");
  }
  b.attention = GQASpec::of(gqa, d_model);
  const int64_t d_ff = k.positive("intermediate_size", d.intermediate_size);
  if (gemma) {
    GeGLUSpec ffn;
    ffn.d_ff = d_ff;
    ffn.activation = gemma_activation(k);
    b.ffn = ffn;
    // GemmaModel: hidden_states * torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype)
    lm.embed_scale = std::sqrt(static_cast<double>(d_model));
  } else {
    SwiGLUSpec ffn;
    ffn.d_ff = d_ff;
    b.ffn = ffn;
  }
  lm.block = b;
}

}  // namespace

std::string HFConfig::to_json() const {
  lm.validate("HFConfig");
  if (architecture == HFArchitecture::GPT2) return hf_detail::gpt2_to_json(*this);
  const bool gemma3 = architecture == HFArchitecture::Gemma3;
  const bool gemma2 = architecture == HFArchitecture::Gemma2 || gemma3;
  const bool gemma = architecture == HFArchitecture::Gemma || gemma2;
  const bool qwen = architecture == HFArchitecture::Qwen2 || architecture == HFArchitecture::Qwen3;
  const BlockConfig& b = lm.block;
  const GQAShape gqa = attention();
  const std::vector<int64_t>& lw = lm.layer_windows;
  const int64_t window = lw.empty() ? 0 : *std::max_element(lw.begin(), lw.end());
  json j;
  j["architectures"] = {hf_architecture_name(architecture)};
  j["model_type"] = hf_model_type(architecture);
  if (architecture == HFArchitecture::Llama || architecture == HFArchitecture::Qwen3 || gemma)
    j["attention_bias"] = gqa.qkv_bias;
  j["attention_dropout"] = 0.0;
  hf_detail::write_token_ids(j, *this);
  j["head_dim"] = gqa.head_dim;
  const DenseFFNShape ffn = mlp();
  if (gemma) {
    const bool tanh = ffn.activation == activation_name(Activation::GELUTanh);
    j["hidden_act"] = tanh ? "gelu_pytorch_tanh" : "gelu";
    j["hidden_activation"] = tanh ? "gelu_pytorch_tanh" : "gelu";
  } else {
    j["hidden_act"] = "silu";
  }
  j["hidden_size"] = b.d_model;
  j["intermediate_size"] = ffn.d_ff;
  j["max_position_embeddings"] = b.max_seq_len;
  if (architecture == HFArchitecture::Llama) j["mlp_bias"] = false;
  j["num_attention_heads"] = gqa.n_heads;
  j["num_hidden_layers"] = lm.n_layers;
  j["num_key_value_heads"] = gqa.n_kv_heads;
  j["rms_norm_eps"] = norm_eps(b.norm);
  if (b.rope_scaling.kind == RopeScalingKind::Llama3)
    j["rope_scaling"] = {{"factor", b.rope_scaling.factor},
                         {"high_freq_factor", b.rope_scaling.high_freq_factor},
                         {"low_freq_factor", b.rope_scaling.low_freq_factor},
                         {"original_max_position_embeddings", b.rope_scaling.original_max_seq_len},
                         {"rope_type", "llama3"}};
  else if (b.rope_scaling.kind == RopeScalingKind::Yarn)
    j["rope_scaling"] = {{"attention_factor", b.rope_scaling.attention_factor},
                         {"beta_fast", b.rope_scaling.beta_fast},
                         {"beta_slow", b.rope_scaling.beta_slow},
                         {"factor", b.rope_scaling.factor},
                         {"original_max_position_embeddings", b.rope_scaling.original_max_seq_len},
                         {"rope_type", "yarn"},
                         {"truncate", b.rope_scaling.truncate}};
  else if (b.rope_scaling.active())
    j["rope_scaling"] = {{"factor", b.rope_scaling.factor}, {"rope_type", enum_name(b.rope_scaling.kind)}};
  else
    j["rope_scaling"] = nullptr;
  j["rope_theta"] = b.rope_base;
  if (architecture != HFArchitecture::Llama && architecture != HFArchitecture::Gemma)
    j["sliding_window"] = window > 0 ? json(window) : json(nullptr);
  if (!lw.empty() && (qwen || gemma2)) {  // transformers >= 4.53 reads each layer's kind
    json types = json::array();
    for (int64_t w : lw) types.push_back(w > 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (qwen && !lw.empty()) {  // older transformers: the layers from max_window_layers on
    j["max_window_layers"] = std::find_if(lw.begin(), lw.end(), [](int64_t w) { return w > 0; }) - lw.begin();
  }
  if (gemma2) {
    // scale = query_pre_attn_scalar^-1/2, written as the integer it was read from when it is one.
    const double scalar = gqa.scale > 0 ? 1.0 / (gqa.scale * gqa.scale) : static_cast<double>(gqa.head_dim);
    const double whole = std::round(scalar);
    j["query_pre_attn_scalar"] = std::abs(scalar - whole) <= 1e-9 * whole ? json(static_cast<int64_t>(whole)) : json(scalar);
    j["attn_logit_softcapping"] = gqa.softcap > 0 ? json(gqa.softcap) : json(nullptr);
    j["final_logit_softcapping"] = lm.final_logit_softcap > 0 ? json(lm.final_logit_softcap) : json(nullptr);
    j["cache_implementation"] = "hybrid";
  }
  if (gemma3) {
    j["rope_local_base_freq"] = lm.local_rope_base > 0 ? lm.local_rope_base : b.rope_base;
    // Releases before layer_types read this: every p-th layer global, the others local.
    const int64_t p = lw.empty() ? 0 : std::find(lw.begin(), lw.end(), 0) - lw.begin() + 1;
    bool periodic = p > 0;
    for (std::size_t i = 0; i < lw.size(); ++i) periodic = periodic && ((lw[i] == 0) == ((int64_t(i) + 1) % p == 0));
    if (periodic) j["sliding_window_pattern"] = p;
  }
  if (architecture == HFArchitecture::Phi3) {
    j["embd_pdrop"] = 0.0;
    j["resid_pdrop"] = 0.0;
  }
  j["tie_word_embeddings"] = lm.tie_embeddings;
  j["torch_dtype"] = torch_dtype;
  if (qwen) j["use_sliding_window"] = !lw.empty();
  j["use_cache"] = true;
  j["vocab_size"] = lm.vocab_size;
  return j.dump(2) + "\n";
}

namespace {

const char* const kNeeds = "save_hf: a Hugging Face Llama/Mistral/Qwen2/Qwen3/Gemma/Gemma 2/Gemma 3 model needs ";

// HF's layout: rotate-half (the hf_llama scheme permutes an interleaved model's rows), float32.
HFConfig finish_from_lm(HFConfig c) {
  c.lm.block.rope_layout = RopeLayout::RotateHalf;
  c.lm.dtype = kFloat32;
  return c;
}

}  // namespace

GQAShape HFConfig::attention() const {
  const std::optional<GQAShape> g = gqa_shape(lm.block.attention, lm.block.context());
  check(g.has_value(), kNeeds, "attention gqa or mha, got ", spec_kind(lm.block.attention));
  return *g;
}

DenseFFNShape HFConfig::mlp() const {
  const std::optional<DenseFFNShape> f = dense_shape(lm.block.ffn, lm.block.context());
  if (architecture == HFArchitecture::GPT2) {
    check(f && !f->gated, "save_hf: a Hugging Face GPT-2 model needs ffn mlp, got ", spec_kind(lm.block.ffn));
    return *f;
  }
  if (architecture == HFArchitecture::Gemma || architecture == HFArchitecture::Gemma2 ||
      architecture == HFArchitecture::Gemma3) {
    check(f && f->gated && f->activation != "silu" && !f->bias, kNeeds, "ffn geglu without bias (Gemma), got ",
          spec_kind(lm.block.ffn));
    return *f;
  }
  check(f && f->gated && f->activation == "silu" && !f->bias, kNeeds, "ffn swiglu without bias, got ",
        spec_kind(lm.block.ffn));
  return *f;
}

HFConfig HFConfig::from_lm(const LMConfig& given) {
  LMConfig lm = given;
  lm.block.n_layers = lm.n_layers;
  lm.validate("save_hf");
  // A window on the block is one on every layer (HF's configs list the layers').
  if (lm.block.sliding_window > 0 && lm.layer_windows.empty())
    lm.layer_windows.assign(static_cast<std::size_t>(lm.n_layers), lm.block.sliding_window);
  lm.block.sliding_window = 0;
  if (std::all_of(lm.layer_windows.begin(), lm.layer_windows.end(), [](int64_t w) { return w == 0; }))
    lm.layer_windows.clear();
  const BlockConfig& b = lm.block;
  // GPT-2's block: LayerNorm and learned positions (nn/hf_gpt2.cpp).
  if (std::holds_alternative<LayerNormSpec>(b.norm) && b.position == PositionKind::Learned) {
    check(lm.layer_windows.empty(), "save_hf: a Hugging Face GPT-2 model has no sliding window");
    return hf_detail::gpt2_from_lm(lm);
  }
  const bool gemma = std::holds_alternative<UnitOffsetRMSNormSpec>(b.norm);
  const bool gemma2 = gemma && b.norm_position == NormPosition::Sandwich;  // or Gemma 3: with QK-Norm
  check(b.norm_position == NormPosition::Pre || gemma2, kNeeds, "norm_position pre (sandwich: Gemma 2), got ",
        norm_position_name(b.norm_position));
  check(gemma || std::holds_alternative<RMSNormSpec>(b.norm), kNeeds, "norm rmsnorm, got ", spec_kind(b.norm));
  check(b.position == PositionKind::RoPE, kNeeds, "position rope, got ", position_kind_name(b.position));
  check(lm.final_norm, kNeeds, "final_norm true");
  const double gemma_scale = std::sqrt(static_cast<double>(b.d_model));
  check(lm.embed_scale == (gemma ? gemma_scale : 1.0), kNeeds, "embed_scale ", gemma ? "sqrt(d_model)" : "1",
        " with norm ", spec_kind(b.norm), ", got ", lm.embed_scale);
  HFConfig c;
  c.lm = lm;
  if (gemma) c.architecture = gemma2 ? HFArchitecture::Gemma2 : HFArchitecture::Gemma;
  const DenseFFNShape mlp = c.mlp();
  const GQAShape gqa = c.attention();
  if (gemma2 && gqa.qk_norm) c.architecture = HFArchitecture::Gemma3;
  check(lm.local_rope_base == 0 || c.architecture == HFArchitecture::Gemma3, kNeeds,
        "no local_rope_base (Gemma 3's, with QK-Norm and sandwich norms), got ", lm.local_rope_base);
  // HF's block as from_json builds it, whatever kinds of spec described these shapes (MHA is
  // GQA with n_kv_heads = n_heads: the same parameters).
  c.lm.block.attention = GQASpec::of(gqa, b.d_model);
  check(gemma2 || (gqa.scale == 0 && gqa.softcap == 0 && lm.final_logit_softcap == 0), kNeeds,
        "the default score scale and no soft-capping (Gemma 2's), got attention scale ", gqa.scale, ", softcap ",
        gqa.softcap, ", final_logit_softcap ", lm.final_logit_softcap);
  const std::vector<int64_t>& lw = c.lm.layer_windows;
  const int64_t window = lw.empty() ? 0 : *std::max_element(lw.begin(), lw.end());
  check(std::all_of(lw.begin(), lw.end(), [&](int64_t w) { return w == 0 || w == window; }), kNeeds,
        "one sliding_window for the layers that have one, got layer_windows of ", window, " and less");
  if (gemma) {
    GeGLUSpec ffn;
    ffn.d_ff = mlp.d_ff;
    ffn.activation = mlp.activation == activation_name(Activation::GELU) ? Activation::GELU : Activation::GELUTanh;
    c.lm.block.ffn = ffn;
    check((!gqa.qk_norm || gemma2) && gqa.qkv_bias == gqa.out_bias, kNeeds,
          "q/k/v and output biases alike (Gemma's attention_bias) and QK-Norm only with sandwich norms (Gemma 3)");
    check(gemma2 || lw.empty(), kNeeds, "no sliding window with Gemma's block (Gemma 2 has sandwich norms)");
    return finish_from_lm(c);
  }
  SwiGLUSpec ffn;
  ffn.d_ff = mlp.d_ff;
  c.lm.block.ffn = ffn;
  if (gqa.qk_norm) {
    c.architecture = HFArchitecture::Qwen3;
    check(gqa.qkv_bias == gqa.out_bias, kNeeds, "q/k/v and output biases alike with QK-Norm (Qwen3's attention_bias)");
  } else if (gqa.qkv_bias && !gqa.out_bias) {
    c.architecture = HFArchitecture::Qwen2;
  } else if (!lw.empty()) {  // Mistral: the window on every layer, no biases
    c.architecture = HFArchitecture::Mistral;
    check(!gqa.qkv_bias && std::all_of(lw.begin(), lw.end(), [](int64_t w) { return w > 0; }), kNeeds,
          "a sliding window on every layer and no biases (Mistral's) or q/k/v biases (Qwen2's)");
  } else {
    c.architecture = HFArchitecture::Llama;
    check(gqa.qkv_bias == gqa.out_bias, kNeeds, "q/k/v and output biases alike (Llama's attention_bias)");
  }
  return finish_from_lm(c);
}

}  // namespace xg::nn

// GGUF models of llama.cpp's llama / qwen2 / qwen3 / phi3 / gpt2 / gemma / gemma2 / gemma3 architectures:
// the metadata keys (llama.cpp src/llama-arch.cpp LLM_KV_NAMES, read by src/llama-model.cpp
// load_hparams), the tensor names (llama-arch.cpp LLM_TENSOR_NAMES), the RoPE row layouts and
// Gemma's norm offset (convert_hf_to_gguf.py: LlamaModel permutes q/k, GemmaModel adds 1).
#include "nn/gguf_model.hpp"

#include "nn/weight_dtype.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "autograd/graph.hpp"
#include "autograd/shape.hpp"
#include "nn/hf.hpp"
#include "nn/init.hpp"

namespace xg::nn {

namespace {

// llama.cpp's general.file_type (llama.h's enum llama_ftype) for the weights' type.
uint32_t file_type(io::GgmlType t) {
  switch (t) {
    case io::GgmlType::F32: return 0;   // LLAMA_FTYPE_ALL_F32
    case io::GgmlType::F16: return 1;   // LLAMA_FTYPE_MOSTLY_F16
    case io::GgmlType::Q4_0: return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case io::GgmlType::Q8_0: return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case io::GgmlType::BF16: return 32; // LLAMA_FTYPE_MOSTLY_BF16
    default: break;  // not written (save_gguf refuses it)
  }
  return 0;
}

// Llama 3.1's RoPE scaling has no keys in llama.cpp: the converter writes the per-frequency
// divisors as the tensor rope_freqs.weight (LlamaModel.generate_extra_tensors). xgrad also
// writes the four parameters under these keys so that it reads the scaling back exactly.
constexpr const char* kRopeFreqs = "rope_freqs.weight";
constexpr const char* kScalingKeys[] = {"xgrad.rope_scaling.factor", "xgrad.rope_scaling.low_freq_factor",
                                        "xgrad.rope_scaling.high_freq_factor",
                                        "xgrad.rope_scaling.original_max_seq_len"};

// The divisors llama.cpp applies to each RoPE frequency (theta_i / rope_freqs[i]).
std::vector<float> rope_divisors(int64_t head_dim, double base, const RopeScaling& scaling) {
  const std::vector<double> plain = rope_frequencies(head_dim, base), scaled = rope_frequencies(head_dim, base, scaling);
  std::vector<float> out(plain.size());
  for (std::size_t i = 0; i < plain.size(); ++i) out[i] = static_cast<float>(plain[i] / scaled[i]);
  return out;
}

// Gemma's RMSNorms scale by (1 + weight); llama.cpp's by the weight, so its converter stores
// weight + 1 for every tensor named *norm.weight (GemmaModel.modify_tensors).
bool norm_shifted(const std::string& arch, const std::string& gguf_name) {
  const std::string suffix = "norm.weight";
  return (arch == "gemma" || arch == "gemma2" || arch == "gemma3") && gguf_name.size() >= suffix.size() &&
         gguf_name.compare(gguf_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Dims {
  int64_t d_model, n_heads, n_kv_heads, head_dim, d_ff;
};
Dims dims_of(const HFConfig& hf) {
  const GQAShape g = hf.attention();
  return {hf.lm.block.d_model, g.n_heads, g.n_kv_heads, g.head_dim, hf.mlp().d_ff};
}

// llama.cpp's gemma3 (llama-model.cpp, LLM_ARCH_GEMMA3): which layers are local is
// attention.sliding_window_pattern (a period, or one bool per layer; default every 6th layer
// global), their RoPE base rope.freq_base_swa (default 10000), unscaled; scores are scaled by
// 1/sqrt(head width) whatever the model's query_pre_attn_scalar (hidden/heads for the 27B
// model, told by its 62 blocks) and never capped; logits by final_logit_softcapping when given.
// NOTE: measured on node-llama-cpp 3.22.1's build; older llama.cpp releases hardcode the
// pattern 6 and the base 10000 and ignore both keys.
constexpr int64_t kGemma3Pattern = 6;
constexpr double kGemma3LocalBase = 10000.0;
constexpr int64_t kGemma3Blocks27B = 62;

// The query scaling llama.cpp's gemma2/gemma3 use for a model of `n_layers` blocks: the model
// Google scales by hidden/heads (`big_blocks` blocks) is told by its block count.
double gemma_scalar(int64_t n_layers, int64_t big_blocks, int64_t d_model, int64_t n_heads, int64_t head_dim) {
  return n_layers == big_blocks ? static_cast<double>(d_model / n_heads) : static_cast<double>(head_dim);
}

// A Gemma 3 model llama.cpp's gemma3 computes as xgrad does, else an error naming what differs.
void check_gemma3(const HFConfig& hf) {
  const GQAShape g = hf.attention();
  const LMConfig& lm = hf.lm;
  check(lm.tie_embeddings, "GGUF export: llama.cpp's gemma3 has no output tensor (the head is the embeddings)");
  const double scalar = gemma_scalar(lm.n_layers, kGemma3Blocks27B, lm.block.d_model, g.n_heads, g.head_dim);
  const double scale = g.scale > 0 ? g.scale : 1 / std::sqrt(static_cast<double>(g.head_dim));
  check(std::fabs(scale * std::sqrt(scalar) - 1) < 1e-12, "GGUF export: llama.cpp's gemma3 scales scores by 1/sqrt(",
        scalar, ") for ", lm.n_layers, " blocks; the model's query_pre_attn_scalar is ", 1 / (scale * scale));
  check(g.softcap == 0, "GGUF export: llama.cpp's gemma3 does not soft-cap scores; the model's attn_logit_softcapping is ",
        g.softcap);
  // One window for every local layer: HFConfig::from_lm has checked it.
  check(!lm.layer_windows.empty(), "GGUF export: llama.cpp's gemma3 has local layers with a sliding window; the model "
        "has none");
}

}  // namespace

std::string gguf_architecture(const LMConfig& config, const std::string& requested) {
  const HFConfig hf = HFConfig::from_lm(config);  // refuses what llama.cpp's architectures cannot express either
  const RopeScalingKind rs = hf.lm.block.rope_scaling.kind;
  // Linear scaling: rope.scaling.type and factor, which llama.cpp's gemma3 applies to its global layers only.
  const bool gemma3 = hf.architecture == HFArchitecture::Gemma3;
  check(rs == RopeScalingKind::None || rs == RopeScalingKind::Llama3 || (gemma3 && rs == RopeScalingKind::Linear),
        "GGUF export: RoPE scaling ", enum_name(rs), " is not written (xgrad writes Llama 3.1's, and Gemma 3's linear)");
  const std::vector<int64_t>& lw = hf.lm.layer_windows;
  const auto gelu_tanh = [&](const char* arch) {
    // llama.cpp's gpt2 and gemma graphs use ggml_gelu, the tanh approximation.
    check(hf.mlp().activation == activation_name(Activation::GELUTanh), "GGUF export: llama.cpp's ", arch,
          " computes GELU's tanh approximation, the model's MLP uses ", hf.mlp().activation);
  };
  std::string arch = "llama";
  switch (hf.architecture) {
    case HFArchitecture::Qwen3:
      // llama.cpp's qwen3 graph has no attention biases (llama-model.cpp, LLM_ARCH_QWEN3).
      check(!hf.attention().qkv_bias, "GGUF export: a model with QK-Norm is llama.cpp's qwen3, which has no attention biases");
      arch = "qwen3";
      break;
    case HFArchitecture::Qwen2: arch = "qwen2"; break;
    case HFArchitecture::GPT2: gelu_tanh("gpt2"); arch = "gpt2"; break;
    case HFArchitecture::Gemma:
      gelu_tanh("gemma");
      check(hf.lm.tie_embeddings, "GGUF export: llama.cpp's gemma has no output tensor (the head is the embeddings)");
      arch = "gemma";
      break;
    case HFArchitecture::Gemma2: {
      gelu_tanh("gemma2");
      check(hf.lm.tie_embeddings, "GGUF export: llama.cpp's gemma2 has no output tensor (the head is the embeddings)");
      const GQAShape g = hf.attention();
      // llama.cpp scales the scores by 1/sqrt(key_length) (hidden/heads only for the 27B model):
      // query_pre_attn_scalar has no key.
      check(g.scale == 0 || std::fabs(g.scale * std::sqrt(static_cast<double>(g.head_dim)) - 1) < 1e-12,
            "GGUF export: llama.cpp's gemma2 scales scores by 1/sqrt(head_dim); the model's scale is ", g.scale,
            " (query_pre_attn_scalar other than head_dim)");
      // llama.cpp applies both caps always (defaults 50 and 30 when the keys are missing).
      check(g.softcap > 0 && hf.lm.final_logit_softcap > 0,
            "GGUF export: llama.cpp's gemma2 always soft-caps scores and logits; the model's caps are ", g.softcap, " and ",
            hf.lm.final_logit_softcap);
      for (std::size_t i = 0; i < lw.size(); ++i)  // llama.cpp: the even layers are local
        check((i % 2 == 0) == (lw[i] > 0), "GGUF export: llama.cpp's gemma2 has a sliding window on the even layers, ",
              "the model's layer ", i, lw[i] > 0 ? " has one" : " has none");
      arch = "gemma2";
      break;
    }
    case HFArchitecture::Gemma3:
      gelu_tanh("gemma3");
      check_gemma3(hf);
      arch = "gemma3";
      break;
    default: break;
  }
  if (!requested.empty() && requested != arch) {
    // Phi-3 is Llama's block with fused projections: from_lm sees a Llama (or a Mistral).
    check(requested == "phi3" && arch == "llama", "GGUF export: the model is llama.cpp's ", arch, ", not ", requested);
    const GQAShape g = hf.attention();
    check(!g.qkv_bias && !g.out_bias && rs == RopeScalingKind::None,
          "GGUF export: llama.cpp's phi3 has no attention biases and xgrad writes it without RoPE scaling");
    check(std::all_of(lw.begin(), lw.end(), [&](int64_t w) { return w == lw[0]; }) && (lw.empty() || lw[0] > 0),
          "GGUF export: llama.cpp's phi3 has one sliding window on every layer");
    arch = "phi3";
  }
  check(lw.empty() || arch == "gemma2" || arch == "gemma3" || arch == "phi3", "GGUF export: a model with a sliding "
        "window is not supported by llama.cpp's ", arch, " (xgrad writes windows for gemma2, gemma3 and phi3)");
  return arch;
}

bool gguf_supported(const std::string& arch) {
  for (const char* a : {"llama", "qwen2", "qwen3", "phi3", "gpt2", "gemma", "gemma2", "gemma3"})
    if (arch == a) return true;
  return false;
}

NamingScheme gguf_naming(const std::string& arch) {
  check(gguf_supported(arch), "GGUF: architecture '", arch,
        "' is not supported (xgrad reads and writes llama, qwen2, qwen3, phi3, gpt2, gemma, gemma2 and gemma3)");
  NamingScheme s;
  s.name = "gguf_" + arch;
  s.complete = true;
  const bool gpt2 = arch == "gpt2";
  if (!gpt2) s.rope_layout = arch == "llama" ? RopeLayout::Interleaved : RopeLayout::RotateHalf;
  const std::pair<const char*, const char*> attention[] = {{"w_q", "attn_q"},      {"w_k", "attn_k"},
                                                           {"w_v", "attn_v"},      {"w_o", "attn_output"},
                                                           {"q_norm", "attn_q_norm"}, {"k_norm", "attn_k_norm"}};
  for (const auto& [x, e] : attention)
    for (const char* p : {"weight", "bias"})
      s.rules.push_back({str_cat("layers.*.attention.", x, ".", p), str_cat("blk.*.", e, ".", p), ""});
  if (gpt2 || arch == "phi3") {  // q, k and v fused into attn_qkv (GPT-2's c_attn, Phi-3's qkv_proj)
    for (const char* p : {"weight", "bias"})
      s.packs.push_back({{str_cat("layers.*.attention.w_q.", p), str_cat("layers.*.attention.w_k.", p),
                          str_cat("layers.*.attention.w_v.", p)},
                         str_cat("blk.*.attn_qkv.", p), 0});
  }
  if (arch == "phi3")  // gate and up fused into ffn_up (gate first: llama.cpp's swiglu on the halves)
    for (const auto& [gate, up] : {std::pair{"W_gate", "W_up"}, std::pair{"w_gate", "w_up"}, std::pair{"w1", "w3"}})
      s.packs.push_back({{str_cat("layers.*.ffn.", gate, ".weight"), str_cat("layers.*.ffn.", up, ".weight")},
                         "blk.*.ffn_up.weight", 0});
  const std::pair<const char*, const char*> ffn[] = {
      {"W_gate", "ffn_gate"}, {"w_gate", "ffn_gate"}, {"w1", "ffn_gate"}, {"W_down", "ffn_down"}, {"w_down", "ffn_down"},
      {"w2", "ffn_down"},     {"W_up", "ffn_up"},     {"w_up", "ffn_up"}, {"w3", "ffn_up"},     {"fc1", "ffn_up"},
      {"fc2", "ffn_down"}};
  // Weights and biases (GPT-2's LayerNorms and MLP have biases; the others have none to match).
  for (const char* p : {"weight", "bias"}) {
    for (const auto& [x, e] : ffn) s.rules.push_back({str_cat("layers.*.ffn.", x, ".", p), str_cat("blk.*.", e, ".", p), ""});
    for (const char* n : {"norm_attn", "norm1"}) s.rules.push_back({str_cat("layers.*.", n, ".", p), str_cat("blk.*.attn_norm.", p), ""});
    for (const char* n : {"norm_ffn", "norm2"}) s.rules.push_back({str_cat("layers.*.", n, ".", p), str_cat("blk.*.ffn_norm.", p), ""});
    s.rules.push_back({str_cat("norm.", p), str_cat("output_norm.", p), ""});
  }
  // Gemma 2's and 3's sandwich norms after the attention and the MLP.
  for (const char* n : {"post_norm_attn", "post_norm1"})
    s.rules.push_back({str_cat("layers.*.", n, ".weight"), "blk.*.post_attention_norm.weight", ""});
  for (const char* n : {"post_norm_ffn", "post_norm2"})
    s.rules.push_back({str_cat("layers.*.", n, ".weight"), "blk.*.post_ffw_norm.weight", ""});
  s.rules.push_back({"tok_embeddings.weight", "token_embd.weight", ""});
  s.rules.push_back({"pos.weight", "position_embd.weight", ""});  // GPT-2's learned positions
  s.rules.push_back({"output.weight", "output.weight", ""});
  return s;
}

io::GgufMetadata gguf_model_metadata(const DecoderLM& model, const GgufExportOptions& options) {
  const std::string arch = gguf_architecture(model.config(), options.architecture);
  const HFConfig hf = HFConfig::from_lm(model.config());
  const BlockConfig& b = hf.lm.block;
  const Dims d = dims_of(hf);
  const std::string a = arch + ".";
  const auto u32 = [](int64_t v) { return io::GgufValue::u32(static_cast<uint32_t>(v)); };
  const auto f32 = [](double v) { return io::GgufValue::f32(static_cast<float>(v)); };
  io::GgufMetadata m;
  m.emplace_back("general.architecture", io::GgufValue::string(arch));
  m.emplace_back("general.type", io::GgufValue::string("model"));
  m.emplace_back("general.name", io::GgufValue::string(options.name));
  m.emplace_back("general.file_type", u32(file_type(options.dtype)));
  if (io::is_block_type(options.dtype)) m.emplace_back("general.quantization_version", u32(2));  // GGML_QNT_VERSION
  m.emplace_back(a + "vocab_size", u32(hf.lm.vocab_size));
  m.emplace_back(a + "context_length", u32(b.max_seq_len));
  m.emplace_back(a + "embedding_length", u32(d.d_model));
  m.emplace_back(a + "block_count", u32(hf.lm.n_layers));
  m.emplace_back(a + "feed_forward_length", u32(d.d_ff));
  m.emplace_back(a + "attention.head_count", u32(d.n_heads));
  if (arch == "gpt2") {  // LayerNorm, learned positions, heads of n_embd / n_head
    m.emplace_back(a + "attention.layer_norm_epsilon", f32(norm_eps(b.norm)));
    return m;
  }
  m.emplace_back(a + "attention.head_count_kv", u32(d.n_kv_heads));
  // llama.cpp takes the head width from key_length (default n_embd / n_head): Qwen3's may differ.
  m.emplace_back(a + "attention.key_length", u32(d.head_dim));
  m.emplace_back(a + "attention.value_length", u32(d.head_dim));
  m.emplace_back(a + "rope.dimension_count", u32(d.head_dim));
  m.emplace_back(a + "rope.freq_base", f32(b.rope_base));
  m.emplace_back(a + "attention.layer_norm_rms_epsilon", f32(norm_eps(b.norm)));
  const std::vector<int64_t>& lw = hf.lm.layer_windows;
  if (arch == "gemma2") {
    m.emplace_back(a + "attn_logit_softcapping", f32(hf.attention().softcap));
    m.emplace_back(a + "final_logit_softcapping", f32(hf.lm.final_logit_softcap));
    // llama.cpp requires the key; a window as long as the context masks nothing.
    m.emplace_back(a + "attention.sliding_window", u32(lw.empty() ? b.max_seq_len : lw[0]));
  }
  if (arch == "gemma3") {
    m.emplace_back(a + "attention.sliding_window", u32(*std::max_element(lw.begin(), lw.end())));
    std::vector<bool> local;  // one per layer: true for a local layer (llama.cpp's swa_layers)
    for (int64_t w : lw) local.push_back(w > 0);
    m.emplace_back(a + "attention.sliding_window_pattern", io::GgufValue::bools_array(local));
    const double local_base = hf.lm.local_rope_base > 0 ? hf.lm.local_rope_base : b.rope_base;
    m.emplace_back(a + "rope.freq_base_swa", f32(local_base));
    if (hf.lm.final_logit_softcap > 0) m.emplace_back(a + "final_logit_softcapping", f32(hf.lm.final_logit_softcap));
    if (b.rope_scaling.kind == RopeScalingKind::Linear) {  // llama.cpp: freq_scale 1/factor on the global layers
      m.emplace_back(a + "rope.scaling.type", io::GgufValue::string("linear"));
      m.emplace_back(a + "rope.scaling.factor", f32(b.rope_scaling.factor));
    }
  }
  if (arch == "phi3" && !lw.empty()) m.emplace_back(a + "attention.sliding_window", u32(lw[0]));
  if (b.rope_scaling.kind == RopeScalingKind::Llama3) {
    check(arch == "llama", "GGUF export: Llama 3.1's RoPE scaling is read by llama.cpp's llama architecture only, not ", arch);
    const RopeScaling& r = b.rope_scaling;
    m.emplace_back(kScalingKeys[0], f32(r.factor));
    m.emplace_back(kScalingKeys[1], f32(r.low_freq_factor));
    m.emplace_back(kScalingKeys[2], f32(r.high_freq_factor));
    m.emplace_back(kScalingKeys[3], u32(r.original_max_seq_len));
  }
  return m;
}

std::vector<io::GgufTensorData> gguf_model_tensors(const DecoderLM& model, const GgufExportOptions& options) {
  const std::string arch = gguf_architecture(model.config(), options.architecture);
  check(options.dtype == io::GgmlType::F32 || options.dtype == io::GgmlType::F16 || options.dtype == io::GgmlType::BF16 ||
            io::is_block_type(options.dtype),
        "GGUF export: tensor type ", io::ggml_type_name(options.dtype), " is not written");
  const TensorMap dict = model.state_dict(gguf_naming(arch));
  std::vector<io::GgufTensorData> out;
  // llama.cpp's order: token_embd, then the blocks, then output_norm and output.
  const auto add = [&](const std::string& name) {
    Tensor t = dict.at(name);
    if (norm_shifted(arch, name)) {  // llama.cpp's RMSNorm has no unit offset: the converter adds it
      NoGradGuard no_grad;
      t = t.detach().to(kFloat32) + 1.0;
    }
    io::GgmlType type = t.dim() >= 2 ? options.dtype : io::GgmlType::F32;
    if (io::is_block_type(type) && t.size(-1) % kQ8Block != 0) type = io::GgmlType::F32;
    out.push_back({name, t, type});
  };
  add("token_embd.weight");
  if (dict.count("position_embd.weight")) add("position_embd.weight");
  const BlockConfig& b = model.config().block;
  if (b.rope_scaling.kind == RopeScalingKind::Llama3) {
    const Dims d = dims_of(HFConfig::from_lm(model.config()));
    const std::vector<float> div = rope_divisors(d.head_dim, b.rope_base, b.rope_scaling);
    out.push_back({kRopeFreqs, from_vector(std::vector<double>(div.begin(), div.end()), {static_cast<int64_t>(div.size())}),
                   io::GgmlType::F32});
  }
  for (int64_t i = 0; i < model.config().n_layers; ++i) {
    const std::string prefix = str_cat("blk.", i, ".");
    for (const auto& [name, t] : dict)
      if (name.rfind(prefix, 0) == 0) add(name);
  }
  for (const char* name : {"output_norm.weight", "output_norm.bias", "output.weight"})
    if (dict.count(name)) add(name);
  return out;
}

// ---------------------------------------------------------------------------------------------
// load_gguf_model

namespace {

// More positions than xgrad builds tables for is an error before anything is allocated.
void check_context(io::GgufReader& f, const std::string& arch, int64_t ctx) {
  check(ctx <= (int64_t{1} << 20), f.path(), ": ", arch, ".context_length ", ctx,
        " is more positions than xgrad builds position tables for (2^20)");
}

// A key that must be a positive integer: another value is an error naming the file and key.
int64_t positive_key(io::GgufReader& f, const std::string& key) {
  const int64_t v = f.get_int(key);
  check(v > 0, f.path(), ": ", key, " must be positive, got ", v);
  return v;
}

// Keys of computations xgrad does not do (RoPE scaling unless `scaling_read`, experts, clamping,
// and `more`): set to anything but a neutral value they are an error naming the key.
void refuse_active_keys(io::GgufReader& f, const std::string& arch, std::vector<const char*> more,
                        bool scaling_read = false) {
  std::vector<const char*> keys = {"expert_count", "attention.clamp_kqv"};
  if (!scaling_read) keys.insert(keys.end(), {"rope.scaling.type", "rope.scaling.factor", "rope.scale_linear"});
  keys.insert(keys.end(), more.begin(), more.end());
  for (const char* key : keys)
    if (f.has(arch + "." + key)) {
      const io::GgufValue& v = f.at(arch + "." + key);
      const bool neutral = (v.type == io::GgufType::String && (v.strings[0] == "none" || v.strings[0].empty())) ||
                           (v.type == io::GgufType::Float32 && (v.floats[0] == 0 || v.floats[0] == 1)) ||
                           (!v.ints.empty() && v.ints[0] == 0);
      check(neutral, f.path(), ": ", arch, ".", key, " is set; xgrad does not compute it");
    }
}

// The head width: attention.key_length (default embedding_length / head_count), which the value
// and RoPE widths must equal (xgrad's heads have one width and rotate every feature).
int64_t head_width(io::GgufReader& f, const std::string& arch, int64_t d_model, int64_t n_heads) {
  const std::string& path = f.path();
  const std::string a = arch + ".";
  const int64_t head_dim = f.has(a + "attention.key_length") ? positive_key(f, a + "attention.key_length")
                                                              : (d_model % n_heads == 0 ? d_model / n_heads : 0);
  check(head_dim > 0, path, ": ", a, "embedding_length ", d_model, " is not a multiple of head_count ", n_heads,
        " and attention.key_length is not given");
  if (f.has(a + "attention.value_length"))
    check(f.get_int(a + "attention.value_length") == head_dim, path, ": ", a, "attention.value_length ",
          f.get_int(a + "attention.value_length"), " differs from key_length ", head_dim, " (xgrad's heads have one width)");
  if (f.has(a + "rope.dimension_count"))
    check(f.get_int(a + "rope.dimension_count") == head_dim, path, ": ", a, "rope.dimension_count ",
          f.get_int(a + "rope.dimension_count"), " is not the head width ", head_dim, " (xgrad rotates every feature of a head)");
  return head_dim;
}

// The model of a llama, qwen2 or qwen3 file, built in the file's RoPE layout (no permutation).
LMConfig llama_family_config(io::GgufReader& f, const std::string& arch) {
  const std::string& path = f.path();
  const std::string a = arch + ".";
  const auto positive = [&](const std::string& key) { return positive_key(f, key); };
  const int64_t d_model = positive(a + "embedding_length");
  const int64_t n_heads = positive(a + "attention.head_count");
  const int64_t n_kv_heads = f.has(a + "attention.head_count_kv") ? positive(a + "attention.head_count_kv") : n_heads;
  check(n_heads % n_kv_heads == 0, path, ": ", a, "attention.head_count_kv (", n_kv_heads, ") must divide head_count (",
        n_heads, ")");
  const int64_t head_dim = head_width(f, arch, d_model, n_heads);
  refuse_active_keys(f, arch, {"attention.sliding_window", "attention.layer_norm_epsilon"});
  const io::GgufTensorInfo& emb = f.tensor("token_embd.weight");
  check(emb.shape.size() == 2 && emb.shape[1] == d_model, path, ": token_embd.weight has shape ", shape_str(emb.shape),
        ", expected [vocab, ", d_model, "]");
  LMConfig lm;
  lm.vocab_size = emb.shape[0];
  lm.n_layers = positive(a + "block_count");
  lm.tie_embeddings = !f.has_tensor("output.weight");
  lm.final_norm = true;
  BlockConfig b = BlockConfig::llama(d_model, n_heads, n_kv_heads);
  b.rope_layout = arch == "llama" ? RopeLayout::Interleaved : RopeLayout::RotateHalf;  // the file's: no permutation
  const double eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  check(eps > 0, path, ": ", a, "attention.layer_norm_rms_epsilon must be positive, got ", eps);
  b.norm = RMSNormSpec{eps};
  b.rope_base = f.has(a + "rope.freq_base") ? f.get_float(a + "rope.freq_base") : 10000.0;
  b.max_seq_len = positive(a + "context_length");
  GQAShape g{n_heads, n_kv_heads, head_dim};
  g.qkv_bias = arch == "qwen2" || f.has_tensor("blk.0.attn_q.bias");
  g.out_bias = arch == "llama" && f.has_tensor("blk.0.attn_output.bias");
  g.qk_norm = arch == "qwen3";
  b.attention = GQASpec::of(g, d_model);
  SwiGLUSpec ffn;
  ffn.d_ff = positive(a + "feed_forward_length");
  b.ffn = ffn;
  if (f.has_tensor(kRopeFreqs)) {
    // Llama 3.1's scaling: the xgrad.rope_scaling keys when xgrad wrote the file; else (files
    // from convert_hf_to_gguf.py carry no keys) Meta's parameters of Llama 3.1 and 3.2 (low 1,
    // high 4, original context 8192) with the largest divisor as the factor. Either way the
    // divisors llama.cpp will use must be the ones the parameters give.
    const Tensor div = f.read(kRopeFreqs);
    check(div.numel() == head_dim / 2, path, ": ", kRopeFreqs, " has ", div.numel(), " values, the head width gives ",
          head_dim / 2);
    const bool keys = f.has(kScalingKeys[0]);
    RopeScaling& r = b.rope_scaling;
    r.kind = RopeScalingKind::Llama3;
    if (keys) {
      for (const char* key : kScalingKeys) check(f.has(key), path, ": ", kScalingKeys[0], " is given without ", key);
      r.factor = f.get_float(kScalingKeys[0]);
      r.low_freq_factor = f.get_float(kScalingKeys[1]);
      r.high_freq_factor = f.get_float(kScalingKeys[2]);
      r.original_max_seq_len = f.get_int(kScalingKeys[3]);
    } else {
      r.factor = *std::max_element(div.data<float>(), div.data<float>() + div.numel());
      r.low_freq_factor = 1;
      r.high_freq_factor = 4;
      r.original_max_seq_len = 8192;
    }
    r.validate(path);
    const std::vector<float> want = rope_divisors(head_dim, b.rope_base, r);
    for (std::size_t i = 0; i < want.size(); ++i)
      check(std::fabs(div.data<float>()[i] - want[i]) <= 1e-5f * std::fabs(want[i]), path, ": ", kRopeFreqs, "[", i,
            "] = ", div.data<float>()[i], " differs from ", want[i], " of ",
            keys ? std::string("the xgrad.rope_scaling keys")
                 : str_cat("Llama 3.1's scaling (factor ", r.factor, ", low_freq_factor 1, high_freq_factor 4, original "
                           "context 8192); xgrad reads no other RoPE scaling"));
  }
  lm.block = b;
  lm.validate(path);
  // The metadata must describe the tensors before a model of that size is built: a wrong
  // count or width is an error here, not a huge allocation.
  check_context(f, arch, b.max_seq_len);
  const auto expect_shape = [&](const std::string& name, const Shape& shape) {
    check(f.has_tensor(name), path, ": tensor '", name, "' is missing (", arch, " with ", lm.n_layers, " blocks)");
    check(f.tensor(name).shape == shape, path, ": tensor '", name, "' has shape ", shape_str(f.tensor(name).shape),
          ", the metadata gives ", shape_str(shape));
  };
  expect_shape("blk.0.attn_q.weight", {n_heads * head_dim, d_model});
  expect_shape("blk.0.ffn_gate.weight", {ffn.d_ff, d_model});
  expect_shape(str_cat("blk.", lm.n_layers - 1, ".attn_norm.weight"), {d_model});
  return lm;
}

// Which layers of a gemma3 file are local, as config.json's layer_types: llama.cpp's
// attention.sliding_window_pattern, one bool per layer (true: local) or a period p (layer i
// local unless i % p == p - 1; 0: every layer local), by default 6.
nlohmann::json gemma3_layer_types(io::GgufReader& f, const std::string& arch, int64_t n_layers) {
  const std::string key = arch + ".attention.sliding_window_pattern";
  std::vector<bool> local(static_cast<std::size_t>(n_layers));
  const io::GgufValue* v = f.has(key) ? &f.at(key) : nullptr;
  if (v && v->is_array()) {
    check(static_cast<int64_t>(v->ints.size()) == n_layers, f.path(), ": ", key, " has ", v->size(),
          " values of type ", io::gguf_type_name(v->element), ", expected one bool per block (", n_layers, ")");
    for (std::size_t i = 0; i < local.size(); ++i) local[i] = v->ints[i] != 0;
  } else {
    const int64_t p = v ? f.get_int(key) : kGemma3Pattern;
    check(p >= 0, f.path(), ": ", key, " must be >= 0, got ", p);
    for (int64_t i = 0; i < n_layers; ++i) local[static_cast<std::size_t>(i)] = p == 0 || i % p < p - 1;
  }
  check(std::find(local.begin(), local.end(), true) != local.end(), f.path(), ": ", key,
        " makes every layer global (llama.cpp's gemma3 needs a local one)");
  nlohmann::json types = nlohmann::json::array();
  for (bool l : local) types.push_back(l ? "sliding_attention" : "full_attention");
  return types;
}

// llama.cpp's RoPE scaling keys of a gemma3 file as config.json's rope_scaling: none, or linear
// (rope.scaling.type "linear", the default when only a factor is given; rope.scale_linear is the
// factor's older key), which Gemma3ForCausalLM applies to the global layers as llama.cpp does.
nlohmann::json gemma3_rope_scaling(io::GgufReader& f, const std::string& arch) {
  const std::string a = arch + ".";
  const std::string type = f.has(a + "rope.scaling.type") ? f.get_string(a + "rope.scaling.type") : "linear";
  const std::string factor_key = f.has(a + "rope.scaling.factor") ? a + "rope.scaling.factor" : a + "rope.scale_linear";
  const double factor = f.has(factor_key) ? f.get_float(factor_key) : 0.0;
  check(type == "none" || type == "linear", f.path(), ": ", a, "rope.scaling.type '", type,
        "' is not read by xgrad (Gemma 3's is linear)");
  if (type == "none" || factor == 0 || factor == 1) return nullptr;
  check(factor > 0, f.path(), ": ", factor_key, " must be positive, got ", factor);
  return {{"rope_type", "linear"}, {"factor", factor}};
}

// The model of a gpt2, phi3, gemma, gemma2 or gemma3 file: its keys written as the transformers
// config.json they come from (convert_hf_to_gguf.py's inverse) and read by HFConfig::from_json,
// so the model is the one load_hf builds (rotate-half RoPE, as llama.cpp's NEOX: no permutation).
LMConfig hf_family_config(io::GgufReader& f, const std::string& arch) {
  const std::string& path = f.path();
  const std::string a = arch + ".";
  const auto positive = [&](const std::string& key) { return positive_key(f, key); };
  const int64_t d_model = positive(a + "embedding_length");
  const int64_t n_heads = positive(a + "attention.head_count");
  const int64_t n_layers = positive(a + "block_count");
  const int64_t d_ff = positive(a + "feed_forward_length");
  const int64_t ctx = positive(a + "context_length");
  check_context(f, arch, ctx);
  const io::GgufTensorInfo& emb = f.tensor("token_embd.weight");
  check(emb.shape.size() == 2 && emb.shape[1] == d_model, path, ": token_embd.weight has shape ", shape_str(emb.shape),
        ", expected [vocab, ", d_model, "]");
  const bool tied = !f.has_tensor("output.weight");
  nlohmann::json j;
  j["vocab_size"] = emb.shape[0];
  j["tie_word_embeddings"] = tied;
  int64_t head_dim = d_model % n_heads == 0 ? d_model / n_heads : 0;
  if (arch == "gpt2") {
    refuse_active_keys(f, arch, {"attention.layer_norm_rms_epsilon"});
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_embd"] = d_model;
    j["n_head"] = n_heads;
    j["n_layer"] = n_layers;
    j["n_inner"] = d_ff;
    j["n_positions"] = ctx;
    j["layer_norm_epsilon"] = f.get_float(a + "attention.layer_norm_epsilon");
    j["activation_function"] = "gelu_new";  // llama.cpp's ggml_gelu
    for (const char* k : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) j[k] = 0.0;
  } else {
    const bool gemma3 = arch == "gemma3";
    // llama.cpp's gemma3 caps no scores (its converter asserts there is no cap) and scales them
    // by the head width whatever attention.scale says: either key set is refused.
    if (gemma3)
      refuse_active_keys(f, arch, {"attention.layer_norm_epsilon", "attn_logit_softcapping", "attention.scale"}, true);
    else
      refuse_active_keys(f, arch, {"attention.layer_norm_epsilon"});
    const int64_t n_kv_heads = f.has(a + "attention.head_count_kv") ? positive(a + "attention.head_count_kv") : n_heads;
    head_dim = head_width(f, arch, d_model, n_heads);
    const bool phi3 = arch == "phi3";
    j["architectures"] = {phi3 ? "Phi3ForCausalLM" : arch == "gemma" ? "GemmaForCausalLM"
                                                 : gemma3          ? "Gemma3ForCausalLM"
                                                                   : "Gemma2ForCausalLM"};
    j["model_type"] = gemma3 ? "gemma3_text" : arch;
    j["hidden_size"] = d_model;
    j["intermediate_size"] = d_ff;
    j["num_hidden_layers"] = n_layers;
    j["num_attention_heads"] = n_heads;
    j["num_key_value_heads"] = n_kv_heads;
    j["head_dim"] = head_dim;
    j["max_position_embeddings"] = ctx;
    j["rms_norm_eps"] = f.get_float(a + "attention.layer_norm_rms_epsilon");
    j["rope_theta"] = f.has(a + "rope.freq_base") ? f.get_float(a + "rope.freq_base") : 10000.0;
    j["attention_dropout"] = 0.0;
    const bool window = f.has(a + "attention.sliding_window") && f.get_int(a + "attention.sliding_window") > 0;
    if (phi3) {
      check(!f.has_tensor("rope_factors_long.weight") && !f.has_tensor("rope_factors_short.weight"), path,
            ": rope_factors_long/short are Phi-3's LongRoPE scaling, which xgrad does not compute");
      j["hidden_act"] = "silu";
      j["original_max_position_embeddings"] = ctx;
      j["rope_scaling"] = nullptr;
      j["sliding_window"] = window ? nlohmann::json(f.get_int(a + "attention.sliding_window")) : nlohmann::json(nullptr);
      for (const char* k : {"resid_pdrop", "embd_pdrop"}) j[k] = 0.0;
    } else {
      check(tied, path, ": tensor 'output.weight': llama.cpp's ", arch, " ties the head to token_embd");
      j["hidden_activation"] = "gelu_pytorch_tanh";  // llama.cpp's ggml_gelu
      j["attention_bias"] = false;
    }
    if (arch == "gemma2") {
      // llama.cpp's defaults when the keys are missing; its 27B model (46 blocks) scales the
      // scores by hidden/heads, the others by the head width.
      j["attn_logit_softcapping"] = f.has(a + "attn_logit_softcapping") ? f.get_float(a + "attn_logit_softcapping") : 50.0;
      j["final_logit_softcapping"] = f.has(a + "final_logit_softcapping") ? f.get_float(a + "final_logit_softcapping") : 30.0;
      j["query_pre_attn_scalar"] = gemma_scalar(n_layers, 46, d_model, n_heads, head_dim);
      j["sliding_window"] = positive(a + "attention.sliding_window");
    }
    if (gemma3) {
      j["query_pre_attn_scalar"] = gemma_scalar(n_layers, kGemma3Blocks27B, d_model, n_heads, head_dim);
      j["attn_logit_softcapping"] = nullptr;
      const std::string cap = a + "final_logit_softcapping";
      j["final_logit_softcapping"] = f.has(cap) && f.get_float(cap) != 0 ? nlohmann::json(f.get_float(cap)) : nullptr;
      // A window as long as the context would be dropped by the config (it masks nothing), and
      // with it which layers are local and their RoPE base: refused.
      const int64_t window = positive(a + "attention.sliding_window");
      check(window < ctx, path, ": ", a, "attention.sliding_window ", window, " is not shorter than context_length ", ctx,
            " (xgrad would lose which layers are local)");
      j["sliding_window"] = window;
      j["layer_types"] = gemma3_layer_types(f, arch, n_layers);
      const std::string base = a + "rope.freq_base_swa";
      j["rope_local_base_freq"] = f.has(base) ? f.get_float(base) : kGemma3LocalBase;
      j["rope_scaling"] = gemma3_rope_scaling(f, arch);
    }
  }
  const LMConfig lm = HFConfig::from_json(j.dump(), path + " (its " + arch + " keys)").lm;
  // The tensors must be as large as the metadata says before a model of that size is built.
  const auto expect_shape = [&](const std::string& name, const Shape& shape) {
    check(f.has_tensor(name), path, ": tensor '", name, "' is missing (", arch, " with ", n_layers, " blocks)");
    check(f.tensor(name).shape == shape, path, ": tensor '", name, "' has shape ", shape_str(f.tensor(name).shape),
          ", the metadata gives ", shape_str(shape));
  };
  expect_shape("blk.0.attn_output.weight", {d_model, n_heads * head_dim});
  expect_shape("blk.0.ffn_down.weight", {d_model, d_ff});
  if (arch == "gpt2") expect_shape("position_embd.weight", {ctx, d_model});
  expect_shape(str_cat("blk.", n_layers - 1, ".attn_norm.weight"), {d_model});
  return lm;
}

}  // namespace

std::shared_ptr<DecoderLM> load_gguf_model(io::GgufReader& f, const LoadOptions& options) {
  const std::string& path = f.path();
  const std::string arch = f.get_string("general.architecture");
  check(gguf_supported(arch), path, ": general.architecture '", arch,
        "' is not supported (xgrad reads llama, qwen2, qwen3, phi3, gpt2, gemma, gemma2 and gemma3)");
  if (f.has("general.type"))
    check(f.get_string("general.type") == "model", path, ": general.type is '", f.get_string("general.type"),
          "', not a model (an adapter goes with --adapter)");
  const bool llama_family = arch == "llama" || arch == "qwen2" || arch == "qwen3";
  const LMConfig lm = llama_family ? llama_family_config(f, arch) : hf_family_config(f, arch);
  std::shared_ptr<DecoderLM> model;
  {
    init::SkipInitGuard skip;  // every tensor is read below (a missing one is an error), as load_hf
    // The memory check counts the matrices as they will be stored (auto: as the first block's q is).
    const std::string q = f.has_tensor("blk.0.attn_qkv.weight") ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight";
    check(f.has_tensor(q), path, ": tensor 'blk.0.attn_q.weight' is missing (", arch, ")");
    const io::GgmlType q_type = f.tensor(q).type;
    const Dtype planned =
        options.weights != WeightDtype::Auto ? weight_dtype_tensor(options.weights) : io::auto_dtype(q_type);
    StoredWeightsGuard stored(planned, lm.dtype);
    model = std::make_shared<DecoderLM>(lm);
  }
  const NamingScheme scheme = gguf_naming(arch);
  const std::map<std::string, ExternalTensor> expected = external_tensors(*model, scheme);
  // The matrices in the dtype asked for; auto keeps each as the file stores it (a block type in
  // its blocks, BF16 as bfloat16, F16 as float16, F32 as float32: io::auto_dtype), allocated before it is
  // read.
  if (options.weights != WeightDtype::F32) {
    const TensorMap params = model->state_dict();
    std::map<std::string, std::string> file_name;  // xgrad name -> the file's
    for (const auto& [n, e] : expected)
      for (const std::string& part : e.parts) file_name[part] = n;
    bool any = false;
    for (const std::string& name : weight_matrix_names(*model)) {
      Dtype d = kFloat32;
      if (options.weights != WeightDtype::Auto) {
        d = weight_dtype_tensor(options.weights);
      } else if (auto it = file_name.find(name); it != file_name.end() && f.has_tensor(it->second)) {
        d = io::auto_dtype(f.tensor(it->second).type);
      }
      Tensor w = params.at(name);
      if (is_blocked(d) && w.size(-1) % block_values(d) != 0) d = kFloat32;
      w.requires_grad_(false);
      if (d != kFloat32) w.set_data(empty(w.shape(), d));
      any = any || d != kFloat32;
    }
    model->set_widen_embeddings(any);
  }
  const TensorMap own = model->state_dict();
  std::vector<std::string> expected_names;
  for (const auto& [n, e] : expected) expected_names.push_back(n);
  std::set<std::string> loaded;
  for (const io::GgufTensorInfo& t : f.tensors()) {
    if (t.name == kRopeFreqs) continue;
    auto it = expected.find(t.name);
    check(it != expected.end(), path, ": tensor '", t.name, "' is not part of a ", arch,
          " model with this metadata (closest expected: '", closest_name(t.name, expected_names), "')");
    check(t.shape == it->second.shape, path, ": tensor '", t.name, "' has shape ", shape_str(t.shape), ", the metadata gives ",
          shape_str(it->second.shape));
    const ExternalTensor& e = it->second;
    check(!e.rope_permuted && !e.transposed, "load_gguf_model: internal error: '", t.name, "' is permuted or transposed");
    if (e.parts.size() == 1 && !norm_shifted(arch, t.name)) {
      f.read_into(t.name, own.at(e.parts[0]));
    } else {  // packed (attn_qkv, Phi-3's ffn_up) or Gemma's norm + 1: read whole, then each part
      NoGradGuard no_grad;
      Tensor whole = f.read(t.name);
      if (norm_shifted(arch, t.name)) whole = whole - 1.0;  // exact for stored values in [0.5, 2]
      int64_t offset = 0;
      for (const std::string& p : e.parts) {
        const Tensor& dst = own.at(p);
        const Tensor part = narrow(whole, e.dim, offset, dst.size(e.dim));
        offset += dst.size(e.dim);
        dst.copy_(part.dtype() == dst.dtype() ? part : part.to(dst.dtype()));
      }
    }
    loaded.insert(t.name);
  }
  for (const std::string& n : expected_names)
    check(loaded.count(n), path, ": tensor '", n, "' is missing (", arch, " with this metadata)");
  return model;
}

}  // namespace xg::nn

// GGUF models of llama.cpp's llama / qwen2 / qwen3 architectures: the metadata keys
// (llama.cpp src/llama-arch.cpp LLM_KV_NAMES, read by src/llama-model.cpp load_hparams), the
// tensor names (llama-arch.cpp LLM_TENSOR_NAMES) and the RoPE row layouts
// (convert_hf_to_gguf.py: LlamaModel permutes q/k, Qwen2Model and Qwen3Model do not).
#include "nn/gguf_model.hpp"

#include "nn/weight_dtype.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "nn/hf.hpp"
#include "nn/init.hpp"

namespace xg::nn {

namespace {

// llama.cpp's general.file_type (llama.h's enum llama_ftype) for the weights' type.
uint32_t file_type(io::GgmlType t) {
  switch (t) {
    case io::GgmlType::F32: return 0;   // LLAMA_FTYPE_ALL_F32
    case io::GgmlType::F16: return 1;   // LLAMA_FTYPE_MOSTLY_F16
    case io::GgmlType::Q8_0: return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case io::GgmlType::BF16: return 32; // LLAMA_FTYPE_MOSTLY_BF16
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

struct Dims {
  int64_t d_model, n_heads, n_kv_heads, head_dim, d_ff;
};
Dims dims_of(const HFConfig& hf) {
  const GQAShape g = hf.attention();
  return {hf.lm.block.d_model, g.n_heads, g.n_kv_heads, g.head_dim, hf.mlp().d_ff};
}

}  // namespace

std::string gguf_architecture(const LMConfig& config) {
  const HFConfig hf = HFConfig::from_lm(config);  // refuses what llama.cpp's llama family cannot express either
  check(hf.lm.layer_windows.empty(), "GGUF export: a model with a sliding window is not supported (xgrad writes ",
        "llama, qwen2 and qwen3 without one)");
  const RopeScalingKind rs = hf.lm.block.rope_scaling.kind;
  check(rs == RopeScalingKind::None || rs == RopeScalingKind::Llama3, "GGUF export: RoPE scaling ", enum_name(rs),
        " is not written (xgrad writes Llama 3.1's)");
  switch (hf.architecture) {
    case HFArchitecture::Qwen3:
      // llama.cpp's qwen3 graph has no attention biases (llama-model.cpp, LLM_ARCH_QWEN3).
      check(!hf.attention().qkv_bias, "GGUF export: a model with QK-Norm is llama.cpp's qwen3, which has no attention biases");
      return "qwen3";
    case HFArchitecture::Qwen2: return "qwen2";
    case HFArchitecture::Gemma:
    case HFArchitecture::Gemma2:
    case HFArchitecture::GPT2:
      throw Error(str_cat("GGUF export: a ", hf_architecture_name(hf.architecture),
                          " model is not supported (xgrad writes llama, qwen2 and qwen3)"));
    default: return "llama";
  }
}

NamingScheme gguf_naming(const std::string& arch) {
  check(arch == "llama" || arch == "qwen2" || arch == "qwen3", "GGUF: architecture '", arch,
        "' is not supported (xgrad reads and writes llama, qwen2 and qwen3)");
  NamingScheme s;
  s.name = "gguf_" + arch;
  s.complete = true;
  s.rope_layout = arch == "llama" ? RopeLayout::Interleaved : RopeLayout::RotateHalf;
  const std::pair<const char*, const char*> attention[] = {{"w_q", "attn_q"},      {"w_k", "attn_k"},
                                                           {"w_v", "attn_v"},      {"w_o", "attn_output"},
                                                           {"q_norm", "attn_q_norm"}, {"k_norm", "attn_k_norm"}};
  for (const auto& [x, e] : attention)
    for (const char* p : {"weight", "bias"})
      s.rules.push_back({str_cat("layers.*.attention.", x, ".", p), str_cat("blk.*.", e, ".", p), ""});
  const std::pair<const char*, const char*> ffn[] = {
      {"W_gate", "ffn_gate"}, {"w_gate", "ffn_gate"}, {"w1", "ffn_gate"}, {"W_down", "ffn_down"}, {"w_down", "ffn_down"},
      {"w2", "ffn_down"},     {"W_up", "ffn_up"},     {"w_up", "ffn_up"}, {"w3", "ffn_up"}};
  for (const auto& [x, e] : ffn) s.rules.push_back({str_cat("layers.*.ffn.", x, ".weight"), str_cat("blk.*.", e, ".weight"), ""});
  for (const char* n : {"norm_attn", "norm1"}) s.rules.push_back({str_cat("layers.*.", n, ".weight"), "blk.*.attn_norm.weight", ""});
  for (const char* n : {"norm_ffn", "norm2"}) s.rules.push_back({str_cat("layers.*.", n, ".weight"), "blk.*.ffn_norm.weight", ""});
  s.rules.push_back({"tok_embeddings.weight", "token_embd.weight", ""});
  s.rules.push_back({"norm.weight", "output_norm.weight", ""});
  s.rules.push_back({"output.weight", "output.weight", ""});
  return s;
}

io::GgufMetadata gguf_model_metadata(const DecoderLM& model, const GgufExportOptions& options) {
  const std::string arch = gguf_architecture(model.config());
  const HFConfig hf = HFConfig::from_lm(model.config());
  const BlockConfig& b = hf.lm.block;
  const Dims d = dims_of(hf);
  const std::string a = arch + ".";
  io::GgufMetadata m;
  m.emplace_back("general.architecture", io::GgufValue::string(arch));
  m.emplace_back("general.type", io::GgufValue::string("model"));
  m.emplace_back("general.name", io::GgufValue::string(options.name));
  m.emplace_back("general.file_type", io::GgufValue::u32(file_type(options.dtype)));
  if (options.dtype == io::GgmlType::Q8_0) m.emplace_back("general.quantization_version", io::GgufValue::u32(2));  // GGML_QNT_VERSION
  m.emplace_back(a + "vocab_size", io::GgufValue::u32(static_cast<uint32_t>(hf.lm.vocab_size)));
  m.emplace_back(a + "context_length", io::GgufValue::u32(static_cast<uint32_t>(b.max_seq_len)));
  m.emplace_back(a + "embedding_length", io::GgufValue::u32(static_cast<uint32_t>(d.d_model)));
  m.emplace_back(a + "block_count", io::GgufValue::u32(static_cast<uint32_t>(hf.lm.n_layers)));
  m.emplace_back(a + "feed_forward_length", io::GgufValue::u32(static_cast<uint32_t>(d.d_ff)));
  m.emplace_back(a + "attention.head_count", io::GgufValue::u32(static_cast<uint32_t>(d.n_heads)));
  m.emplace_back(a + "attention.head_count_kv", io::GgufValue::u32(static_cast<uint32_t>(d.n_kv_heads)));
  // llama.cpp takes the head width from key_length (default n_embd / n_head): Qwen3's may differ.
  m.emplace_back(a + "attention.key_length", io::GgufValue::u32(static_cast<uint32_t>(d.head_dim)));
  m.emplace_back(a + "attention.value_length", io::GgufValue::u32(static_cast<uint32_t>(d.head_dim)));
  m.emplace_back(a + "rope.dimension_count", io::GgufValue::u32(static_cast<uint32_t>(d.head_dim)));
  m.emplace_back(a + "rope.freq_base", io::GgufValue::f32(static_cast<float>(b.rope_base)));
  m.emplace_back(a + "attention.layer_norm_rms_epsilon", io::GgufValue::f32(static_cast<float>(norm_eps(b.norm))));
  if (b.rope_scaling.kind == RopeScalingKind::Llama3) {
    check(arch == "llama", "GGUF export: Llama 3.1's RoPE scaling is read by llama.cpp's llama architecture only, not ", arch);
    const RopeScaling& r = b.rope_scaling;
    m.emplace_back(kScalingKeys[0], io::GgufValue::f32(static_cast<float>(r.factor)));
    m.emplace_back(kScalingKeys[1], io::GgufValue::f32(static_cast<float>(r.low_freq_factor)));
    m.emplace_back(kScalingKeys[2], io::GgufValue::f32(static_cast<float>(r.high_freq_factor)));
    m.emplace_back(kScalingKeys[3], io::GgufValue::u32(static_cast<uint32_t>(r.original_max_seq_len)));
  }
  return m;
}

std::vector<io::GgufTensorData> gguf_model_tensors(const DecoderLM& model, const GgufExportOptions& options) {
  const std::string arch = gguf_architecture(model.config());
  check(options.dtype == io::GgmlType::F32 || options.dtype == io::GgmlType::F16 || options.dtype == io::GgmlType::BF16 ||
            options.dtype == io::GgmlType::Q8_0,
        "GGUF export: tensor type ", io::ggml_type_name(options.dtype), " is not written");
  const TensorMap dict = model.state_dict(gguf_naming(arch));
  std::vector<io::GgufTensorData> out;
  // llama.cpp's order: token_embd, then the blocks, then output_norm and output.
  const auto add = [&](const std::string& name) {
    const Tensor& t = dict.at(name);
    io::GgmlType type = t.dim() >= 2 ? options.dtype : io::GgmlType::F32;
    if (type == io::GgmlType::Q8_0 && t.size(-1) % kQ8Block != 0) type = io::GgmlType::F32;
    out.push_back({name, t, type});
  };
  add("token_embd.weight");
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
  add("output_norm.weight");
  if (dict.count("output.weight")) add("output.weight");
  return out;
}

// ---------------------------------------------------------------------------------------------
// load_gguf_model

std::shared_ptr<DecoderLM> load_gguf_model(io::GgufReader& f, const LoadOptions& options) {
  const std::string& path = f.path();
  const std::string arch = f.get_string("general.architecture");
  check(arch == "llama" || arch == "qwen2" || arch == "qwen3", path, ": general.architecture '", arch,
        "' is not supported (xgrad reads llama, qwen2 and qwen3)");
  if (f.has("general.type"))
    check(f.get_string("general.type") == "model", path, ": general.type is '", f.get_string("general.type"),
          "', not a model (an adapter goes with --adapter)");
  const std::string a = arch + ".";
  const auto positive = [&](const std::string& key) {
    const int64_t v = f.get_int(key);
    check(v > 0, path, ": ", key, " must be positive, got ", v);
    return v;
  };
  const int64_t d_model = positive(a + "embedding_length");
  const int64_t n_heads = positive(a + "attention.head_count");
  const int64_t n_kv_heads = f.has(a + "attention.head_count_kv") ? positive(a + "attention.head_count_kv") : n_heads;
  check(n_heads % n_kv_heads == 0, path, ": ", a, "attention.head_count_kv (", n_kv_heads, ") must divide head_count (",
        n_heads, ")");
  const int64_t head_dim = f.has(a + "attention.key_length") ? positive(a + "attention.key_length")
                                                              : (d_model % n_heads == 0 ? d_model / n_heads : 0);
  check(head_dim > 0, path, ": ", a, "embedding_length ", d_model, " is not a multiple of head_count ", n_heads,
        " and attention.key_length is not given");
  if (f.has(a + "attention.value_length"))
    check(f.get_int(a + "attention.value_length") == head_dim, path, ": ", a, "attention.value_length ",
          f.get_int(a + "attention.value_length"), " differs from key_length ", head_dim, " (xgrad's heads have one width)");
  if (f.has(a + "rope.dimension_count"))
    check(f.get_int(a + "rope.dimension_count") == head_dim, path, ": ", a, "rope.dimension_count ",
          f.get_int(a + "rope.dimension_count"), " is not the head width ", head_dim, " (xgrad rotates every feature of a head)");
  for (const char* key : {"rope.scaling.type", "rope.scaling.factor", "rope.scale_linear", "attention.sliding_window",
                          "expert_count", "attention.clamp_kqv", "attention.layer_norm_epsilon"})
    if (f.has(a + key)) {
      const io::GgufValue& v = f.at(a + key);
      const bool neutral = (v.type == io::GgufType::String && (v.strings[0] == "none" || v.strings[0].empty())) ||
                           (v.type == io::GgufType::Float32 && (v.floats[0] == 0 || v.floats[0] == 1)) ||
                           (!v.ints.empty() && v.ints[0] == 0);
      check(neutral, path, ": ", a, key, " is set; xgrad does not compute it");
    }

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
  check(b.max_seq_len <= (int64_t{1} << 20), path, ": ", a, "context_length ", b.max_seq_len,
        " is more positions than xgrad builds RoPE tables for (2^20)");
  const auto expect_shape = [&](const std::string& name, const Shape& shape) {
    check(f.has_tensor(name), path, ": tensor '", name, "' is missing (", arch, " with ", lm.n_layers, " blocks)");
    check(f.tensor(name).shape == shape, path, ": tensor '", name, "' has shape ", shape_str(f.tensor(name).shape),
          ", the metadata gives ", shape_str(shape));
  };
  expect_shape("blk.0.attn_q.weight", {n_heads * head_dim, d_model});
  expect_shape("blk.0.ffn_gate.weight", {ffn.d_ff, d_model});
  expect_shape(str_cat("blk.", lm.n_layers - 1, ".attn_norm.weight"), {d_model});

  std::shared_ptr<DecoderLM> model;
  {
    init::SkipInitGuard skip;  // every tensor is read below (a missing one is an error), as load_hf
    // The memory check counts the matrices as they will be stored (auto: as the first block's q is).
    const io::GgmlType q_type = f.tensor("blk.0.attn_q.weight").type;
    const Dtype planned = options.weights != WeightDtype::Auto ? weight_dtype_tensor(options.weights)
                          : q_type == io::GgmlType::Q8_0      ? kQ8_0
                          : q_type == io::GgmlType::BF16      ? kBFloat16
                                                              : kFloat32;
    StoredWeightsGuard stored(planned, lm.dtype);
    model = std::make_shared<DecoderLM>(lm);
  }
  const NamingScheme scheme = gguf_naming(arch);
  const std::map<std::string, ExternalTensor> expected = external_tensors(*model, scheme);
  // The matrices in the dtype asked for; auto keeps each as the file stores it (Q8_0 as q8_0,
  // BF16 as bfloat16; F16 and F32 as float32), allocated before it is read.
  if (options.weights != WeightDtype::F32) {
    const TensorMap params = model->state_dict();
    std::map<std::string, std::string> file_name;  // xgrad name -> the file's
    for (const auto& [n, e] : expected) file_name[e.parts[0]] = n;
    bool any = false;
    for (const std::string& name : weight_matrix_names(*model)) {
      Dtype d = kFloat32;
      if (options.weights != WeightDtype::Auto) {
        d = weight_dtype_tensor(options.weights);
      } else if (auto it = file_name.find(name); it != file_name.end() && f.has_tensor(it->second)) {
        const io::GgmlType type = f.tensor(it->second).type;
        d = type == io::GgmlType::Q8_0 ? kQ8_0 : type == io::GgmlType::BF16 ? kBFloat16 : kFloat32;
      }
      Tensor w = params.at(name);
      if (d == kQ8_0 && w.size(-1) % kQ8Block != 0) d = kFloat32;
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
    check(it->second.parts.size() == 1 && !it->second.rope_permuted, "load_gguf_model: internal error: '", t.name,
          "' is packed or permuted");
    f.read_into(t.name, own.at(it->second.parts[0]));
    loaded.insert(t.name);
  }
  for (const std::string& n : expected_names)
    check(loaded.count(n), path, ": tensor '", n, "' is missing (", arch, " with this metadata)");
  return model;
}

}  // namespace xg::nn

// save_gguf_model and save_gguf_adapter (gguf_export.hpp).
#include "finetune/gguf_export.hpp"

#include <map>

#include "finetune/lora.hpp"
#include "nn/sublayer.hpp"
#include "nn/hf.hpp"
#include "nn/naming.hpp"
#include "text/gguf_vocab.hpp"

namespace xg::finetune {

io::GgufMetadata base_tokenizer_metadata(const io::ModelSource& base, int64_t n_vocab) {
  if (base.format != io::ModelFormat::Gguf) return text::gguf_tokenizer_metadata(base, n_vocab);
  io::GgufMetadata m;
  for (const auto& [key, v] : base.gguf->metadata())
    if (key.rfind("tokenizer.", 0) == 0) m.emplace_back(key, v);
  check(!m.empty(), "GGUF export: ", base.path, " has no tokenizer metadata to copy");
  return m;
}

std::string gguf_export_architecture(const nn::DecoderLM& model, const io::ModelSource& base) {
  // A Phi-3 base (a Hugging Face Phi3ForCausalLM folder, or a phi3 GGUF) with a sliding window is
  // written as llama.cpp's phi3 (its model alone looks like a windowed Llama, which llama.cpp's
  // llama cannot run). Without a window it stays `llama`, model and adapters alike.
  const bool phi3_base = base.architecture == "Phi3ForCausalLM" || base.architecture == "phi3";
  return phi3_base && !nn::HFConfig::from_lm(model.config()).lm.layer_windows.empty() ? "phi3" : "";
}

void save_gguf_model(const nn::DecoderLM& model, const io::ModelSource& base, const std::string& path,
                     const nn::GgufExportOptions& options) {
  nn::GgufExportOptions o = options;
  if (o.architecture.empty()) o.architecture = gguf_export_architecture(model, base);
  io::GgufMetadata meta = nn::gguf_model_metadata(model, o);
  for (auto& kv : base_tokenizer_metadata(base, model.config().vocab_size)) meta.push_back(std::move(kv));
  io::save_gguf(path, meta, nn::gguf_model_tensors(model, o), "GGUF export");
}

void save_gguf_adapter(const nn::DecoderLM& model, const std::string& path, io::GgmlType dtype, const std::string& name,
                       const std::string& architecture) {
  const std::string arch = nn::gguf_architecture(model.config(), architecture);
  const nn::NamingScheme scheme = nn::gguf_naming(arch);
  const auto adapters = lora_adapters(model);
  check(!adapters.empty(), "GGUF adapter export: the model has no LoRA adapters");
  std::map<std::string, std::shared_ptr<nn::Module>> modules;
  for (const auto& [p, m] : model.named_modules()) modules[p] = m;
  double alpha = 0;
  int64_t rank = 0;
  std::vector<io::GgufTensorData> tensors;
  for (const auto& [module_path, a] : adapters) {
    // llama.cpp applies an adapter to a tensor of the base: a part of a fused one (gpt2's and
    // phi3's attn_qkv, phi3's ffn_up) has none, and llama.cpp refuses the file.
    const std::optional<std::string> fused = nn::packed_name(scheme, module_path + ".weight");
    check(!fused, "GGUF adapter export: '", module_path, "' is a part of llama.cpp's fused ", fused.value_or(""), " in ",
          arch, "; adapters on fused projections are not written (target the other projections)");
    const std::optional<std::string> w = nn::rename_tensor(scheme, module_path + ".weight");
    check(w.has_value(), "GGUF adapter export: '", module_path, "' has an adapter but no tensor in llama.cpp's ", arch);
    const int64_t r = a->A().size(0);
    // One alpha per file (adapter.lora.alpha): every adapter must scale alike.
    const double this_alpha = a->scaling() * static_cast<double>(r);
    check(rank == 0 || (r == rank && std::abs(this_alpha - alpha) <= 1e-9 * std::abs(alpha)), "GGUF adapter export: '",
          module_path, "' has r ", r, " and scaling ", a->scaling(), ", other adapters r ", rank, " and scaling ",
          alpha / static_cast<double>(rank), " (a GGUF adapter has one alpha)");
    rank = r;
    alpha = this_alpha;
    Tensor B = a->B().detach();
    // B's rows are W's output rows: a q/k projection's are in the attention's RoPE layout.
    const std::string parent = module_path.substr(0, module_path.rfind('.'));
    const std::string leaf = module_path.substr(module_path.rfind('.') + 1);
    auto it = modules.find(parent);
    const std::optional<nn::RopeParams> rope = it == modules.end() ? std::nullopt : nn::rope_params_of(*it->second);
    if (rope && rope->rows.count(leaf + ".weight")) {
      const nn::RopeRows& rows = rope->rows.at(leaf + ".weight");
      B = nn::permute_rope_rows(B, rows.n_heads, rows.head_dim, rope->layout, *scheme.rope_layout);
    }
    tensors.push_back({*w + ".lora_a", a->A().detach(), dtype});
    tensors.push_back({*w + ".lora_b", B, dtype});
  }
  io::GgufMetadata meta;
  meta.emplace_back("general.architecture", io::GgufValue::string(arch));
  meta.emplace_back("general.type", io::GgufValue::string("adapter"));
  meta.emplace_back("general.name", io::GgufValue::string(name));
  meta.emplace_back("adapter.type", io::GgufValue::string("lora"));
  meta.emplace_back("adapter.lora.alpha", io::GgufValue::f32(static_cast<float>(alpha)));
  io::save_gguf(path, meta, tensors, "GGUF adapter export");
}

}  // namespace xg::finetune

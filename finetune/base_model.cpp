// load_base (base_model.hpp).
#include "finetune/base_model.hpp"

#include <filesystem>

#include "autograd/error.hpp"
#include "io/read_file.hpp"
#include "nn/hf.hpp"

namespace xg::finetune {

BaseModel load_base(const io::ModelSource& source, const std::string& who, const nn::LoadOptions& options) {
  BaseModel b;
  b.source = source;
  if (source.format != io::ModelFormat::Xgrad) b.tokenizer = text::load_tokenizer(source);
  b.model = nn::load_model(source, options);
  // PEFT's module names for a Hugging Face model: GPT-2's and Phi-3's fused projections (c_attn,
  // qkv_proj, gate_up_proj) are written as PEFT's one LoRA each (finetune/peft.hpp).
  const char* scheme = b.hf() ? nn::hf_naming_scheme(nn::HFConfig::from_json(
                                    io::read_file(source.config_file, who), source.config_file).architecture)
                              : "xgrad";
  if (std::string(scheme) == "hf_gemma2") scheme = "hf_llama";  // the same Linear module names
  b.naming = scheme;
  if (!b.tokenizer) b.tokenizer = text::load_tokenizer(source);
  check(b.tokenizer->vocab_size() <= b.model->config().vocab_size, who, ": the tokenizer of ", source.path, " has ",
        b.tokenizer->vocab_size(), " ids but the model's vocabulary only ", b.model->config().vocab_size);
  return b;
}

BaseModel load_base(const std::string& path, const std::string& who, const nn::LoadOptions& options) {
  return load_base(io::ModelSource::open(path, who), who, options);
}

bool is_finetuned_folder(const std::string& folder) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(folder) / kFinetunedMarker, ec);
}

}  // namespace xg::finetune

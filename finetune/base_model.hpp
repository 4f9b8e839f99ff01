// The base model an executable's --base names: a Hugging Face folder, an xgrad one or a GGUF
// file (io::ModelSource), with its tokenizer and the naming scheme its modules go by (PEFT's
// for HF bases).
#pragma once

#include <memory>
#include <string>

#include "nn/decoder.hpp"
#include "nn/weight_dtype.hpp"
#include "text/tokenizer.hpp"

namespace xg::finetune {

struct BaseModel {
  io::ModelSource source;  // what the path is (format, files, dtypes), told once
  std::string naming;      // the module names its adapters use: "hf_llama", "hf_gpt2" or "hf_phi3" for an HF folder, else "xgrad" (nn/naming.hpp)
  std::shared_ptr<nn::DecoderLM> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  bool hf() const { return source.format == io::ModelFormat::HuggingFace; }
  bool gguf() const { return source.format == io::ModelFormat::Gguf; }
};

// Loads a base: its tokenizer first (a GGUF's metadata, an HF folder's tokenizer.json: the
// weights are the slow part, so a bad tokenizer fails at once), except an xgrad folder's, whose
// config.json is read first so that its errors name the config's key. A tokenizer with more ids
// than the model's vocabulary is an xg::Error starting with `who` and naming the path. The
// string form opens the path first (io::ModelSource).
// `options.weights` says how the matrices are stored (nn/weight_dtype.hpp: f32 unless asked; a
// frozen base in bf16, q8_0 or q4_0 for LoRA).
BaseModel load_base(const io::ModelSource& source, const std::string& who, const nn::LoadOptions& options = {});
BaseModel load_base(const std::string& path, const std::string& who, const nn::LoadOptions& options = {});

// xg-finetune --merge writes this file into the merged folder (xgrad or Hugging Face; a merged
// .gguf has none): {"format": "instruct", "objective": ...}. It says the model was trained on
// instruct rows, so xg-generate's --format auto formats the prompt as those rows were.
inline constexpr const char* kFinetunedMarker = "xgrad_finetune.json";
bool is_finetuned_folder(const std::string& folder);

}  // namespace xg::finetune

// The base model an executable's --base names: a Hugging Face folder, an xgrad one or a GGUF
// file, with its tokenizer and the naming scheme its modules go by (PEFT's for HF bases).
#pragma once

#include <memory>
#include <string>

#include "nn/decoder.hpp"
#include "text/tokenizer.hpp"

namespace xg::finetune {

struct BaseModel {
  bool hf = false;      // a Hugging Face folder (nn::is_hf_folder)
  bool gguf = false;    // a GGUF file (is_gguf_file)
  std::string naming;   // "hf_llama" for an HF folder, "xgrad" otherwise (nn/naming.hpp)
  std::shared_ptr<nn::DecoderLM> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
};

// Loads `folder`. A GGUF file (nn::load_gguf_model, text::load_gguf_tokenizer) is read
// tokenizer first, then the weights; its modules go by xgrad's names. An HF folder's tokenizer.json is read before the weights (they are the slow
// part, so a bad tokenizer fails at once); an xgrad folder's config.json is read first, so
// that its errors name the config's key. A tokenizer with more ids than the model's
// vocabulary is an xg::Error starting with `who` and naming the folder.
BaseModel load_base(const std::string& folder, const std::string& who);

// xg-finetune --merge writes this file into the merged folder (xgrad or Hugging Face; a merged
// .gguf has none): {"format": "instruct", "objective": ...}. It says the model was trained on
// instruct rows, so xg-generate's --format auto formats the prompt as those rows were.
inline constexpr const char* kFinetunedMarker = "xgrad_finetune.json";
bool is_finetuned_folder(const std::string& folder);

}  // namespace xg::finetune

// What a model path is, decided once: a Hugging Face folder (config.json with "architectures"
// or "model_type", weights in model.safetensors or the shards of model.safetensors.index.json,
// tokenizer.json), a Hugging Face Hub cache folder (models--<org>--<name>: the snapshot that
// refs/main names, read as the folder it is), an xgrad folder (save_pretrained's and xg-train's
// --out: config.json with LMConfig's keys, model.safetensors, the byte tokenizer) or a GGUF file.
// Every loader takes one: nn::load_model, text::load_tokenizer, text::load_chat_template,
// finetune::load_base. It reads the files' headers only (the weights stay on disk).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>

#include "io/gguf.hpp"

namespace xg::io {

enum class ModelFormat { HuggingFace, Xgrad, Gguf };

// The weights of a Hugging Face folder: one file, or shards named by the index (as the Hub and
// transformers' save_pretrained lay them out).
inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
const char* model_format_name(ModelFormat f);  // "Hugging Face folder", "xgrad folder", "GGUF file"

struct ModelSource {
  std::string path;  // as given
  std::string dir;   // the folder that holds the files (a Hub cache folder's snapshot); a GGUF's own path
  ModelFormat format = ModelFormat::Xgrad;
  // HF: config.json's "architectures"[0] (else its "model_type"); GGUF: general.architecture;
  // xgrad: "xgrad" when config.json has LMConfig's keys. Empty for a folder with no config.json,
  // or an xgrad folder whose config.json lacks them (its loader names the key).
  std::string architecture;
  std::string config_file;  // config.json (HF and xgrad folders); empty when absent

  // The weights: each file and, for a sharded folder, the tensors model.safetensors.index.json
  // puts in it (an index naming a shard the folder lacks, or a path outside it, is an error at
  // open). Empty when the folder has no weights (a tokenizer-only folder). A GGUF: the file.
  std::string index_file;                               // model.safetensors.index.json; empty if not sharded
  std::map<std::string, std::set<std::string>> shards;  // file path -> its tensors (index only)
  std::map<std::string, std::string> weight_map;        // tensor -> file path (index only)
  // Each tensor's dtype as stored ("F32", "BF16", "F16", "Q8_0", ...), read from the headers.
  std::map<std::string, std::string> dtypes;

  // The tokenizer and chat template files present (HF): tokenizer.json, tokenizer_config.json
  // and chat_template.jinja (which newer transformers write beside the config, and read in
  // preference to its "chat_template" key). A GGUF holds both in its metadata; an xgrad folder
  // has the byte tokenizer and no template.
  std::string tokenizer_file;
  std::string tokenizer_config_file;
  std::string chat_template_file;

  std::shared_ptr<GgufReader> gguf;  // a GGUF: the file, its header read once

  // Tells what `path` is. A path that does not exist, a file that is not a GGUF, a folder with
  // neither config.json nor tokenizer.json, a Hub cache folder without a snapshot, or a bad
  // weight index is an xg::Error starting with `who` and naming the path.
  static ModelSource open(const std::string& path, const std::string& who = "model");

  bool sharded() const { return !index_file.empty(); }
  // One line for logs: "Hugging Face folder <path> (Qwen3ForCausalLM, 2 shards, BF16 x 310, F32 x 1)".
  std::string describe() const;
};

}  // namespace xg::io

// load_base (base_model.hpp).
#include "finetune/base_model.hpp"

#include <filesystem>

#include "autograd/error.hpp"
#include "io/gguf.hpp"
#include "nn/gguf_model.hpp"
#include "nn/hf.hpp"
#include "text/gguf_vocab.hpp"

namespace xg::finetune {

BaseModel load_base(const std::string& folder, const std::string& who) {
  BaseModel b;
  b.gguf = io::is_gguf_file(folder);
  if (b.gguf) {
    b.naming = "xgrad";
    io::GgufReader file(folder);
    b.tokenizer = text::load_gguf_tokenizer(file);
    b.model = nn::load_gguf_model(file);
  } else {
    b.hf = nn::is_hf_folder(folder);
    b.naming = b.hf ? "hf_llama" : "xgrad";
    if (b.hf) b.tokenizer = text::load_tokenizer(folder);
    b.model = b.hf ? nn::load_hf(folder) : nn::load_pretrained(folder);
    if (!b.tokenizer) b.tokenizer = text::load_tokenizer(folder);
  }
  check(b.tokenizer->vocab_size() <= b.model->config().vocab_size, who, ": the tokenizer of ", folder, " has ",
        b.tokenizer->vocab_size(), " ids but the model's vocabulary only ", b.model->config().vocab_size);
  return b;
}

bool is_finetuned_folder(const std::string& folder) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(folder) / kFinetunedMarker, ec);
}

}  // namespace xg::finetune

// load_tokenizer: the tokenizer of a Hugging Face folder (tokenizer.json), an xgrad folder (the
// byte tokenizer) or a GGUF file (its tokenizer metadata), as io::ModelSource tells them apart.
#include "text/tokenizer.hpp"

#include "autograd/error.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/gguf_vocab.hpp"
#include "text/hf_tokenizer.hpp"

namespace xg::text {

std::unique_ptr<Tokenizer> load_tokenizer(const io::ModelSource& source) {
  if (source.format == io::ModelFormat::Gguf) return load_gguf_tokenizer(*source.gguf);
  if (!source.tokenizer_file.empty()) return HfTokenizer::from_folder(source.dir);
  // NOTE: an xgrad model folder is told apart by LMConfig's own keys, so that a Hugging Face
  // folder that lacks tokenizer.json is an error rather than a byte tokenizer.
  check(source.architecture == "xgrad", "load_tokenizer: ", source.path, " has no tokenizer.json, and its config.json ",
        "is not an xgrad model's (no \"n_layers\" and \"block\"); only tokenizer.json is read, not tokenizer.model ",
        "or vocab.json");
  return std::make_unique<ByteTokenizer>();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  return load_tokenizer(io::ModelSource::open(path, "load_tokenizer"));
}

}  // namespace xg::text

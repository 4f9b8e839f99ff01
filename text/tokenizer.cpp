// load_tokenizer: a Hugging Face folder (tokenizer.json), an xgrad folder (config.json with
// LMConfig's keys: the byte tokenizer) or a GGUF file (its tokenizer metadata).
#include "text/tokenizer.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/error.hpp"
#include "io/gguf.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/gguf_vocab.hpp"
#include "text/hf_tokenizer.hpp"

namespace xg::text {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(folder) && io::is_gguf_file(folder)) return load_gguf_tokenizer(io::GgufReader(folder));
  check(fs::is_directory(folder), "load_tokenizer: ", folder, " is not a folder");
  if (fs::exists(fs::path(folder) / "tokenizer.json")) return HfTokenizer::from_folder(folder);
  const fs::path config = fs::path(folder) / "config.json";
  check(fs::exists(config), "load_tokenizer: ", folder,
        " has neither tokenizer.json (a Hugging Face folder) nor config.json (an xgrad folder)");
  // NOTE: an xgrad model folder is told apart by LMConfig's own keys, so that a Hugging Face
  // folder that lacks tokenizer.json is an error rather than a byte tokenizer.
  std::ifstream f(config);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  const bool xgrad = j.is_object() && j.contains("n_layers") && j.contains("block");
  check(xgrad, "load_tokenizer: ", folder, " has no tokenizer.json, and its config.json is not an xgrad model's ",
        "(no \"n_layers\" and \"block\"); only tokenizer.json is read, not tokenizer.model or vocab.json");
  return std::make_unique<ByteTokenizer>();
}

}  // namespace xg::text

// The one tokenizer interface of xgrad: text <-> token ids. Implementations: the byte tokenizer
// of xgrad's own models (text/byte_tokenizer.hpp) and Hugging Face's tokenizer.json
// (text/hf_tokenizer.hpp); load_tokenizer(folder) picks the one a model folder holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace xg::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`; with add_special_tokens, the ones the tokenizer adds around a single
  // text (Llama's BOS; nothing for Qwen). Special tokens written in the text itself
  // ("<|im_start|>") are always their own ids, as in Hugging Face's tokenizers.
  virtual std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const = 0;
  // The text of `ids`, without the special tokens when skip_special_tokens. An id outside the
  // vocabulary throws.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const = 0;

  // Ids run over [0, vocab_size()), added tokens included.
  virtual int64_t vocab_size() const = 0;
  // -1 when the tokenizer has none.
  virtual int64_t bos_id() const = 0;
  virtual int64_t eos_id() const = 0;
  virtual int64_t pad_id() const = 0;

  // The id of a token as the vocabulary spells it ("Ġthe", "▁the", "<|im_end|>"), -1 when absent.
  virtual int64_t token_to_id(const std::string& token) const = 0;
  // The token of an id as the vocabulary spells it; an id outside the vocabulary throws.
  virtual std::string id_to_token(int64_t id) const = 0;
};

// The tokenizer of a model folder: a Hugging Face folder (tokenizer.json, with
// tokenizer_config.json when present), an xgrad folder (config.json and no tokenizer.json:
// the byte tokenizer) or a GGUF file (text/gguf_vocab.hpp). Anything else throws, naming the folder.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& folder);

}  // namespace xg::text

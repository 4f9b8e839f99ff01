// The one tokenizer interface of xgrad: text <-> token ids. Implementations: the byte tokenizer
// of xgrad's own models (text/byte_tokenizer.hpp) and Hugging Face's tokenizer.json
// (text/hf_tokenizer.hpp); load_tokenizer(folder) picks the one a model folder holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/model_source.hpp"

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

// The tokenizer of a model: a Hugging Face folder's (tokenizer.json, with tokenizer_config.json
// when present), an xgrad folder's (the byte tokenizer) or a GGUF file's (text/gguf_vocab.hpp).
// A Hugging Face folder without tokenizer.json throws, naming the folder. The string form opens
// the path first (io::ModelSource).
std::unique_ptr<Tokenizer> load_tokenizer(const io::ModelSource& source);
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace xg::text

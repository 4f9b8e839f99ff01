// Hugging Face's tokenizer.json (with tokenizer_config.json's bos/eos/pad tokens and
// add_bos_token/add_eos_token): BPE models, byte-level (GPT-2, Llama-3, Qwen2/3) or
// SentencePiece-style (Llama-2, Mistral, TinyLlama), checked id for id against Hugging Face's
// tokenizers (tests/test_text_hf_tokenizer.cpp; text/README.md lists what is supported).
// Anything else in the files is refused with an xg::Error naming the file, the JSON path and
// the value: `/m/tokenizer.json: pre_tokenizer.type "Whitespace" is not supported`.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "text/tokenizer.hpp"

namespace xg::text {

class HfTokenizer : public Tokenizer {
 public:
  // tokenizer_json: the path of tokenizer.json; tokenizer_config: the path of
  // tokenizer_config.json, or "" for none (then bos/eos/pad are -1).
  HfTokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config);
  // The same from the two documents already parsed (config null: none); errors name `source`
  // (text/gguf_vocab.cpp builds them from a GGUF file's tokenizer metadata).
  HfTokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& source);
  // FOLDER/tokenizer.json, with FOLDER/tokenizer_config.json when it exists.
  static std::unique_ptr<HfTokenizer> from_folder(const std::string& folder);
  ~HfTokenizer() override;

  // Text that is not valid UTF-8 throws (Hugging Face's tokenizers take only Unicode text).
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  int64_t vocab_size() const override;
  int64_t bos_id() const override;
  int64_t eos_id() const override;
  int64_t pad_id() const override;
  int64_t token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xg::text

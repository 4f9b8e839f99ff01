// The byte-level tokenizer of xgrad's own models: ids 0..255 are the bytes of the text, then
// BOS, EOS and PAD. Every byte string (UTF-8 or not) round-trips through encode/decode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"

namespace xg::text {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kBos = 256;
  static constexpr int64_t kEos = 257;
  static constexpr int64_t kPad = 258;
  static constexpr int64_t kVocabSize = 259;

  // add_bos: whether a text's special tokens are BOS before it (xgrad's convention for its byte
  // models, which xg-generate's raw format and xg-finetune's rows follow, and which a GGUF export
  // writes as tokenizer.ggml.add_bos_token); false for a GGUF file that says so, as llama.cpp reads it.
  explicit ByteTokenizer(bool add_bos = true) : add_bos_(add_bos) {}
  bool adds_bos() const { return add_bos_; }

  int64_t vocab_size() const override { return kVocabSize; }
  int64_t bos_id() const override { return kBos; }
  int64_t eos_id() const override { return kEos; }
  int64_t pad_id() const override { return kPad; }

  // The bytes of `text` as ids, with BOS before and/or EOS after when asked.
  std::vector<int64_t> encode(const std::string& text, bool bos, bool eos) const;
  std::vector<int64_t> encode(const std::string& text) const { return encode(text, false, false); }
  // The interface's special tokens of a single text: BOS before it (unless add_bos is off).
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const override {
    return encode(text, add_special_tokens && add_bos_, false);
  }
  // The bytes of the ids 0..255; BOS, EOS and PAD render as nothing, whether or not they are
  // skipped (they have no text). Any other id throws.
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(const std::vector<int64_t>& ids, bool /*skip_special_tokens*/) const override {
    return decode(ids);
  }

  // Byte ids are the one-byte strings; the special ids are "<bos>", "<eos>" and "<pad>".
  int64_t token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;

 private:
  bool add_bos_ = true;
};

}  // namespace xg::text

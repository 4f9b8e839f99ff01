// The byte-level tokenizer: ids 0..255 are the bytes of the text, then BOS, EOS and PAD.
// Every byte string (UTF-8 or not) round-trips through encode/decode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xg::finetune {

class ByteTokenizer {
 public:
  static constexpr int64_t kBos = 256;
  static constexpr int64_t kEos = 257;
  static constexpr int64_t kPad = 258;
  static constexpr int64_t kVocabSize = 259;

  int64_t vocab_size() const { return kVocabSize; }
  int64_t bos_id() const { return kBos; }
  int64_t eos_id() const { return kEos; }
  int64_t pad_id() const { return kPad; }

  // The bytes of `text` as ids, with BOS before and/or EOS after when asked.
  std::vector<int64_t> encode(const std::string& text, bool bos = false, bool eos = false) const;
  // The bytes of the ids 0..255; BOS, EOS and PAD render as nothing. Any other id throws.
  std::string decode(const std::vector<int64_t>& ids) const;
};

}  // namespace xg::finetune

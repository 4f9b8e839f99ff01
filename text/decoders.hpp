// tokenizer.json's "decoder": tokens back to text (Hugging Face's tokenizers::decoders). Each
// step maps the list of token strings to a new list, as Hugging Face's decode_chain does; the
// text is the final list joined. Supported: ByteLevel, Replace (a string), ByteFallback, Fuse,
// Strip, Metaspace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/pre_tokenizers.hpp"

namespace xg::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// The byte-level alphabet back to bytes, all tokens fused into one text (broken UTF-8 as
// U+FFFD, as Rust's from_utf8_lossy). A token with a character outside the alphabet stands for
// its own UTF-8 bytes.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// Every occurrence of `literal` in each token replaced by `content`.
class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::string content) : literal_(std::move(literal)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string literal_, content_;
};

// Runs of <0xNN> tokens as the text of their bytes (one U+FFFD per byte when not UTF-8).
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// All tokens as one.
class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// Up to `start` leading and `stop` trailing characters `content` removed from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int64_t start, int64_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string content_;  // one character
  int64_t start_, stop_;
};

// `replacement` back to ' ', and dropped in the first token unless the scheme never prepends.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme) : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : steps_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace xg::text

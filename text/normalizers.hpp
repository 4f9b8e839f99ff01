// tokenizer.json's "normalizer": what is done to the text before it is split (Hugging Face's
// tokenizers::normalizers). Supported: NFC, Prepend, Replace (a string or a regex), Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/regex.hpp"

namespace xg::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

// Unicode Normalization Form C.
class NfcNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override;
};

// `prefix` before any non-empty text (SentencePiece's "▁" of Llama-2).
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override;

 private:
  std::string prefix_;
};

// Every match of a literal string, or of a regex, replaced by `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  ReplaceNormalizer(Regex regex, std::string content)
      : regex_(std::make_unique<Regex>(std::move(regex))), content_(std::move(content)) {}
  void normalize(std::string& s) const override;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;  // set for a regex pattern
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& s) const override {
    for (const auto& n : steps_) n->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace xg::text

// tokenizer.json's "pre_tokenizer": how normalized text is cut into the words that the BPE model
// merges within (Hugging Face's tokenizers::pre_tokenizers). Supported: ByteLevel (GPT-2's split
// regex optional), Split (a string or regex; behaviors Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous; invert), Metaspace, Sequence.
// NOTE: the byte-level alphabet (bytes as printable characters) is not applied here: a
// byte-level tokenizer keeps words as raw bytes and its vocabulary is read in bytes
// (text/bpe.hpp), which gives the same ids without a pass of re-encoding.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/regex.hpp"

namespace xg::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Cuts each of `words` further, in place. `at_start`: the first word begins the whole input
  // (Metaspace's prepend_scheme "first").
  virtual void pre_tokenize(std::vector<std::string>& words, bool at_start) const = 0;
  // True when the words are bytes of the byte-level alphabet (a ByteLevel pre-tokenizer).
  virtual bool byte_level() const { return false; }
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Cuts at the matches of a pattern, keeping or merging them by `behavior` (with `invert`, the
// matches are the words and what lies between them is the delimiter).
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, std::string literal, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<std::string>& words, bool at_start) const override;

 private:
  std::unique_ptr<Regex> regex_;  // null for a literal pattern
  std::string literal_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's byte level: a space before each word that has none (add_prefix_space) and GPT-2's
// split regex (use_regex).
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void pre_tokenize(std::vector<std::string>& words, bool at_start) const override;
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> split_;  // GPT-2's regex, when used
};

enum class PrependScheme { Always, First, Never };

// SentencePiece's spaces: ' ' becomes `replacement` ("▁"), prepended by `scheme`; with `split`,
// a word starts at each replacement.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<std::string>& words, bool at_start) const override;

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<std::string>& words, bool at_start) const override {
    for (const auto& p : steps_) p->pre_tokenize(words, at_start);
  }
  bool byte_level() const override {
    for (const auto& p : steps_)
      if (p->byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace xg::text

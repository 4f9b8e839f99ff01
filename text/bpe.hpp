// The BPE model of tokenizer.json (Hugging Face's tokenizers::models::bpe): a word becomes its
// characters' ids (bytes for a byte-level vocabulary; <0xNN> tokens for SentencePiece's
// byte_fallback; the unknown token, fused or not, otherwise), merged by rank with a priority
// queue over a linked list of symbols, as Hugging Face's Word::merge_all does: O(n log n) in
// the word's length, since SentencePiece-style files have no pre-tokenizer and a whole
// paragraph is one word (which is cut before its "▁"s where the vocabulary allows, see
// encode_word). Words shorter than 256 bytes are cached.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xg::text {

struct BpeOptions {
  // The vocabulary spells bytes in GPT-2's byte-level alphabet ("Ġ" is the byte ' ').
  bool byte_level = false;
  // A character outside the vocabulary becomes its bytes' <0xNN> tokens when all exist.
  bool byte_fallback = false;
  // Consecutive unknown characters become one unknown token.
  bool fuse_unk = false;
  // A word that is a token is that token, unmerged (Llama-3).
  bool ignore_merges = false;
  int32_t unk_id = -1;  // -1: unknown characters are dropped (as Hugging Face does)
};

class Bpe {
 public:
  // tokens[id]: the token of each id as the file spells it ("" where no token has that id);
  // merges in rank order, as pairs of ids; merged[r]: the id of merge r's result.
  Bpe(const std::vector<std::string>& tokens, const std::vector<std::pair<int32_t, int32_t>>& merges,
      const std::vector<int32_t>& merged, const BpeOptions& options);
  ~Bpe();

  // Appends the ids of one pre-tokenized word (bytes, not the byte-level alphabet) to `out`.
  void encode_word(const std::string& word, std::vector<int64_t>& out) const;
  // The id of a word as the model reads it (bytes for a byte-level vocabulary), or -1.
  int32_t word_id(std::string_view word) const;

 private:
  struct Tables;
  void encode_piece(const std::string& word, std::vector<int64_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;

  BpeOptions options_;
  std::unique_ptr<Tables> tables_;
  bool split_at_metaspace_ = false;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace xg::text

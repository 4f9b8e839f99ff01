// ByteTokenizer: bytes <-> ids 0..255, special ids 256..258.
#include "text/byte_tokenizer.hpp"

#include "autograd/error.hpp"

namespace xg::text {

namespace {

const char* const kSpecialNames[] = {"<bos>", "<eos>", "<pad>"};

}  // namespace

std::vector<int64_t> ByteTokenizer::encode(const std::string& text, bool bos, bool eos) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() + 2);
  if (bos) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(c);
  if (eos) ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string s;
  s.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id >= 0 && id < 256) {
      s.push_back(static_cast<char>(static_cast<unsigned char>(id)));
    } else if (id < 256 || id >= kVocabSize) {
      throw Error(str_cat("ByteTokenizer::decode: id ", id, " at position ", i, " is outside the vocabulary [0, ",
                          kVocabSize, ")"));
    }
  }
  return s;
}

int64_t ByteTokenizer::token_to_id(const std::string& token) const {
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  for (int64_t k = 0; k < 3; ++k)
    if (token == kSpecialNames[k]) return kBos + k;
  return -1;
}

std::string ByteTokenizer::id_to_token(int64_t id) const {
  check(id >= 0 && id < kVocabSize, "ByteTokenizer::id_to_token: id ", id, " is outside the vocabulary [0, ", kVocabSize,
        ")");
  if (id < 256) return std::string(1, static_cast<char>(static_cast<unsigned char>(id)));
  return kSpecialNames[id - kBos];
}

}  // namespace xg::text

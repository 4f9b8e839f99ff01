// ByteTokenizer: bytes <-> ids 0..255, special ids 256..258.
#include "finetune/tokenizer.hpp"

#include "autograd/error.hpp"

namespace xg::finetune {

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

}  // namespace xg::finetune

// Tests for finetune/tokenizer: byte ids, special ids, and round trips of any byte string.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "finetune/tokenizer.hpp"
#include "torch_fixture.hpp"

using xg::finetune::ByteTokenizer;

TEST(FinetuneTokenizer, SpecialIdsAndVocab) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_id(), 257);
  EXPECT_EQ(tok.pad_id(), 258);
}

TEST(FinetuneTokenizer, EncodeIsBytesWithOptionalBosEos) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.encode("Hi!"), (std::vector<int64_t>{72, 105, 33}));
  EXPECT_EQ(tok.encode("Hi", true, true), (std::vector<int64_t>{256, 72, 105, 257}));
  EXPECT_EQ(tok.encode("", true, false), (std::vector<int64_t>{256}));
  // UTF-8 "é" is two bytes, each an id; bytes >= 128 are not negative.
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<int64_t>{0xC3, 0xA9}));
}

TEST(FinetuneTokenizer, DecodeRoundTripsEveryByteAndSkipsSpecials) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "\xFF\xFE not UTF-8 \x80";
  EXPECT_EQ(tok.decode(tok.encode(all, true, true)), all);
  EXPECT_EQ(tok.decode({256, 65, 258, 66, 257, 258}), "AB");
}

TEST(FinetuneTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  ByteTokenizer tok;
  EXPECT_XG_ERROR(tok.decode({65, 259}), "id 259 at position 1 is outside the vocabulary [0, 259)");
  EXPECT_XG_ERROR(tok.decode({-1}), "id -1 at position 0");
}

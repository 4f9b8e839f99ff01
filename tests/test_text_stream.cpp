// Tests for text/text_stream.cpp: incremental text of generated tokens (never half a UTF-8
// character, never the start of a stop string that may still complete) and stop strings.
#include "text/text_stream.hpp"

#include <gtest/gtest.h>

#include "tests/torch_fixture.hpp"
#include "text/byte_tokenizer.hpp"

namespace text_stream_tests {

using xg::text::ByteTokenizer;
using xg::text::TextStream;

std::vector<int64_t> bytes(const std::string& s) {
  std::vector<int64_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

// Pushes the bytes of `s` one token each, collecting what take_ready shows after each.
std::string push_all(TextStream& st, const std::string& s) {
  std::string shown;
  for (int64_t id : bytes(s)) {
    if (st.push(id)) break;
    shown += st.take_ready();
  }
  return shown;
}

TEST(TextStream, ShowsWholeCharactersOnly) {
  ByteTokenizer tok;
  TextStream st(tok, {}, {});
  // "é" is two bytes, "€" three: each shows once complete.
  const std::string text = "a\xC3\xA9\xE2\x82\xAC!";
  std::vector<std::string> steps;
  for (int64_t id : bytes(text)) {
    st.push(id);
    steps.push_back(st.take_ready());
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "\xE2\x82\xAC", "!"}));
  EXPECT_EQ(st.take_rest(), "");
  EXPECT_EQ(st.text(), text);
}

TEST(TextStream, StopStringEndsTheTextBeforeIt) {
  ByteTokenizer tok;
  TextStream st(tok, bytes("Q: "), {"\nQ:", "END"});
  const std::string shown = push_all(st, "four\nQ: next");
  EXPECT_TRUE(st.stopped());
  // The newline waited (it may start "\nQ:"); nothing of the stop string was ever shown.
  EXPECT_EQ(shown, "four");
  EXPECT_EQ(st.take_rest(), "");
  EXPECT_EQ(st.text(), "four");
  EXPECT_EQ(st.tokens().size(), 7u);  // the token that completed the stop string is kept
  EXPECT_XG_ERROR(st.push('x'), "TextStream: push after a stop string ended the sequence");
}

TEST(TextStream, APrefixOfAStopStringThatDoesNotCompleteIsShownLater) {
  ByteTokenizer tok;
  TextStream st(tok, {}, {"STOP"});
  EXPECT_EQ(push_all(st, "a STO"), "a ");  // "STO" held back
  EXPECT_FALSE(st.stopped());
  st.push('P');
  EXPECT_TRUE(st.stopped());
  EXPECT_EQ(st.take_rest(), "");
  EXPECT_EQ(st.text(), "a ");
  TextStream other(tok, {}, {"STOP"});
  push_all(other, "a STO");
  other.push('!');  // "STO!" can no longer become "STOP"
  EXPECT_EQ(other.take_ready(), "STO!");
  EXPECT_FALSE(other.stopped());
}

// The earliest of several stop strings wins, wherever in the text it lies.
TEST(TextStream, EarliestStopStringWins) {
  ByteTokenizer tok;
  TextStream st(tok, {}, {"cd", "bcde"});
  push_all(st, "abcdef");
  EXPECT_TRUE(st.stopped());
  EXPECT_EQ(st.text(), "ab");  // "bcde" starts earlier but completes later: "cd" stopped first
}

TEST(TextStream, ThePrefixIsNotPartOfTheText) {
  ByteTokenizer tok;
  TextStream st(tok, bytes("STOP here"), {"STOP"});  // a stop string inside the prompt does not count
  push_all(st, " and on");
  EXPECT_FALSE(st.stopped());
  EXPECT_EQ(st.text(), " and on");
  EXPECT_XG_ERROR(TextStream(tok, {}, {""}), "TextStream: a stop string is empty");
}

}  // namespace text_stream_tests

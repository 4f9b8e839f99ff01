// Generated tokens as text while they come: what can be shown so far (never half a UTF-8
// character, never the start of a stop string that may still complete) and where a stop
// string ends the generation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"

namespace xg::text {

// One generated sequence. The text is always the decoding of the prefix and the tokens so far
// (so that a decoder that treats the first token specially, as SentencePiece's leading space,
// sees the sequence whole), minus the prefix's own text.
//
// Stop strings are searched in the generated text only. NOTE: as llama.cpp's server and the
// OpenAI API do, the text ends before the stop string; transformers' stop_strings keep it in
// the ids (it is a stopping criterion on the ids): tokens() keeps the token that completed it.
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<int64_t> prefix, std::vector<std::string> stop_strings,
             bool skip_special_tokens = true);

  // Adds a token; returns true when the text now holds a stop string (the sequence is over).
  // After that, push is an error.
  bool push(int64_t id);
  // The part of the text not returned before that can be shown now: up to a possible start of a
  // stop string and up to the last whole character.
  std::string take_ready();
  // What is left to show once the sequence is over (the text up to the stop string).
  std::string take_rest();

  const std::string& text() {  // the generated text so far, stop string cut off
    refresh();
    return text_;
  }
  const std::vector<int64_t>& tokens() const { return tokens_; }
  bool stopped() const { return stopped_; }

 private:
  std::size_t ready_end() const;
  // Decodes the tokens into text_ (and finds a stop string) when tokens came since the last time.
  void refresh();

  const Tokenizer& tok_;
  std::vector<int64_t> ids_;  // prefix + tokens
  std::size_t prefix_len_;
  std::string prefix_text_;
  std::vector<std::string> stops_;
  bool skip_special_;
  std::vector<int64_t> tokens_;
  std::string text_;
  std::size_t shown_ = 0;  // bytes of text_ returned by take_ready / take_rest
  bool stopped_ = false;
  bool stale_ = false;  // tokens pushed since text_ was decoded
};

}  // namespace xg::text

// TextStream: incremental decoding for streaming output and stop strings.
#include "text/text_stream.hpp"

#include <algorithm>

#include "autograd/error.hpp"

namespace xg::text {

TextStream::TextStream(const Tokenizer& tok, std::vector<int64_t> prefix, std::vector<std::string> stop_strings,
                       bool skip_special_tokens)
    : tok_(tok), ids_(std::move(prefix)), stops_(std::move(stop_strings)), skip_special_(skip_special_tokens) {
  for (const std::string& s : stops_) check(!s.empty(), "TextStream: a stop string is empty");
  prefix_len_ = ids_.size();
  prefix_text_ = tok_.decode(ids_, skip_special_);
}

bool TextStream::push(int64_t id) {
  check(!stopped_, "TextStream: push after a stop string ended the sequence");
  ids_.push_back(id);
  tokens_.push_back(id);
  stale_ = true;
  // NOTE: decoding is the whole sequence again (a token can change how earlier bytes read), so
  // without stop strings it waits until the text is asked for: a batch that nobody streams
  // decodes once at the end, not once per token.
  if (!stops_.empty()) refresh();
  return stopped_;
}

void TextStream::refresh() {
  if (!stale_) return;
  stale_ = false;
  std::string all = tok_.decode(ids_, skip_special_);
  // The generated part: after the prefix's text when the whole decodes to it followed by more
  // (always, for byte-level BPE); else the tokens decoded alone.
  std::string fresh = all.compare(0, prefix_text_.size(), prefix_text_) == 0
                          ? all.substr(prefix_text_.size())
                          : tok_.decode(std::vector<int64_t>(ids_.begin() + static_cast<std::ptrdiff_t>(prefix_len_), ids_.end()),
                                        skip_special_);
  // The earliest stop string in the whole generated text wins (the text is decoded afresh each
  // time: a token can change how the bytes before it read).
  std::size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, fresh.find(s));
  if (cut != std::string::npos) {
    fresh.resize(cut);
    stopped_ = true;
  }
  text_ = std::move(fresh);
  if (shown_ > text_.size()) shown_ = text_.size();  // a decoder that rewrote what came before
}

// Up to the last whole UTF-8 character and before the longest suffix of the text that is a
// proper prefix of some stop string (it may still become one).
std::size_t TextStream::ready_end() const {
  std::size_t end = text_.size();
  if (!stopped_) {
    for (const std::string& s : stops_) {
      for (std::size_t k = std::min(s.size() - 1, text_.size()); k > 0; --k) {
        if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
          end = std::min(end, text_.size() - k);
          break;
        }
      }
    }
  }
  // Back off an incomplete trailing character: the lead byte's length against what follows it;
  // and U+FFFD at the end (a byte-level decoder's stand-in for a character still incomplete).
  std::size_t lead = end;
  while (lead > 0 && lead + 4 > end && (static_cast<unsigned char>(text_[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead > 0) {
    const unsigned char c = static_cast<unsigned char>(text_[lead - 1]);
    const std::size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (end - (lead - 1) < need) end = lead - 1;
  }
  static const std::string kReplacement = "\xEF\xBF\xBD";
  if (!stopped_ && end >= 3 && text_.compare(end - 3, 3, kReplacement) == 0) end -= 3;
  return std::max(end, shown_);
}

std::string TextStream::take_ready() {
  refresh();
  const std::size_t end = ready_end();
  std::string out = text_.substr(shown_, end - shown_);
  shown_ = end;
  return out;
}

std::string TextStream::take_rest() {
  refresh();
  std::string out = text_.substr(std::min(shown_, text_.size()));
  shown_ = text_.size();
  return out;
}

}  // namespace xg::text

// The pre-tokenizers of tokenizer.json: Split, ByteLevel, Metaspace, Sequence; and their JSON.
#include "text/pre_tokenizers.hpp"

#include <utility>

#include "text/detail/hf_parse.hpp"

namespace xg::text {

namespace {

// GPT-2's split regex (Hugging Face's ByteLevel pre-tokenizer with use_regex).
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Span {
  std::size_t begin, end;
  bool is_match;
};

// Hugging Face's SplitDelimiterBehavior on the spans of one word (gaps and matches, in order).
std::vector<Span> apply_behavior(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<Span> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      return spans;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      return out;
    case SplitBehavior::MergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
    case SplitBehavior::MergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back(*it);
        }
        previous_match = it->is_match;
      }
      return {out.rbegin(), out.rend()};
    case SplitBehavior::Contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back(s);
        }
        previous_match = s.is_match;
      }
      return out;
  }
  return out;
}

}  // namespace

void SplitPreTokenizer::pre_tokenize(std::vector<std::string>& words, bool /*at_start*/) const {
  std::vector<std::string> out;
  out.reserve(words.size() * 4);
  std::vector<Span> spans;
  for (const std::string& w : words) {
    spans.clear();
    std::size_t last = 0;
    const auto on_match = [&](std::size_t b, std::size_t e) {
      if (b > last) spans.push_back({last, b, invert_});
      spans.push_back({b, e, !invert_});
      last = e;
    };
    if (regex_) {
      regex_->for_each_match(w, on_match);
    } else if (!literal_.empty()) {
      for (std::size_t at = w.find(literal_); at != std::string::npos; at = w.find(literal_, last))
        on_match(at, at + literal_.size());
    }
    if (last < w.size()) spans.push_back({last, w.size(), invert_});
    if (behavior_ == SplitBehavior::Isolated) {
      for (const Span& s : spans) out.emplace_back(w, s.begin, s.end - s.begin);
    } else {
      for (const Span& s : apply_behavior(spans, behavior_))
        if (s.end > s.begin) out.emplace_back(w, s.begin, s.end - s.begin);
    }
  }
  words = std::move(out);
}

ByteLevelPreTokenizer::ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
  if (use_regex)
    split_ = std::make_unique<SplitPreTokenizer>(std::make_unique<Regex>(kGpt2Pattern, "ByteLevel"), "",
                                                 SplitBehavior::Isolated, false);
}

void ByteLevelPreTokenizer::pre_tokenize(std::vector<std::string>& words, bool at_start) const {
  if (add_prefix_space_)
    for (std::string& w : words)
      if (w.empty() || w[0] != ' ') w.insert(0, " ");
  if (split_) split_->pre_tokenize(words, at_start);
}

void MetaspacePreTokenizer::pre_tokenize(std::vector<std::string>& words, bool at_start) const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    std::string w;
    w.reserve(words[i].size() + 8);
    const bool prepend = scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && at_start && i == 0);
    if (prepend && words[i].compare(0, 1, " ") != 0 && words[i].compare(0, replacement_.size(), replacement_) != 0)
      w += replacement_;
    for (char c : words[i]) {
      if (c == ' ') {
        w += replacement_;
      } else {
        w.push_back(c);
      }
    }
    if (!split_) {
      out.push_back(std::move(w));
      continue;
    }
    // MergedWithNext on the replacement: each "▁" begins a word.
    std::size_t begin = 0;
    for (std::size_t at = w.find(replacement_, 1); at != std::string::npos; at = w.find(replacement_, at + 1)) {
      out.emplace_back(w, begin, at - begin);
      begin = at;
    }
    out.emplace_back(w, begin, std::string::npos);
  }
  words = std::move(out);
}

namespace detail {

PrependScheme parse_prepend_scheme(const JsonNode& j) {
  if (j.has("prepend_scheme")) {
    const JsonNode s = j["prepend_scheme"];
    const std::string name = s.str();
    if (name == "always") return PrependScheme::Always;
    if (name == "first") return PrependScheme::First;
    if (name == "never") return PrependScheme::Never;
    s.unsupported();
  }
  // Files before prepend_scheme have add_prefix_space.
  return j.boolean_or("add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const JsonNode& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.str("type");
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(j.boolean_or("add_prefix_space", true), j.boolean_or("use_regex", true));
  }
  if (type == "Split") {
    std::string literal;
    std::unique_ptr<Regex> regex = parse_pattern(j.require("pattern"), literal);
    const JsonNode b = j.require("behavior");
    const std::string name = b.str();
    SplitBehavior behavior;
    if (name == "Removed") behavior = SplitBehavior::Removed;
    else if (name == "Isolated") behavior = SplitBehavior::Isolated;
    else if (name == "MergedWithPrevious") behavior = SplitBehavior::MergedWithPrevious;
    else if (name == "MergedWithNext") behavior = SplitBehavior::MergedWithNext;
    else if (name == "Contiguous") behavior = SplitBehavior::Contiguous;
    else b.unsupported();
    return std::make_unique<SplitPreTokenizer>(std::move(regex), literal, behavior, j.boolean_or("invert", false));
  }
  if (type == "Metaspace") {
    const std::string replacement = j.str_or("replacement", "\xE2\x96\x81");
    return std::make_unique<MetaspacePreTokenizer>(replacement, parse_prepend_scheme(j), j.boolean_or("split", true));
  }
  if (type == "Sequence")
    return std::make_unique<SequencePreTokenizer>(parse_list<PreTokenizer>(j, "pretokenizers", parse_pre_tokenizer));
  j["type"].unsupported();
}

}  // namespace detail

}  // namespace xg::text

// The normalizers of tokenizer.json: NFC, Prepend, Replace, Sequence; and their JSON.
#include "text/normalizers.hpp"

#include "text/detail/hf_parse.hpp"
#include "text/unicode.hpp"

namespace xg::text {

void NfcNormalizer::normalize(std::string& s) const { s = nfc(s); }

void PrependNormalizer::normalize(std::string& s) const {
  if (!s.empty()) s.insert(0, prefix_);
}

void ReplaceNormalizer::normalize(std::string& s) const {
  std::string out;
  std::size_t last = 0;
  if (regex_) {
    regex_->for_each_match(s, [&](std::size_t b, std::size_t e) {
      out.append(s, last, b - last);
      out += content_;
      last = e;
    });
  } else {
    if (literal_.empty()) return;
    for (std::size_t at = s.find(literal_); at != std::string::npos; at = s.find(literal_, last)) {
      out.append(s, last, at - last);
      out += content_;
      last = at + literal_.size();
    }
  }
  if (last == 0) return;  // no match
  out.append(s, last, std::string::npos);
  s = std::move(out);
}

namespace detail {

std::unique_ptr<Regex> parse_pattern(const JsonNode& j, std::string& literal) {
  j.expect_object();
  if (j.has("String")) return literal = j["String"].str(), nullptr;
  if (j.has("Regex")) return std::make_unique<Regex>(j["Regex"].str(), j.file() + ": " + j.path() + ".Regex");
  j.unsupported("a pattern is {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> parse_normalizer(const JsonNode& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.str("type");
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j.str("prepend"));
  if (type == "Replace") {
    std::string literal;
    std::unique_ptr<Regex> regex = parse_pattern(j.require("pattern"), literal);
    const std::string content = j.require("content").str();
    if (regex) return std::make_unique<ReplaceNormalizer>(std::move(*regex), content);
    return std::make_unique<ReplaceNormalizer>(literal, content);
  }
  if (type == "Sequence")
    return std::make_unique<SequenceNormalizer>(parse_list<Normalizer>(j, "normalizers", parse_normalizer));
  j["type"].unsupported();
}

}  // namespace detail

}  // namespace xg::text

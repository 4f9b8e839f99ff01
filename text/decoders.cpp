// The decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
// Sequence; and their JSON.
#include "text/decoders.hpp"

#include "text/detail/hf_parse.hpp"
#include "text/unicode.hpp"

namespace xg::text {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

}  // namespace

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& t : tokens) {
    if (std::optional<std::string> b = byte_level_bytes(t)) {
      bytes += *b;
    } else {
      bytes += t;
    }
  }
  tokens.assign(1, utf8_lossy(bytes));
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& t : tokens) replace_all(t, literal_, content_);
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  const auto flush = [&] {
    if (bytes.empty()) return;
    if (utf8_invalid_at(bytes) == std::string::npos) {
      out.push_back(bytes);
    } else {
      for (std::size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
  };
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  for (std::string& t : tokens) {
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4])) {
      bytes.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string all;
  for (const std::string& t : tokens) all += t;
  tokens.assign(1, std::move(all));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  const std::size_t c = content_.size();
  for (std::string& t : tokens) {
    std::size_t begin = 0, end = t.size();
    for (int64_t k = 0; k < start_ && end - begin >= c && t.compare(begin, c, content_) == 0; ++k) begin += c;
    for (int64_t k = 0; k < stop_ && end - begin >= c && t.compare(end - c, c, content_) == 0; ++k) end -= c;
    t = t.substr(begin, end - begin);
  }
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    // NOTE: Hugging Face drops every replacement character of the first token, not only a
    // leading one.
    replace_all(tokens[i], replacement_, i == 0 && scheme_ != PrependScheme::Never ? "" : " ");
  }
}

namespace detail {

std::unique_ptr<Decoder> parse_decoder(const JsonNode& j) {
  if (j.is_null()) return nullptr;
  const std::string type = j.str("type");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    std::string literal;
    const JsonNode pattern = j.require("pattern");
    if (parse_pattern(pattern, literal)) pattern.unsupported("a decoder's Replace takes a String pattern");
    return std::make_unique<ReplaceDecoder>(literal, j.require("content").str());
  }
  if (type == "Strip") {
    const JsonNode content = j.require("content");
    const std::string c = content.str();
    if (c.empty() || utf8_sequence_length(c, 0) != c.size()) content.unsupported("one character is stripped");
    return std::make_unique<StripDecoder>(c, j.integer("start"), j.integer("stop"));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(j.str_or("replacement", "\xE2\x96\x81"), parse_prepend_scheme(j));
  }
  if (type == "Sequence")
    return std::make_unique<SequenceDecoder>(parse_list<Decoder>(j, "decoders", parse_decoder));
  j["type"].unsupported();
}

}  // namespace detail

}  // namespace xg::text

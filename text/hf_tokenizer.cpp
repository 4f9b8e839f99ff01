// HfTokenizer: reading tokenizer.json and tokenizer_config.json, the added tokens (matched
// before the model, longest first), the encode pipeline (added tokens, normalizer,
// pre-tokenizer, BPE, post-processor) and decode (tokens, decoder).
#include "text/hf_tokenizer.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "text/bpe.hpp"
#include "text/detail/hf_parse.hpp"
#include "text/unicode.hpp"

namespace xg::text {

using detail::JsonNode;

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path, ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(path, ": is not valid JSON (", e.what(), ")"));
  }
}

}  // namespace

// The Impl's member types, in a named namespace: compiled in a unity batch, where this file is
// an included one, a class with external linkage holding a type from an anonymous namespace
// draws GCC's -Wsubobject-linkage warning.
namespace hf_tokenizer_parts {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, normalized;
};

// The added tokens matched in one kind of text (raw or normalized): leftmost, then longest.
class AddedMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->content.empty()) return;
    by_first_[static_cast<unsigned char>(t->content[0])].push_back(t);
  }
  void finish() {
    for (auto& list : by_first_)
      std::stable_sort(list.begin(), list.end(),
                       [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
  }
  bool empty() const {
    return std::all_of(std::begin(by_first_), std::end(by_first_), [](const auto& l) { return l.empty(); });
  }
  // Calls on_text(begin, end) for the text between tokens and on_token(token) for each token,
  // in order. lstrip/rstrip take the whitespace beside a token into it.
  template <class OnText, class OnToken>
  void split(std::string_view s, OnText on_text, OnToken on_token) const {
    std::size_t done = 0;
    for (std::size_t i = 0; i < s.size();) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : by_first_[static_cast<unsigned char>(s[i])]) {
        if (s.compare(i, t->content.size(), t->content) == 0) {
          hit = t;
          break;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      std::size_t begin = i, end = i + hit->content.size();
      if (hit->lstrip)
        while (begin > done && is_space_before(s, begin)) begin -= space_length_before(s, begin);
      if (hit->rstrip)
        while (end < s.size() && is_space_at(s, end)) end += utf8_sequence_length(s, end);
      if (begin > done) on_text(done, begin);
      on_token(*hit);
      done = i = end;
    }
    if (done < s.size()) on_text(done, s.size());
  }

 private:
  static bool is_space_at(std::string_view s, std::size_t i) {
    const std::size_t n = utf8_sequence_length(s, i);
    return n > 0 && is_unicode_whitespace(utf8_decode(s, i, n));
  }
  static std::size_t space_length_before(std::string_view s, std::size_t i) {
    std::size_t b = i - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    return i - b;
  }
  static bool is_space_before(std::string_view s, std::size_t i) { return is_space_at(s, i - space_length_before(s, i)); }

  std::vector<const AddedToken*> by_first_[256];
};

// The special tokens a post-processor puts around a single text.
struct Template {
  std::vector<int64_t> prefix, suffix;
};

}  // namespace hf_tokenizer_parts
using namespace hf_tokenizer_parts;

namespace {

int64_t special_token_id(const JsonNode& entry) {
  // RobertaProcessing / BertProcessing: ["</s>", 2]
  entry.expect_array();
  if (entry.size() != 2) entry.fail("must be [token, id]");
  return entry.at(1).integer();
}

Template parse_post_processor(const JsonNode& j) {
  Template t;
  if (j.is_null()) return t;
  const std::string type = j.str("type");
  if (type == "ByteLevel") return t;  // offsets only
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    t.prefix = {special_token_id(j.require("cls"))};
    t.suffix = {special_token_id(j.require("sep"))};
    return t;
  }
  if (type == "TemplateProcessing") {
    const JsonNode single = j.require("single");
    single.expect_array();
    const JsonNode specials = j["special_tokens"];
    bool seen_a = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const JsonNode item = single.at(i);
      if (item.has("Sequence")) {
        const JsonNode id = item["Sequence"].require("id");
        if (id.str() != "A" || seen_a) id.unsupported("a single text's template holds sequence A once");
        seen_a = true;
      } else if (item.has("SpecialToken")) {
        const JsonNode id = item["SpecialToken"].require("id");
        const std::string name = id.str();
        if (!specials.has(name.c_str())) id.fail("names no entry of special_tokens");
        const JsonNode ids = specials[name.c_str()].require("ids");
        ids.expect_array();
        for (std::size_t k = 0; k < ids.size(); ++k) (seen_a ? t.suffix : t.prefix).push_back(ids.at(k).integer());
      } else {
        item.unsupported("an item is {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_a) single.fail("has no sequence A");
    return t;
  }
  if (type == "Sequence") {
    const JsonNode list = j.require("processors");
    list.expect_array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Template p = parse_post_processor(list.at(i));
      t.prefix.insert(t.prefix.begin(), p.prefix.begin(), p.prefix.end());
      t.suffix.insert(t.suffix.end(), p.suffix.begin(), p.suffix.end());
    }
    return t;
  }
  j["type"].unsupported();
}

// The "a b" or ["a", "b"] of a merge.
std::pair<std::string, std::string> parse_merge(const JsonNode& m) {
  if (m.json().is_string()) {
    const std::string s = m.str();
    const std::size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) m.fail("must be \"a b\" or [\"a\", \"b\"]");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (!m.json().is_array() || m.size() != 2) m.fail("must be \"a b\" or [\"a\", \"b\"]");
  return {m.at(0).str(), m.at(1).str()};
}

// A token of tokenizer_config.json: "<s>", {"content": "<s>", ...} or null ("" then).
std::string config_token(const JsonNode& j) {
  if (j.is_null()) return "";
  if (j.json().is_string()) return j.str();
  return j.str("content");
}

}  // namespace

struct HfTokenizer::Impl {
  std::string file;                   // tokenizer.json's path, for messages
  std::vector<std::string> tokens;    // by id: the model's tokens, then the added tokens
  std::unordered_map<std::string, int32_t> ids;  // token -> id (added tokens win)
  std::vector<AddedToken> added;
  std::vector<char> is_special;       // by id
  std::vector<char> is_added;         // by id
  AddedMatcher raw_matcher, normalized_matcher;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Bpe> model;
  std::unique_ptr<Decoder> decoder;
  Template post;
  int64_t bos = -1, eos = -1, pad = -1;
  int64_t max_id = 0;  // ids are below this

  void load(const nlohmann::json& doc, const std::string& source);
  void load_model(const JsonNode& m, bool byte_level);
  void load_config(const nlohmann::json& doc, const std::string& source);

  // Appends the ids of text that holds no raw-matched added token.
  void encode_text(std::string s, bool at_start, std::vector<int64_t>& out) const;
  void encode_words(std::string s, bool at_start, std::vector<int64_t>& out) const;
};

void HfTokenizer::Impl::load(const nlohmann::json& doc, const std::string& path) {
  file = path;
  const JsonNode root(doc, path, "");
  root.expect_object();
  for (const char* key : {"truncation", "padding"})
    if (root.has(key)) root[key].unsupported(std::string(key) + " must be null");

  normalizer = detail::parse_normalizer(root["normalizer"]);
  pre_tokenizer = detail::parse_pre_tokenizer(root["pre_tokenizer"]);
  decoder = detail::parse_decoder(root["decoder"]);
  post = parse_post_processor(root["post_processor"]);
  // NOTE: ids index a table, so they must be about as dense as Hugging Face's are (a stray id
  // of 2^31 would otherwise ask for gigabytes).
  const JsonNode model_json = root.require("model");
  max_id = 2 * static_cast<int64_t>(model_json["vocab"].json().size() + root["added_tokens"].json().size()) + 1024;
  load_model(model_json, pre_tokenizer && pre_tokenizer->byte_level());

  if (root.has("added_tokens")) {
    const JsonNode list = root["added_tokens"];
    list.expect_array();
    added.reserve(list.size());  // the matchers point into it
    for (std::size_t i = 0; i < list.size(); ++i) {
      const JsonNode t = list.at(i);
      const int64_t id = t.integer("id");
      if (id < 0 || id >= max_id) t["id"].fail(str_cat("must be in [0, ", max_id, ")"));
      if (t.boolean_or("single_word", false)) t["single_word"].unsupported();
      AddedToken a{static_cast<int32_t>(id), t.str("content"), t.boolean_or("special", false), t.boolean_or("lstrip", false),
                   t.boolean_or("rstrip", false), t.boolean_or("normalized", false)};
      if (a.content.empty()) t["content"].fail("must not be empty");
      if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(id + 1);
      tokens[id] = a.content;
      ids[a.content] = a.id;
      added.push_back(std::move(a));
    }
  }
  is_special.assign(tokens.size(), 0);
  is_added.assign(tokens.size(), 0);
  for (const AddedToken& a : added) {
    is_added[a.id] = 1;
    is_special[a.id] = a.special;
    // NOTE: as in Hugging Face, a token marked normalized is looked for in the normalized text
    // (without a normalizer the two are the same text).
    (a.normalized && normalizer ? normalized_matcher : raw_matcher).add(&a);
  }
  raw_matcher.finish();
  normalized_matcher.finish();
  for (const std::vector<int64_t>* ids_around : {&post.prefix, &post.suffix})
    for (int64_t id : *ids_around)
      if (id < 0 || id >= static_cast<int64_t>(tokens.size()) || tokens[id].empty())
        root["post_processor"].fail(str_cat("adds the id ", id, ", which is no token"));
}

void HfTokenizer::Impl::load_model(const JsonNode& m, bool byte_level) {
  const std::string type = m.str("type");
  if (type != "BPE") m["type"].unsupported("only BPE models are");
  if (m.has("dropout") && m["dropout"].json() != 0) m["dropout"].unsupported("dropout must be null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.has(key) && !m[key].str().empty()) m[key].unsupported();
  const JsonNode vocab = m.require("vocab");
  vocab.expect_object();
  for (const auto& [token, id_json] : vocab.json().items()) {
    const JsonNode id_node(id_json, file, vocab.path() + "." + token);
    const int64_t id = id_node.integer();
    if (id < 0 || id >= max_id) id_node.fail(str_cat("must be in [0, ", max_id, ")"));
    if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(id + 1);
    tokens[id] = token;
    ids.emplace(token, static_cast<int32_t>(id));
  }
  const JsonNode list = m.require("merges");
  list.expect_array();
  std::vector<std::pair<int32_t, int32_t>> merges(list.size());
  std::vector<int32_t> merged(list.size());
  const auto id_of = [&](const JsonNode& at, const std::string& token) {
    auto it = ids.find(token);
    if (it == ids.end()) at.fail(str_cat("names \"", token, "\", which is not in model.vocab"));
    return it->second;
  };
  for (std::size_t r = 0; r < list.size(); ++r) {
    const JsonNode mj = list.at(r);
    const auto [a, b] = parse_merge(mj);
    merges[r] = {id_of(mj, a), id_of(mj, b)};
    merged[r] = id_of(mj, a + b);
  }
  BpeOptions o;
  o.byte_level = byte_level;
  o.byte_fallback = m.boolean_or("byte_fallback", false);
  o.fuse_unk = m.boolean_or("fuse_unk", false);
  o.ignore_merges = m.boolean_or("ignore_merges", false);
  if (m.has("unk_token")) o.unk_id = id_of(m["unk_token"], m["unk_token"].str());
  model = std::make_unique<Bpe>(tokens, merges, merged, o);
}

void HfTokenizer::Impl::load_config(const nlohmann::json& doc, const std::string& path) {
  const JsonNode root(doc, path, "");
  root.expect_object();
  const auto token_id = [&](const char* key) -> int64_t {
    const std::string t = config_token(root[key]);
    if (t.empty()) return -1;
    auto it = ids.find(t);
    if (it == ids.end()) root[key].fail(str_cat("names \"", t, "\", which is not in ", file));
    return it->second;
  };
  bos = token_id("bos_token");
  eos = token_id("eos_token");
  pad = token_id("pad_token");
  // NOTE: where add_bos_token / add_eos_token are set, they decide the special tokens of a
  // single text, as transformers' Llama tokenizers rebuild the post-processor from them.
  if (root.has("add_bos_token")) {
    const bool add = root["add_bos_token"].boolean();
    if (add && bos < 0) root["add_bos_token"].fail("is true, but bos_token is not set");
    post.prefix = add ? std::vector<int64_t>{bos} : std::vector<int64_t>{};
  }
  if (root.has("add_eos_token")) {
    const bool add = root["add_eos_token"].boolean();
    if (add && eos < 0) root["add_eos_token"].fail("is true, but eos_token is not set");
    post.suffix = add ? std::vector<int64_t>{eos} : std::vector<int64_t>{};
  }
}

void HfTokenizer::Impl::encode_words(std::string s, bool at_start, std::vector<int64_t>& out) const {
  if (s.empty()) return;
  if (!pre_tokenizer) {
    model->encode_word(s, out);
    return;
  }
  thread_local std::vector<std::string> words;
  words.assign(1, std::move(s));
  pre_tokenizer->pre_tokenize(words, at_start);
  for (const std::string& w : words) model->encode_word(w, out);
}

void HfTokenizer::Impl::encode_text(std::string s, bool at_start, std::vector<int64_t>& out) const {
  if (normalizer) normalizer->normalize(s);
  if (normalized_matcher.empty()) return encode_words(std::move(s), at_start, out);
  normalized_matcher.split(
      s, [&](std::size_t b, std::size_t e) { encode_words(s.substr(b, e - b), at_start && b == 0, out); },
      [&](const AddedToken& t) { out.push_back(t.id); });
}

HfTokenizer::HfTokenizer(const std::string& tokenizer_json, const std::string& tokenizer_config)
    : impl_(std::make_unique<Impl>()) {
  impl_->load(read_json(tokenizer_json), tokenizer_json);
  if (!tokenizer_config.empty()) impl_->load_config(read_json(tokenizer_config), tokenizer_config);
}

HfTokenizer::HfTokenizer(const nlohmann::json& tokenizer, const nlohmann::json& config, const std::string& source)
    : impl_(std::make_unique<Impl>()) {
  impl_->load(tokenizer, source);
  if (!config.is_null()) impl_->load_config(config, source);
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  const fs::path config = fs::path(folder) / "tokenizer_config.json";
  return std::make_unique<HfTokenizer>((fs::path(folder) / "tokenizer.json").string(),
                                       fs::exists(config) ? config.string() : "");
}

HfTokenizer::~HfTokenizer() = default;

std::vector<int64_t> HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  const std::size_t bad = utf8_invalid_at(text);
  check(bad == std::string::npos, "HfTokenizer::encode: the text is not valid UTF-8 (byte ", bad, ")");
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special_tokens) out = m.post.prefix;
  m.raw_matcher.split(
      text, [&](std::size_t b, std::size_t e) { m.encode_text(text.substr(b, e - b), b == 0, out); },
      [&](const AddedToken& t) { out.push_back(t.id); });
  if (add_special_tokens) out.insert(out.end(), m.post.suffix.begin(), m.post.suffix.end());
  return out;
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    check(id >= 0 && id < vocab_size() && !m.tokens[id].empty(), "HfTokenizer::decode: id ", id, " at position ", i,
          " is not in the vocabulary of ", m.file);
    if (skip_special_tokens && m.is_special[id]) continue;
    tokens.push_back(m.tokens[id]);
  }
  if (!m.decoder) {
    std::string joined;
    for (std::size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  m.decoder->decode_chain(tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

int64_t HfTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }
int64_t HfTokenizer::bos_id() const { return impl_->bos; }
int64_t HfTokenizer::eos_id() const { return impl_->eos; }
int64_t HfTokenizer::pad_id() const { return impl_->pad; }

int64_t HfTokenizer::token_to_id(const std::string& token) const {
  auto it = impl_->ids.find(token);
  return it == impl_->ids.end() ? -1 : it->second;
}

std::string HfTokenizer::id_to_token(int64_t id) const {
  check(id >= 0 && id < vocab_size() && !impl_->tokens[id].empty(), "HfTokenizer::id_to_token: id ", id,
        " is not in the vocabulary of ", impl_->file);
  return impl_->tokens[id];
}

}  // namespace xg::text

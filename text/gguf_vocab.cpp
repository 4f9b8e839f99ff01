// GGUF tokenizer metadata: written from tokenizer.json (what convert_hf_to_gguf.py's
// _set_vocab_gpt2 writes: tokens, token types, merges, special ids, add_bos/add_eos, chat
// template) or from the byte tokenizer, and read back into a tokenizer that splits text as
// llama.cpp's llm_tokenizer_bpe does for the file's tokenizer.ggml.pre (src/llama-vocab.cpp).
#include "text/gguf_vocab.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "autograd/error.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/unicode.hpp"

namespace xg::text {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The split regexes of llama.cpp's pre-tokenizer types (llama-vocab.cpp's llm_tokenizer_bpe),
// in the form their Hugging Face tokenizer.json files write them.
struct LlamaCppPre {
  const char* name;     // tokenizer.ggml.pre
  const char* pattern;  // the Split regex; empty: ByteLevel's own GPT-2 regex
  bool ignore_merges;   // llama.cpp sets it for LLAMA_VOCAB_PRE_TYPE_LLAMA3
};
constexpr LlamaCppPre kPre[] = {
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     true},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     false},
    {"gpt-2", "", false},
};
// Names llama.cpp takes for the same types.
const LlamaCppPre* pre_by_name(const std::string& name) {
  const std::string n = name == "llama3" || name == "llama-v3" ? "llama-bpe" : name;
  for (const LlamaCppPre& p : kPre)
    if (n == p.name) return &p;
  return nullptr;
}

json read_json(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), path.string(), ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(str_cat(path.string(), ": is not valid JSON (", e.what(), ")"));
  }
}

// tokenizer.json's pre-tokenizer as one of llama.cpp's types.
const LlamaCppPre& pre_of(const json& pre, const std::string& file) {
  const auto unsupported = [&](const std::string& what) -> const LlamaCppPre& {
    throw Error(str_cat(file, ": pre_tokenizer ", what, " has no llama.cpp pre-tokenizer xgrad writes (llama-bpe, qwen2, gpt-2)"));
  };
  if (pre.is_object() && pre.value("type", "") == "ByteLevel") {
    if (pre.value("use_regex", true) && !pre.value("add_prefix_space", false)) return kPre[2];
    return unsupported(pre.dump());
  }
  if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers"))
    return unsupported(pre.is_null() ? "null (SentencePiece-style tokenizers are not exported)" : pre.dump().substr(0, 120));
  const json& steps = pre["pretokenizers"];
  if (steps.size() != 2 || steps[0].value("type", "") != "Split" || steps[1].value("type", "") != "ByteLevel" ||
      steps[1].value("use_regex", true) || steps[1].value("add_prefix_space", false))
    return unsupported(pre.dump().substr(0, 120));
  const std::string pattern = steps[0].contains("pattern") ? steps[0]["pattern"].value("Regex", "") : "";
  for (const LlamaCppPre& p : kPre)
    if (*p.pattern && pattern == p.pattern) return p;
  return unsupported("Split regex \"" + pattern + "\"");
}

io::GgufMetadata byte_tokenizer_metadata(int64_t n_vocab) {
  std::vector<std::string> tokens(byte_level_chars().begin(), byte_level_chars().end());
  std::vector<int32_t> types(256, static_cast<int32_t>(GgufTokenType::Normal));
  for (const char* s : {"<bos>", "<eos>", "<pad>"}) {
    tokens.push_back(s);
    types.push_back(static_cast<int32_t>(GgufTokenType::Control));
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < n_vocab; ++i) {
    tokens.push_back(str_cat("[PAD", i, "]"));
    types.push_back(static_cast<int32_t>(GgufTokenType::Unused));
  }
  io::GgufMetadata m;
  m.emplace_back("tokenizer.ggml.model", io::GgufValue::string("gpt2"));
  // No merges: every byte is its own token whatever the split, so any pre-tokenizer gives the
  // byte tokenizer's ids; "default" is llama.cpp's name for none in particular.
  m.emplace_back("tokenizer.ggml.pre", io::GgufValue::string("default"));
  m.emplace_back("tokenizer.ggml.tokens", io::GgufValue::strings_array(std::move(tokens)));
  m.emplace_back("tokenizer.ggml.token_type", io::GgufValue::i32_array(std::move(types)));
  m.emplace_back("tokenizer.ggml.merges", io::GgufValue::strings_array({}));
  m.emplace_back("tokenizer.ggml.bos_token_id", io::GgufValue::u32(ByteTokenizer::kBos));
  m.emplace_back("tokenizer.ggml.eos_token_id", io::GgufValue::u32(ByteTokenizer::kEos));
  m.emplace_back("tokenizer.ggml.padding_token_id", io::GgufValue::u32(ByteTokenizer::kPad));
  // BOS before a text, as ByteTokenizer::encode(text, true) puts it: llama.cpp then starts a
  // prompt as xg-generate does (a byte vocabulary's default there would be no BOS).
  m.emplace_back("tokenizer.ggml.add_bos_token", io::GgufValue::boolean(true));
  m.emplace_back("tokenizer.ggml.add_eos_token", io::GgufValue::boolean(false));
  return m;
}

// Whether a file's vocabulary is the byte tokenizer's (as byte_tokenizer_metadata writes it).
bool is_byte_vocabulary(const io::GgufReader& f) {
  if (!f.has("tokenizer.ggml.tokens") || !f.has("tokenizer.ggml.merges")) return false;
  const io::GgufValue& t = f.at("tokenizer.ggml.tokens");
  const io::GgufValue& merges = f.at("tokenizer.ggml.merges");
  if (t.element != io::GgufType::String || t.size() < 259 || merges.size() != 0) return false;
  for (int i = 0; i < 256; ++i)
    if (t.strings[i] != byte_level_chars()[i]) return false;
  if (t.strings[256] != "<bos>" || t.strings[257] != "<eos>" || t.strings[258] != "<pad>") return false;
  for (std::size_t i = 259; i < t.size(); ++i)
    if (t.strings[i] != str_cat("[PAD", i, "]")) return false;
  return true;
}

// A SentencePiece-style tokenizer.json (Llama 2, Mistral, TinyLlama): no pre-tokenizer, the
// normalizer that prepends "▁" and turns spaces into "▁", BPE with byte fallback.
bool is_sentencepiece(const json& doc) {
  const json& m = doc["model"];
  return (!doc.contains("pre_tokenizer") || doc["pre_tokenizer"].is_null()) && m.value("byte_fallback", false) &&
         doc.contains("normalizer") && doc["normalizer"].is_object();
}

// The normalizer of a SentencePiece-style tokenizer.json as llama.cpp's add_space_prefix:
// [Prepend "▁"], Replace " " -> "▁" (anything else cannot be said in GGUF).
bool spm_space_prefix(const json& doc, const std::string& file) {
  const json& n = doc["normalizer"];
  std::vector<json> steps;
  if (n.value("type", "") == "Sequence")
    for (const json& x : n["normalizers"]) steps.push_back(x);
  else
    steps.push_back(n);
  bool prefix = false, replace = false;
  for (const json& x : steps) {
    const std::string t = x.value("type", "");
    if (t == "Prepend" && x.value("prepend", "") == "\xe2\x96\x81" && !replace) {
      prefix = true;
    } else if (t == "Replace" && x.contains("pattern") && x["pattern"].value("String", "") == " " &&
               x.value("content", "") == "\xe2\x96\x81") {
      replace = true;
    } else {
      throw Error(str_cat(file, ": normalizer ", x.dump().substr(0, 120), " has no llama.cpp SentencePiece equivalent"));
    }
  }
  check(replace, file, ": a SentencePiece-style normalizer must replace \" \" with \"\xe2\x96\x81\"");
  return prefix;
}

// <0x00> .. <0xFF>
bool is_byte_piece(const std::string& s) {
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && std::isxdigit(static_cast<unsigned char>(s[3])) &&
         std::isxdigit(static_cast<unsigned char>(s[4]));
}

// The special ids, what the tokenizer adds around a text and the chat template, as keys.
void add_special_metadata(io::GgufMetadata& m, const Tokenizer& t, const std::string& folder) {
  const Tokenizer* tok = &t;
  if (tok->bos_id() >= 0) m.emplace_back("tokenizer.ggml.bos_token_id", io::GgufValue::u32(static_cast<uint32_t>(tok->bos_id())));
  if (tok->eos_id() >= 0) m.emplace_back("tokenizer.ggml.eos_token_id", io::GgufValue::u32(static_cast<uint32_t>(tok->eos_id())));
  if (tok->pad_id() >= 0) m.emplace_back("tokenizer.ggml.padding_token_id", io::GgufValue::u32(static_cast<uint32_t>(tok->pad_id())));
  // What the tokenizer adds around one text, asked of the tokenizer itself (tokenizer_config's
  // add_bos_token or the post-processor's template).
  const std::vector<int64_t> around = tok->encode("", true);
  const bool add_bos = !around.empty() && around.front() == tok->bos_id() && tok->bos_id() >= 0;
  const bool add_eos = !around.empty() && around.back() == tok->eos_id() && tok->eos_id() >= 0 &&
                       (around.size() > 1 || !add_bos);
  check(around.size() == static_cast<std::size_t>(add_bos) + static_cast<std::size_t>(add_eos), "GGUF export: the tokenizer of ",
        folder, " adds ", around.size(), " tokens around a text that are not just BOS and EOS, which GGUF cannot say");
  m.emplace_back("tokenizer.ggml.add_bos_token", io::GgufValue::boolean(add_bos));
  m.emplace_back("tokenizer.ggml.add_eos_token", io::GgufValue::boolean(add_eos));
  const fs::path config = fs::path(folder) / "tokenizer_config.json";
  if (fs::exists(config)) {
    const json c = read_json(config);
    if (c.contains("chat_template")) {
      const json& t = c["chat_template"];
      if (t.is_string()) {
        m.emplace_back("tokenizer.chat_template", io::GgufValue::string(t.get<std::string>()));
      } else if (t.is_array()) {  // named templates: "default" is tokenizer.chat_template
        for (const json& e : t)
          if (e.value("name", "") == "default") m.emplace_back("tokenizer.chat_template", io::GgufValue::string(e.value("template", "")));
      }
    }
  }
}

// Llama 2-style vocabularies as tokenizer.ggml.model "llama" (llama.cpp's llm_tokenizer_spm):
// tokens with scores and types. llama.cpp merges the adjacent pair whose joined piece scores
// highest; Hugging Face's BPE the pair of the lowest merge rank, so a piece's score is minus
// the rank of the first merge that makes it (pieces no merge makes score below all of them).
io::GgufMetadata spm_tokenizer_metadata(const Tokenizer& tok, const json& doc, const std::string& folder, int64_t n_vocab) {
  const std::string file = (fs::path(folder) / "tokenizer.json").string();
  const bool space_prefix = spm_space_prefix(doc, file);
  const json& model = doc["model"];
  const int64_t n = tok.vocab_size();
  check(n <= n_vocab, "GGUF export: the tokenizer of ", folder, " has ", n, " ids but the model's vocabulary only ", n_vocab);
  std::vector<std::string> tokens(static_cast<std::size_t>(n_vocab));
  std::vector<int32_t> types(static_cast<std::size_t>(n_vocab), static_cast<int32_t>(GgufTokenType::Unused));
  std::vector<float> scores(static_cast<std::size_t>(n_vocab), -1e9f);
  std::unordered_map<std::string, int64_t> ids;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const auto id = static_cast<std::size_t>(it.value().get<int64_t>());
    tokens[id] = it.key();
    ids[it.key()] = static_cast<int64_t>(id);
    types[id] = static_cast<int32_t>(is_byte_piece(it.key()) ? GgufTokenType::Byte : GgufTokenType::Normal);
  }
  const int64_t n_merges = static_cast<int64_t>(model["merges"].size());
  for (int64_t r = 0; r < n_merges; ++r) {
    const json& mj = model["merges"][static_cast<std::size_t>(r)];
    std::string joined;
    if (mj.is_string()) {
      const std::string m = mj.get<std::string>();
      const std::size_t sp = m.find(' ');
      joined = m.substr(0, sp) + m.substr(sp + 1);
    } else {
      joined = mj.at(0).get<std::string>() + mj.at(1).get<std::string>();
    }
    auto it = ids.find(joined);
    if (it != ids.end() && scores[static_cast<std::size_t>(it->second)] == -1e9f)
      scores[static_cast<std::size_t>(it->second)] = -static_cast<float>(r);
  }
  // Single characters are never made by a merge; they score 0 like SentencePiece's pieces do.
  for (int64_t i = 0; i < n_vocab; ++i) {
    const std::string& t = tokens[static_cast<std::size_t>(i)];
    if (scores[static_cast<std::size_t>(i)] == -1e9f && !t.empty() && utf8_sequence_length(t, 0) == t.size()) scores[static_cast<std::size_t>(i)] = 0;
  }
  if (doc.contains("added_tokens"))
    for (const json& a : doc["added_tokens"]) {
      const auto id = static_cast<std::size_t>(a["id"].get<int64_t>());
      tokens[id] = a["content"].get<std::string>();
      types[id] = static_cast<int32_t>(a.value("special", false) ? GgufTokenType::Control : GgufTokenType::UserDefined);
      scores[id] = 0;
    }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = ids.find(model["unk_token"].get<std::string>());
    if (it != ids.end()) types[static_cast<std::size_t>(it->second)] = static_cast<int32_t>(GgufTokenType::Unknown);
  }
  for (int64_t i = 0; i < n_vocab; ++i)
    if (tokens[static_cast<std::size_t>(i)].empty()) tokens[static_cast<std::size_t>(i)] = str_cat("[PAD", i, "]");
  io::GgufMetadata m;
  m.emplace_back("tokenizer.ggml.model", io::GgufValue::string("llama"));
  m.emplace_back("tokenizer.ggml.tokens", io::GgufValue::strings_array(std::move(tokens)));
  m.emplace_back("tokenizer.ggml.scores", io::GgufValue::f32_array(std::move(scores)));
  m.emplace_back("tokenizer.ggml.token_type", io::GgufValue::i32_array(std::move(types)));
  m.emplace_back("tokenizer.ggml.add_space_prefix", io::GgufValue::boolean(space_prefix));
  if (model.contains("unk_token") && model["unk_token"].is_string() && ids.count(model["unk_token"].get<std::string>()))
    m.emplace_back("tokenizer.ggml.unknown_token_id", io::GgufValue::u32(static_cast<uint32_t>(ids[model["unk_token"].get<std::string>()])));
  add_special_metadata(m, tok, folder);
  return m;
}

// A vocabulary's tokens split the way tokenizer.json holds them: control and user-defined tokens
// as added tokens (special: control), the others in model.vocab; types checked per token.
struct VocabParts {
  json vocab = json::object(), added = json::array();
  std::vector<int64_t> types;
};
VocabParts split_vocab(const io::GgufReader& f, const io::GgufValue& tokens, bool byte_tokens) {
  const std::string& path = f.path();
  const std::size_t n = tokens.size();
  VocabParts v;
  v.types.assign(n, static_cast<int64_t>(GgufTokenType::Normal));
  if (f.has("tokenizer.ggml.token_type")) {
    const io::GgufValue& t = f.at("tokenizer.ggml.token_type");
    check(t.is_array() && t.ints.size() == n, path,
          ": tokenizer.ggml.token_type must be an integer array of one type per token (", n, ")");
    v.types = t.ints;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::string& s = tokens.strings[i];
    check(!s.empty(), path, ": tokenizer.ggml.tokens[", i, "] is empty");
    const int64_t type = v.types[i];
    if (type == static_cast<int64_t>(GgufTokenType::Control) || type == static_cast<int64_t>(GgufTokenType::UserDefined)) {
      v.added.push_back({{"id", i}, {"content", s}, {"special", type == static_cast<int64_t>(GgufTokenType::Control)},
                         {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"single_word", false}});
      continue;
    }
    check(type >= 1 && type <= 6 && (byte_tokens || type != static_cast<int64_t>(GgufTokenType::Byte)), path,
          ": tokenizer.ggml.token_type[", i, "] is ", type, ", not a type a ", byte_tokens ? "SentencePiece" : "byte-level",
          " vocabulary has");
    check(!v.vocab.contains(s), path, ": token '", s, "' appears twice in tokenizer.ggml.tokens");
    v.vocab[s] = i;
  }
  return v;
}

// tokenizer_config.json's keys from the special ids and add_bos/add_eos; without
// add_bos_token, llama.cpp's default for the vocabulary type (`bos_by_default`).
json special_config(const io::GgufReader& f, const io::GgufValue& tokens, bool bos_by_default) {
  const std::string& path = f.path();
  const std::size_t n = tokens.size();
  json config = json::object();
  const auto special = [&](const char* key, const char* field) {
    if (!f.has(key)) return;
    const int64_t id = f.get_int(key);
    check(id >= 0 && static_cast<std::size_t>(id) < n, path, ": ", key, " is ", id, ", outside the ", n, " tokens");
    config[field] = tokens.strings[static_cast<std::size_t>(id)];
  };
  special("tokenizer.ggml.bos_token_id", "bos_token");
  special("tokenizer.ggml.eos_token_id", "eos_token");
  special("tokenizer.ggml.padding_token_id", "pad_token");
  for (const auto& [key, field] : {std::pair<const char*, const char*>{"tokenizer.ggml.add_bos_token", "add_bos_token"},
                                   {"tokenizer.ggml.add_eos_token", "add_eos_token"}})
    if (f.has(key)) config[field] = f.get_bool(key);
  // llama-vocab.cpp adds BOS by default for SentencePiece vocabularies and its llama3 pre type.
  if (!f.has("tokenizer.ggml.add_bos_token") && bos_by_default && config.contains("bos_token")) config["add_bos_token"] = true;
  return config;
}

// A "llama" vocabulary as the tokenizer.json Hugging Face's converter makes of a SentencePiece
// BPE model (transformers' LlamaConverter): the merges are every split of a piece into two
// pieces, ranked by the joined piece's score (highest first), which is the order llama.cpp's
// llm_tokenizer_spm merges in; byte fallback to <0xNN>, unknown characters to the unknown token.
std::unique_ptr<Tokenizer> load_spm_tokenizer(const io::GgufReader& f) {
  const std::string& path = f.path();
  const io::GgufValue& tokens = f.at("tokenizer.ggml.tokens");
  check(tokens.is_array() && tokens.element == io::GgufType::String, path, ": tokenizer.ggml.tokens must be an array of strings");
  const std::size_t n = tokens.size();
  const io::GgufValue& scores = f.at("tokenizer.ggml.scores");
  check(scores.is_array() && scores.floats.size() == n, path, ": tokenizer.ggml.scores must be a float array of one score per token (", n, ")");
  VocabParts parts = split_vocab(f, tokens, true);
  std::unordered_map<std::string, int64_t> normal;  // pieces merges may make
  for (std::size_t i = 0; i < n; ++i)
    if (parts.types[i] == static_cast<int64_t>(GgufTokenType::Normal)) normal[tokens.strings[i]] = static_cast<int64_t>(i);
  std::vector<std::tuple<double, int64_t, int64_t, int64_t>> ranked;  // (-score, merged id, left id, right id)
  for (const auto& [piece, id] : normal) {
    for (std::size_t cut = utf8_sequence_length(piece, 0); cut < piece.size(); cut += utf8_sequence_length(piece, cut)) {
      auto a = normal.find(piece.substr(0, cut)), b = normal.find(piece.substr(cut));
      if (a != normal.end() && b != normal.end())
        ranked.emplace_back(-scores.floats[static_cast<std::size_t>(id)], id, a->second, b->second);
    }
  }
  std::sort(ranked.begin(), ranked.end());
  json merges = json::array();
  for (const auto& [score, id, a, b] : ranked)
    merges.push_back(json::array({tokens.strings[static_cast<std::size_t>(a)], tokens.strings[static_cast<std::size_t>(b)]}));
  const bool space_prefix = f.has("tokenizer.ggml.add_space_prefix") ? f.get_bool("tokenizer.ggml.add_space_prefix") : true;
  const std::string meta = "\xe2\x96\x81";
  json normalizers = json::array();
  if (space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", meta}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}});
  json decoders = json::array({json{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
                               json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}}});
  if (space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  json model = {{"type", "BPE"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", parts.vocab}, {"merges", merges}};
  if (f.has("tokenizer.ggml.unknown_token_id")) {
    const int64_t unk = f.get_int("tokenizer.ggml.unknown_token_id");
    check(unk >= 0 && static_cast<std::size_t>(unk) < n, path, ": tokenizer.ggml.unknown_token_id ", unk, " is no token");
    model["unk_token"] = tokens.strings[static_cast<std::size_t>(unk)];
  }
  json doc = {{"added_tokens", parts.added},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
              {"model", model}};
  return std::make_unique<HfTokenizer>(doc, special_config(f, tokens, true), path);
}

}  // namespace

io::GgufMetadata gguf_tokenizer_metadata(const io::ModelSource& source, int64_t n_vocab) {
  const std::string& folder = source.path;
  if (source.tokenizer_file.empty()) {
    load_tokenizer(source);  // an xgrad folder's byte tokenizer, or the error saying what the folder lacks
    check(n_vocab >= ByteTokenizer::kVocabSize, "GGUF export: ", folder, " has no tokenizer.json, so its tokenizer is the ",
          "byte tokenizer (", ByteTokenizer::kVocabSize, " ids), but the model has ", n_vocab);
    return byte_tokenizer_metadata(n_vocab);
  }
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(source);  // validates, and knows the special ids
  const fs::path tj = source.tokenizer_file;
  const json doc = read_json(tj);
  const std::string file = tj.string();
  if (is_sentencepiece(doc)) return spm_tokenizer_metadata(*tok, doc, folder, n_vocab);
  const LlamaCppPre& pre = pre_of(doc.contains("pre_tokenizer") ? doc["pre_tokenizer"] : json(), file);
  const json& model = doc["model"];
  check(model.value("type", "") == "BPE", file, ": model.type must be BPE");
  check(!model.value("byte_fallback", false), file, ": model.byte_fallback is set; a byte-level BPE has no byte fallback");
  check(model.value("ignore_merges", false) == pre.ignore_merges, file, ": model.ignore_merges is ",
        model.value("ignore_merges", false), " but llama.cpp's pre-tokenizer '", pre.name, "' has it ", pre.ignore_merges);
  const int64_t n = tok->vocab_size();
  check(n <= n_vocab, "GGUF export: the tokenizer of ", folder, " has ", n, " ids but the model's vocabulary only ", n_vocab);
  std::vector<std::string> tokens(static_cast<std::size_t>(n_vocab));
  std::vector<int32_t> types(static_cast<std::size_t>(n_vocab), static_cast<int32_t>(GgufTokenType::Unused));
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    tokens[static_cast<std::size_t>(id)] = it.key();
    types[static_cast<std::size_t>(id)] = static_cast<int32_t>(GgufTokenType::Normal);
  }
  if (doc.contains("added_tokens"))
    for (const json& a : doc["added_tokens"]) {
      const int64_t id = a["id"].get<int64_t>();
      tokens[static_cast<std::size_t>(id)] = a["content"].get<std::string>();
      types[static_cast<std::size_t>(id)] =
          static_cast<int32_t>(a.value("special", false) ? GgufTokenType::Control : GgufTokenType::UserDefined);
    }
  for (int64_t i = 0; i < n_vocab; ++i)
    if (types[static_cast<std::size_t>(i)] == static_cast<int32_t>(GgufTokenType::Unused)) tokens[static_cast<std::size_t>(i)] = str_cat("[PAD", i, "]");
  std::vector<std::string> merges;
  merges.reserve(model["merges"].size());
  for (const json& mj : model["merges"]) {
    // "a b" or ["a", "b"] (tokenizers >= 0.20); byte-level tokens hold no spaces.
    if (mj.is_string()) {
      merges.push_back(mj.get<std::string>());
    } else {
      const std::string a = mj.at(0).get<std::string>(), b = mj.at(1).get<std::string>();
      check(a.find(' ') == std::string::npos && b.find(' ') == std::string::npos, file, ": merge [\"", a, "\", \"", b,
            "\"] holds a space, which GGUF's \"a b\" merges cannot");
      merges.push_back(a + " " + b);
    }
  }
  io::GgufMetadata m;
  m.emplace_back("tokenizer.ggml.model", io::GgufValue::string("gpt2"));
  m.emplace_back("tokenizer.ggml.pre", io::GgufValue::string(pre.name));
  m.emplace_back("tokenizer.ggml.tokens", io::GgufValue::strings_array(std::move(tokens)));
  m.emplace_back("tokenizer.ggml.token_type", io::GgufValue::i32_array(std::move(types)));
  m.emplace_back("tokenizer.ggml.merges", io::GgufValue::strings_array(std::move(merges)));
  add_special_metadata(m, *tok, folder);
  return m;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const io::GgufReader& f) {
  const std::string& path = f.path();
  const std::string model = f.get_string("tokenizer.ggml.model");
  check(model == "gpt2" || model == "llama", path, ": tokenizer.ggml.model '", model,
        "' is not supported (xgrad reads byte-level BPE, \"gpt2\", and SentencePiece BPE, \"llama\")");
  if (model == "llama") return load_spm_tokenizer(f);
  // The file's add_bos_token, as llama.cpp reads it (absent: no BOS, its default for "gpt2"
  // vocabularies); files exported before xgrad wrote true say false.
  if (is_byte_vocabulary(f))
    return std::make_unique<ByteTokenizer>(f.has("tokenizer.ggml.add_bos_token") && f.get_bool("tokenizer.ggml.add_bos_token"));
  const std::string pre_name = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";
  const LlamaCppPre* pre = pre_by_name(pre_name);
  check(pre != nullptr, path, ": tokenizer.ggml.pre '", pre_name,
        "' is not supported (xgrad splits text as llama.cpp's llama-bpe, qwen2 and gpt-2 pre-tokenizers do)");
  const io::GgufValue& tokens = f.at("tokenizer.ggml.tokens");
  check(tokens.is_array() && tokens.element == io::GgufType::String, path, ": tokenizer.ggml.tokens must be an array of strings");
  const VocabParts parts = split_vocab(f, tokens, false);
  json merges = json::array();
  if (f.has("tokenizer.ggml.merges")) {
    const io::GgufValue& m = f.at("tokenizer.ggml.merges");
    check(m.is_array() && (m.size() == 0 || m.element == io::GgufType::String), path, ": tokenizer.ggml.merges must be an array of strings");
    for (const std::string& s : m.strings) merges.push_back(s);
  }
  json split = pre->pattern[0] ? json{{"type", "Split"}, {"pattern", {{"Regex", pre->pattern}}}, {"behavior", "Isolated"}, {"invert", false}}
                               : json();
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", split.is_null()}};
  json doc = {{"added_tokens", parts.added},
              {"normalizer", nullptr},
              {"pre_tokenizer", split.is_null() ? byte_level : json{{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}}},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
              {"model",
               {{"type", "BPE"}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", pre->ignore_merges},
                {"vocab", parts.vocab}, {"merges", merges}}}};
  return std::make_unique<HfTokenizer>(doc, special_config(f, tokens, pre->ignore_merges), path);
}

}  // namespace xg::text

// Tests for text/hf_tokenizer (and the components under it): the ids of Hugging Face's
// tokenizers (Rust) for Llama-2, Llama-3 and Qwen3 on Persuasion, the WordNet held-out glosses
// and a Unicode set, id for id (tests/fixtures/gen_tokenizers.mjs); decode as the reference
// decodes; small files for the options those three do not use; and one-line errors naming the
// file, the JSON path and the value for what is not supported or malformed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli_run.hpp"
#include "text/hf_tokenizer.hpp"
#include "torch_fixture.hpp"

namespace fs = std::filesystem;
using xg::text::HfTokenizer;

namespace {

const std::string kHfTokDir = std::string(XGRAD_FIXTURE_DIR) + "/tokenizers";

struct HfTokCase {
  std::unique_ptr<HfTokenizer> tok;
  xg::TensorMap expected;
  nlohmann::json decoded;
};

// The tokenizer and the reference's results for `name` (loaded once per process).
const HfTokCase& hf_tok_case(const std::string& name) {
  static std::map<std::string, HfTokCase> cases;
  auto it = cases.find(name);
  if (it != cases.end()) return it->second;
  HfTokCase c;
  c.tok = HfTokenizer::from_folder(kHfTokDir + "/" + name);
  c.expected = xg::io::load_safetensors(kHfTokDir + "/" + name + "/expected.safetensors");
  c.decoded = nlohmann::json::parse(xg::test::slurp(kHfTokDir + "/" + name + "/decoded.json"));
  return cases.emplace(name, std::move(c)).first->second;
}

std::vector<int64_t> hf_tok_ids(const HfTokCase& c, const std::string& key) {
  const xg::Tensor& t = c.expected.at(key);
  const int64_t* p = t.data<int64_t>();
  return std::vector<int64_t>(p, p + t.numel());
}

// The texts of tests/fixtures/tokenizers/texts: Persuasion, the glosses (one per line), the
// Unicode set.
std::vector<std::string> hf_tok_glosses() {
  std::vector<std::string> lines;
  std::ifstream f(kHfTokDir + "/texts/glosses.txt");
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}
std::vector<std::string> hf_tok_unicode_set() {
  return nlohmann::json::parse(xg::test::slurp(kHfTokDir + "/texts/unicode.json")).get<std::vector<std::string>>();
}

// Equal ids, or the first position where they differ with a few ids of context.
::testing::AssertionResult same_token_ids(const std::vector<int64_t>& actual, const std::vector<int64_t>& expected) {
  std::size_t i = 0;
  while (i < actual.size() && i < expected.size() && actual[i] == expected[i]) ++i;
  if (i == actual.size() && i == expected.size()) return ::testing::AssertionSuccess();
  const auto around = [&](const std::vector<int64_t>& v) {
    std::string s;
    for (std::size_t k = i >= 3 ? i - 3 : 0; k < std::min(v.size(), i + 4); ++k) s += (k == i ? " [" : " ") + std::to_string(v[k]) + (k == i ? "]" : "");
    return s;
  };
  return ::testing::AssertionFailure() << "sizes " << actual.size() << " and " << expected.size()
                                       << ", first difference at " << i << ": got" << around(actual)
                                       << ", expected" << around(expected);
}

// Per-text ids: lengths[k] ids each, from one flat array.
std::vector<std::vector<int64_t>> hf_tok_split(const std::vector<int64_t>& flat, const std::vector<int64_t>& lengths) {
  std::vector<std::vector<int64_t>> out;
  std::size_t at = 0;
  for (int64_t n : lengths) {
    out.emplace_back(flat.begin() + at, flat.begin() + at + n);
    at += n;
  }
  return out;
}

std::vector<int64_t> with_special(const HfTokCase& c, const std::vector<int64_t>& ids) {
  std::vector<int64_t> out = hf_tok_ids(c, "special.prefix");
  out.insert(out.end(), ids.begin(), ids.end());
  const std::vector<int64_t> suffix = hf_tok_ids(c, "special.suffix");
  out.insert(out.end(), suffix.begin(), suffix.end());
  return out;
}

}  // namespace

class HfTokenizerReference : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerReference, PersuasionIdForIdAndBack) {
  const HfTokCase& c = hf_tok_case(GetParam());
  const std::string text = xg::test::slurp(kHfTokDir + "/texts/persuasion.txt");
  ASSERT_GT(text.size(), 400000u);
  const std::vector<int64_t> expected = hf_tok_ids(c, "persuasion.ids");
  const std::vector<int64_t> ids = c.tok->encode(text, false);
  EXPECT_TRUE(same_token_ids(ids, expected));
  EXPECT_TRUE(same_token_ids(c.tok->encode(text, true), with_special(c, expected)));
  const std::string back = c.tok->decode(ids, false);
  EXPECT_EQ(back, c.decoded["persuasion"].is_null() ? text : c.decoded["persuasion"].get<std::string>());
}

TEST_P(HfTokenizerReference, GlossesIdForIdAndBack) {
  const HfTokCase& c = hf_tok_case(GetParam());
  const std::vector<std::string> glosses = hf_tok_glosses();
  const auto expected = hf_tok_split(hf_tok_ids(c, "glosses.ids"), hf_tok_ids(c, "glosses.lengths"));
  ASSERT_EQ(glosses.size(), expected.size());
  int wrong = 0;
  for (std::size_t i = 0; i < glosses.size() && wrong < 5; ++i) {
    const std::vector<int64_t> ids = c.tok->encode(glosses[i], false);
    const ::testing::AssertionResult same = same_token_ids(ids, expected[i]);
    EXPECT_TRUE(same) << "gloss " << i << ": " << glosses[i];
    EXPECT_TRUE(same_token_ids(c.tok->encode(glosses[i], true), with_special(c, expected[i]))) << "gloss " << i;
    const std::string key = std::to_string(i);
    EXPECT_EQ(c.tok->decode(ids, false), c.decoded["glosses"].contains(key) ? c.decoded["glosses"][key].get<std::string>() : glosses[i]);
    wrong += !same;
  }
}

TEST_P(HfTokenizerReference, UnicodeSetIdForIdWithAndWithoutSpecialTokens) {
  const HfTokCase& c = hf_tok_case(GetParam());
  const std::vector<std::string> texts = hf_tok_unicode_set();
  const auto expected = hf_tok_split(hf_tok_ids(c, "unicode.ids"), hf_tok_ids(c, "unicode.lengths"));
  const auto expected_special = hf_tok_split(hf_tok_ids(c, "unicode.special.ids"), hf_tok_ids(c, "unicode.special.lengths"));
  ASSERT_EQ(texts.size(), expected.size());
  int round_trips = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const nlohmann::json& d = c.decoded["unicode"][i];
    const std::vector<int64_t> ids = c.tok->encode(texts[i], false);
    EXPECT_TRUE(same_token_ids(ids, expected[i])) << "text " << i << ": " << nlohmann::json(texts[i]).dump();
    const std::vector<int64_t> special = c.tok->encode(texts[i], true);
    EXPECT_TRUE(same_token_ids(special, expected_special[i])) << "text " << i << " with special tokens";
    // decode(encode(x)) is the reference's decode, and x wherever the reference round-trips.
    EXPECT_EQ(c.tok->decode(expected[i], false), d["decode"].get<std::string>()) << "text " << i;
    EXPECT_EQ(c.tok->decode(expected_special[i], false), d["special"].get<std::string>()) << "text " << i;
    EXPECT_EQ(c.tok->decode(expected_special[i], true), d["skip_special"].get<std::string>()) << "text " << i;
    round_trips += d["decode"].get<std::string>() == texts[i];
  }
  EXPECT_GE(round_trips, 60);  // all but those NFC or the reference changes
}

INSTANTIATE_TEST_SUITE_P(Text, HfTokenizerReference, ::testing::Values("llama2", "llama3", "qwen3"));

TEST(HfTokenizer, SpecialIdsFromTheConfigs) {
  const HfTokenizer& l2 = *hf_tok_case("llama2").tok;
  EXPECT_EQ(l2.vocab_size(), 32000);
  EXPECT_EQ(l2.bos_id(), 1);
  EXPECT_EQ(l2.eos_id(), 2);
  EXPECT_EQ(l2.pad_id(), -1);
  EXPECT_EQ(l2.token_to_id("\xE2\x96\x81the"), 272);  // "▁the"
  EXPECT_EQ(l2.id_to_token(13), "<0x0A>");
  const HfTokenizer& l3 = *hf_tok_case("llama3").tok;
  EXPECT_EQ(l3.vocab_size(), 128256);
  EXPECT_EQ(l3.bos_id(), 128000);
  EXPECT_EQ(l3.eos_id(), 128001);
  EXPECT_EQ(l3.token_to_id("<|eot_id|>"), 128009);
  const HfTokenizer& q3 = *hf_tok_case("qwen3").tok;
  EXPECT_EQ(q3.vocab_size(), 151669);
  EXPECT_EQ(q3.bos_id(), -1);
  EXPECT_EQ(q3.eos_id(), q3.token_to_id("<|im_end|>"));
  EXPECT_EQ(q3.pad_id(), q3.token_to_id("<|endoftext|>"));
  EXPECT_EQ(q3.token_to_id("not a token"), -1);
  EXPECT_EQ(q3.id_to_token(q3.token_to_id("\xC4\xA0the")), "\xC4\xA0the");  // "Ġthe"
  EXPECT_THROW(q3.id_to_token(q3.vocab_size()), xg::Error);
  EXPECT_THROW(q3.decode({-1}, false), xg::Error);
  // Special tokens in the text are matched whether or not special tokens are added.
  EXPECT_EQ(q3.encode("<|im_start|>", false), (std::vector<int64_t>{151644}));
  EXPECT_THROW(q3.encode("\xFF", false), xg::Error);
}

// ---- Small files: the options the three reference files leave out, and the errors. ----

namespace {

// A tiny SentencePiece-style tokenizer.json: byte fallback, an unknown token, merges "a b".
// NOTE: the ids and texts expected from it below are what Hugging Face's tokenizers gives for
// the same file with both merges as strings (it refuses a mix of the two forms; xgrad reads it).
nlohmann::json hf_tok_tiny() {
  return nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
                     {"id": 1, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "vocab": {"<unk>": 0, "<s>": 1, "a": 2, "b": 3, "\u2581": 4, "ab": 5, "\u2581ab": 6, "<0xC3>": 7, "<0xA9>": 8},
              "merges": ["a b", ["\u2581", "ab"]]}
  })");
}

// Writes `j` as tokenizer.json (and `config` as tokenizer_config.json unless null) into a
// fresh folder of the current test, and returns the folder.
std::string hf_tok_folder(const nlohmann::json& j, const nlohmann::json& config = nullptr, const std::string& sub = "") {
  const fs::path d = xg::test::fresh_test_dir(sub);
  std::ofstream(d / "tokenizer.json") << j.dump();
  if (!config.is_null()) std::ofstream(d / "tokenizer_config.json") << config.dump();
  return d.string();
}

// The message of the xg::Error that loading `j` throws ("" when none is thrown).
std::string hf_tok_load_error(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  try {
    HfTokenizer::from_folder(hf_tok_folder(j, config));
  } catch (const xg::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(HfTokenizer, MetaspaceByteFallbackAndFusedUnknowns) {
  const auto tok = HfTokenizer::from_folder(hf_tok_folder(hf_tok_tiny()));
  // "▁ab" merges in two ranks; "é" falls back to its bytes; "xy" is one fused unknown.
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int64_t>{6}));
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(tok->encode("ab \xC3\xA9", false), (std::vector<int64_t>{6, 4, 7, 8}));
  EXPECT_EQ(tok->encode("axyb", false), (std::vector<int64_t>{4, 2, 0, 3}));
  // Metaspace "first": only the text at the start gets the "▁".
  EXPECT_EQ(tok->encode("<s>ab", false), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(tok->decode({6, 4, 5}, false), "ab ab");
  EXPECT_EQ(tok->decode({1, 6}, true), "ab");
  EXPECT_EQ(tok->vocab_size(), 9);
  EXPECT_EQ(tok->bos_id(), -1);  // no tokenizer_config.json
}

TEST(HfTokenizer, ConfigAddBosAndEosDecideTheSpecialTokens) {
  const nlohmann::json config = {{"bos_token", "<s>"}, {"eos_token", {{"content", "<unk>"}}}, {"add_bos_token", false},
                                 {"add_eos_token", true}};
  const auto tok = HfTokenizer::from_folder(hf_tok_folder(hf_tok_tiny(), config));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 0);
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int64_t>{6, 0}));
}

TEST(HfTokenizer, AddedTokensStripWhitespaceWhenAsked) {
  nlohmann::json j = hf_tok_tiny();
  j["added_tokens"].push_back({{"id", 9}, {"content", "<x>"}, {"special", false}, {"lstrip", true}, {"rstrip", true}});
  const auto tok = HfTokenizer::from_folder(hf_tok_folder(j));
  EXPECT_EQ(tok->encode("ab  <x>  ab", false), (std::vector<int64_t>{6, 9, 5}));
  EXPECT_EQ(tok->decode({9}, true), "<x>");  // not special: kept
}

TEST(HfTokenizer, UnsupportedComponentsNameFilePathAndValue) {
  const auto expect_error = [](const nlohmann::json& j, const std::string& part) {
    const std::string msg = hf_tok_load_error(j);
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.json: "), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  nlohmann::json j = hf_tok_tiny();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(j, "tokenizer.json: pre_tokenizer.type \"Whitespace\" is not supported");
  j = hf_tok_tiny();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
  expect_error(j, "pre_tokenizer.pretokenizers[1].type \"Digits\" is not supported");
  j = hf_tok_tiny();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j, "normalizer.type \"Lowercase\" is not supported");
  j = hf_tok_tiny();
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model.type \"WordPiece\" is not supported");
  j = hf_tok_tiny();
  j["model"]["dropout"] = 0.1;
  expect_error(j, "model.dropout 0.1 is not supported");
  j = hf_tok_tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "decoder.type \"WordPiece\" is not supported");
  j = hf_tok_tiny();
  j["post_processor"] = {{"type", "Other"}};
  expect_error(j, "post_processor.type \"Other\" is not supported");
  j = hf_tok_tiny();
  j["truncation"] = {{"max_length", 8}};
  expect_error(j, "truncation {\"max_length\":8} is not supported");
  j = hf_tok_tiny();
  j["added_tokens"][1]["single_word"] = true;
  expect_error(j, "added_tokens[1].single_word true is not supported");
  j = hf_tok_tiny();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(?<x"}}}, {"behavior", "Isolated"}};
  expect_error(j, "pre_tokenizer.pattern.Regex: pattern (?<x does not compile");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_error(j, "pre_tokenizer.behavior \"Sideways\" is not supported");
}

TEST(HfTokenizer, MalformedFilesNameFileAndKey) {
  const auto expect_error = [](const nlohmann::json& j, const std::string& part, const nlohmann::json& config = nullptr) {
    const std::string msg = hf_tok_load_error(j, config);
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  nlohmann::json j = hf_tok_tiny();
  j["model"].erase("vocab");
  expect_error(j, "tokenizer.json: model.vocab is missing");
  j = hf_tok_tiny();
  j["model"]["merges"][0] = "a";
  expect_error(j, "tokenizer.json: model.merges[0] must be \"a b\" or [\"a\", \"b\"]");
  j = hf_tok_tiny();
  j["model"]["merges"][1] = {"\u2581", "zz"};
  expect_error(j, "model.merges[1] names \"zz\", which is not in model.vocab");
  j = hf_tok_tiny();
  j["model"]["vocab"]["a"] = "two";
  expect_error(j, "tokenizer.json: model.vocab.a must be an integer, got \"two\"");
  j = hf_tok_tiny();
  j["added_tokens"][0].erase("content");
  expect_error(j, "tokenizer.json: added_tokens[0].content is missing");
  expect_error(hf_tok_tiny(), "tokenizer_config.json: bos_token names \"<t>\", which is not in",
               nlohmann::json{{"bos_token", "<t>"}});
  expect_error(hf_tok_tiny(), "tokenizer_config.json: add_eos_token is true, but eos_token is not set",
               nlohmann::json{{"add_eos_token", true}});
  // Not JSON at all, or no file.
  const fs::path d = xg::test::fresh_test_dir("broken");
  std::ofstream(d / "tokenizer.json") << "{\"model\": ";
  try {
    HfTokenizer::from_folder(d.string());
    ADD_FAILURE() << "no error";
  } catch (const xg::Error& e) {
    EXPECT_NE(std::string(e.what()).find((d / "tokenizer.json").string() + ": is not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(HfTokenizer::from_folder((d / "none").string()), xg::Error);
}

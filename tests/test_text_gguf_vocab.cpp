// GGUF tokenizer metadata (text/gguf_vocab.hpp): the byte tokenizer's vocabulary round-trips to
// the byte tokenizer, a tokenizer.json's split regex picks llama.cpp's pre-tokenizer, and what
// xgrad cannot split as llama.cpp does is refused by name. (Ids against llama.cpp's own:
// tests/test_nn_gguf_model.cpp.)
#include "text/gguf_vocab.hpp"

#include "tests/gguf_test_util.hpp"
#include "tests/torch_fixture.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/unicode.hpp"

#include <algorithm>

namespace xg {
namespace {

namespace fs = std::filesystem;

std::string gguf_vocab_file(const fs::path& dir, const io::GgufMetadata& meta) {
  const std::string p = (dir / "v.gguf").string();
  io::save_gguf(p, meta, {});
  return p;
}

TEST(TextGgufVocab, ByteTokenizerRoundTrips) {
  const fs::path dir = test::fresh_test_dir();
  const io::GgufMetadata meta = text::gguf_tokenizer_metadata(xg::io::ModelSource::open(test::gguf_fixture("trained").string()), 300);
  io::GgufReader f(gguf_vocab_file(dir, meta));
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").size(), 300u);  // padded with [PAD<id>] to the model's vocabulary
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").strings[32], "Ġ");
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").strings[299], "[PAD299]");
  auto tok = text::load_gguf_tokenizer(f);
  EXPECT_NE(dynamic_cast<text::ByteTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->eos_id(), text::ByteTokenizer::kEos);
}

// llama.cpp's tokenization of a prompt by a "gpt2" vocabulary without merges, from the file's
// metadata alone: BOS when add_bos_token says so (absent: none, llama.cpp's default for this
// type), then each byte's token (its GPT-2 byte-level character) looked up in the vocabulary.
std::vector<int64_t> llama_cpp_rule_ids(const io::GgufReader& f, const std::string& prompt) {
  std::vector<int64_t> ids;
  if (f.has("tokenizer.ggml.add_bos_token") && f.get_bool("tokenizer.ggml.add_bos_token"))
    ids.push_back(f.get_int("tokenizer.ggml.bos_token_id"));
  const std::vector<std::string>& tokens = f.at("tokenizer.ggml.tokens").strings;
  for (unsigned char c : prompt) {
    const std::string ch = text::byte_level_chars()[c];
    ids.push_back(std::find(tokens.begin(), tokens.end(), ch) - tokens.begin());
  }
  return ids;
}

TEST(TextGgufVocab, AnExportedByteModelStartsAPromptAsXgGenerateDoes) {
  // The export used to say add_bos_token false while xg-generate's raw format puts the
  // byte tokenizer's BOS (256) first, so llama.cpp continued another sequence than xgrad did.
  const fs::path dir = test::fresh_test_dir();
  const io::GgufMetadata meta = text::gguf_tokenizer_metadata(xg::io::ModelSource::open(test::gguf_fixture("trained").string()), 259);
  io::GgufReader f(gguf_vocab_file(dir, meta));
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_bos_token"));
  const auto tok = text::load_gguf_tokenizer(f);
  for (const std::string prompt : {"Once upon a time", "", "caf\xc3\xa9 \n\t!"}) {
    EXPECT_EQ(tok->encode(prompt, true), llama_cpp_rule_ids(f, prompt)) << prompt;
    EXPECT_EQ(tok->encode(prompt, true).front(), text::ByteTokenizer::kBos);
  }
  // A file exported before says false, and xgrad now reads it as llama.cpp does: no BOS.
  io::GgufMetadata old = meta;
  for (auto& [k, v] : old)
    if (k == "tokenizer.ggml.add_bos_token") v = io::GgufValue::boolean(false);
  io::GgufReader g(gguf_vocab_file(test::fresh_test_dir("old"), old));
  const auto old_tok = text::load_gguf_tokenizer(g);
  EXPECT_EQ(old_tok->encode("hi", true), llama_cpp_rule_ids(g, "hi"));
  EXPECT_EQ(old_tok->encode("hi", true), (std::vector<int64_t>{'h', 'i'}));
}

TEST(TextGgufVocab, PreTokenizerFollowsTheSplitRegex) {
  const fs::path dir = test::fresh_test_dir();
  const fs::path q = test::gguf_source_folder("qwen3", dir), l = test::gguf_source_folder("llama3", dir);
  for (const auto& [folder, pre] : {std::pair<fs::path, const char*>{q, "qwen2"}, {l, "llama-bpe"}}) {
    io::GgufMetadata meta = text::gguf_tokenizer_metadata(xg::io::ModelSource::open(folder.string()), 151936);
    for (const auto& [k, v] : meta)
      if (k == "tokenizer.ggml.pre") {
        EXPECT_EQ(v.strings[0], pre);
      }
  }
  io::GgufMetadata meta = text::gguf_tokenizer_metadata(xg::io::ModelSource::open(q.string()), 151936);
  for (auto& [k, v] : meta)
    if (k == "tokenizer.ggml.pre") v = io::GgufValue::string("deepseek-llm");
  io::GgufReader f(gguf_vocab_file(dir, meta));
  EXPECT_XG_ERROR(text::load_gguf_tokenizer(f), "tokenizer.ggml.pre 'deepseek-llm' is not supported");
  io::GgufReader g(gguf_vocab_file(dir, {{"tokenizer.ggml.model", io::GgufValue::string("bert")}}));
  EXPECT_XG_ERROR(text::load_gguf_tokenizer(g), "tokenizer.ggml.model 'bert' is not supported");
}

// Llama 2's SentencePiece vocabulary as tokenizer.ggml.model "llama" (scores from the merge
// ranks): the ids of the source tokenizer.json, of the tokenizer read back from the GGUF
// metadata, and of llama.cpp on that metadata (gen_gguf.sh's llama2 case) are the same.
TEST(TextGgufVocab, SentencePieceIdsAreLlamaCpps) {
  const fs::path dir = test::fresh_test_dir();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(fs::path(XGRAD_FIXTURE_DIR) / "tokenizers" / "llama2" / f, dir / f);
  const io::GgufMetadata meta = text::gguf_tokenizer_metadata(xg::io::ModelSource::open(dir.string()), 32000);
  io::GgufReader f(gguf_vocab_file(dir, meta));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(f.get_bool("tokenizer.ggml.add_space_prefix"));
  EXPECT_EQ(f.at("tokenizer.ggml.token_type").ints[0], 2);    // <unk>
  EXPECT_EQ(f.at("tokenizer.ggml.token_type").ints[1], 3);    // <s>
  EXPECT_EQ(f.at("tokenizer.ggml.token_type").ints[3], 6);    // <0x00>
  const nlohmann::json& c = test::gguf_case("llama2");
  const std::vector<int64_t> want = c.at("ids").get<std::vector<int64_t>>();
  const std::string text = test::gguf_expected().at("text");
  auto source = text::load_tokenizer(dir.string());
  auto back = text::load_gguf_tokenizer(f);
  for (const text::Tokenizer* t : {source.get(), back.get()}) {
    std::vector<int64_t> ids = t->encode(text, false);
    ASSERT_GE(ids.size(), want.size());
    ids.resize(want.size());
    EXPECT_EQ(ids, want);
  }
  EXPECT_EQ(back->encode(text, false), source->encode(text, false));
  EXPECT_EQ(back->encode("Hi", true), source->encode("Hi", true));  // BOS added alike
  EXPECT_EQ(back->decode(back->encode(text, false), false), text);
}

}  // namespace
}  // namespace xg

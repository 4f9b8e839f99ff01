// GGUF tokenizer metadata (text/gguf_vocab.hpp): the byte tokenizer's vocabulary round-trips to
// the byte tokenizer, a tokenizer.json's split regex picks llama.cpp's pre-tokenizer, and what
// xgrad cannot split as llama.cpp does is refused by name. (Ids against llama.cpp's own:
// tests/test_nn_gguf_model.cpp.)
#include "text/gguf_vocab.hpp"

#include "tests/gguf_test_util.hpp"
#include "tests/torch_fixture.hpp"
#include "text/byte_tokenizer.hpp"

namespace xg {
namespace {

namespace fs = std::filesystem;

std::string gguf_vocab_file(const fs::path& dir, const GgufMetadata& meta) {
  const std::string p = (dir / "v.gguf").string();
  save_gguf(p, meta, {});
  return p;
}

TEST(TextGgufVocab, ByteTokenizerRoundTrips) {
  const fs::path dir = test::fresh_test_dir();
  const GgufMetadata meta = text::gguf_tokenizer_metadata(test::gguf_fixture("trained").string(), 300);
  GgufReader f(gguf_vocab_file(dir, meta));
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").size(), 300u);  // padded with [PAD<id>] to the model's vocabulary
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").strings[32], "Ġ");
  EXPECT_EQ(f.at("tokenizer.ggml.tokens").strings[299], "[PAD299]");
  auto tok = text::load_gguf_tokenizer(f);
  EXPECT_NE(dynamic_cast<text::ByteTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->eos_id(), text::ByteTokenizer::kEos);
}

TEST(TextGgufVocab, PreTokenizerFollowsTheSplitRegex) {
  const fs::path dir = test::fresh_test_dir();
  const fs::path q = test::gguf_source_folder("qwen3", dir), l = test::gguf_source_folder("llama3", dir);
  for (const auto& [folder, pre] : {std::pair<fs::path, const char*>{q, "qwen2"}, {l, "llama-bpe"}}) {
    GgufMetadata meta = text::gguf_tokenizer_metadata(folder.string(), 151936);
    for (const auto& [k, v] : meta)
      if (k == "tokenizer.ggml.pre") {
        EXPECT_EQ(v.strings[0], pre);
      }
  }
  GgufMetadata meta = text::gguf_tokenizer_metadata(q.string(), 151936);
  for (auto& [k, v] : meta)
    if (k == "tokenizer.ggml.pre") v = GgufValue::string("deepseek-llm");
  GgufReader f(gguf_vocab_file(dir, meta));
  EXPECT_XG_ERROR(text::load_gguf_tokenizer(f), "tokenizer.ggml.pre 'deepseek-llm' is not supported");
  GgufReader g(gguf_vocab_file(dir, {{"tokenizer.ggml.model", GgufValue::string("llama")}}));
  EXPECT_XG_ERROR(text::load_gguf_tokenizer(g), "tokenizer.ggml.model 'llama' is not supported");
  // A SentencePiece-style tokenizer.json is refused on export, naming the file.
  const fs::path spm = dir / "spm";
  fs::create_directories(spm);
  fs::copy_file(fs::path(XGRAD_FIXTURE_DIR) / "tokenizers" / "llama2" / "tokenizer.json", spm / "tokenizer.json");
  EXPECT_XG_ERROR(text::gguf_tokenizer_metadata(spm.string(), 32000), "pre_tokenizer null (SentencePiece-style tokenizers are not exported)");
}

}  // namespace
}  // namespace xg

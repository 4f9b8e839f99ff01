// Tests for text/tokenizer (load_tokenizer) and text/byte_tokenizer: a Hugging Face folder gives
// its tokenizer.json, an xgrad model folder the byte tokenizer, anything else a one-line error;
// the byte tokenizer through the interface.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli_run.hpp"
#include "text/byte_tokenizer.hpp"
#include "text/tokenizer.hpp"
#include "torch_fixture.hpp"

namespace fs = std::filesystem;

TEST(TextTokenizer, ByteTokenizerThroughTheInterface) {
  const xg::text::ByteTokenizer bytes;
  const xg::text::Tokenizer& tok = bytes;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_id(), 257);
  EXPECT_EQ(tok.pad_id(), 258);
  EXPECT_EQ(tok.encode("Hi", true), (std::vector<int64_t>{256, 72, 105}));
  EXPECT_EQ(tok.encode("Hi", false), (std::vector<int64_t>{72, 105}));
  EXPECT_EQ(tok.decode({256, 72, 105, 257}, false), "Hi");
  EXPECT_EQ(tok.decode({256, 72, 105, 257}, true), "Hi");
  EXPECT_EQ(tok.token_to_id("A"), 65);
  EXPECT_EQ(tok.token_to_id("<eos>"), 257);
  EXPECT_EQ(tok.token_to_id("AB"), -1);
  EXPECT_EQ(tok.id_to_token(65), "A");
  EXPECT_EQ(tok.id_to_token(258), "<pad>");
  EXPECT_THROW(tok.id_to_token(259), xg::Error);
  EXPECT_THROW(tok.decode({300}, false), xg::Error);
}

TEST(TextTokenizer, LoadTellsHuggingFaceAndXgradFoldersApart) {
  const auto hf = xg::text::load_tokenizer(std::string(XGRAD_FIXTURE_DIR) + "/tokenizers/qwen3");
  EXPECT_EQ(hf->vocab_size(), 151669);
  EXPECT_EQ(hf->encode("Hello world", false), (std::vector<int64_t>{9707, 1879}));

  const fs::path x = xg::test::fresh_test_dir("xgrad");
  std::ofstream(x / "config.json") << R"({"vocab_size": 259, "n_layers": 2, "block": {"d_model": 8}})";
  const auto bytes = xg::text::load_tokenizer(x.string());
  EXPECT_EQ(bytes->vocab_size(), 259);
  EXPECT_EQ(bytes->encode("a", true), (std::vector<int64_t>{256, 97}));

  const auto expect_error = [](const std::string& folder, const std::string& part) {
    try {
      xg::text::load_tokenizer(folder);
      ADD_FAILURE() << "no error for " << folder;
    } catch (const xg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const fs::path h = xg::test::fresh_test_dir("hf_without_tokenizer");
  std::ofstream(h / "config.json") << R"({"model_type": "llama", "vocab_size": 32000})";
  expect_error(h.string(), "has no tokenizer.json, and its config.json is not an xgrad model's");
  expect_error(xg::test::fresh_test_dir("empty").string(), "has neither tokenizer.json");
  expect_error("/nonexistent-xgrad-folder", "is not a folder");
}

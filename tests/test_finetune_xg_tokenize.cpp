// tools/xg_tokenize.cpp, run as a user would: lines in, one line of ids out per line
// (the reference's ids for Qwen3 and Llama-2), ids back to text with --decode, the byte
// tokenizer for an xgrad folder, and one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli_run.hpp"

namespace fs = std::filesystem;
using xg::test::count_lines;
using xg::test::run_cli;

namespace {

const std::string kXgTokenize = std::string(XGRAD_TOOL_DIR) + "/xg-tokenize";
const std::string kTokenizerFixtures = std::string(XGRAD_FIXTURE_DIR) + "/tokenizers";

// A file of the current test holding `text`, for stdin.
std::string tokenize_input(const std::string& text) {
  const std::string path = xg::test::test_file_base() + ".in";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(XgTokenize, LinesToIdsAndBack) {
  const std::string qwen = kTokenizerFixtures + "/qwen3";
  xg::test::CliRun r = run_cli(kXgTokenize, "--tokenizer " + qwen + " < " + tokenize_input("Hello world\n\n<|im_end|>x\n"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "9707 1879\n\n151645 87\n");
  r = run_cli(kXgTokenize, "--tokenizer " + qwen + " --decode < " + tokenize_input("9707 1879\n\n151645 87\n"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Hello world\n\n<|im_end|>x\n");
  r = run_cli(kXgTokenize, "--tokenizer " + qwen + " --decode --skip-special-tokens < " + tokenize_input("151645 87\n"));
  EXPECT_EQ(r.out, "x\n");
  // Llama-2 adds BOS when asked.
  r = run_cli(kXgTokenize, "--tokenizer " + kTokenizerFixtures + "/llama2 --add-special-tokens < " + tokenize_input("Hello\n"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "1 22557\n");  // "<s>", "▁Hello"
}

TEST(XgTokenize, ByteTokenizerForAnXgradFolder) {
  const fs::path d = xg::test::fresh_test_dir("model");
  std::ofstream(d / "config.json") << R"({"vocab_size": 259, "n_layers": 1, "block": {"d_model": 8}})";
  xg::test::CliRun r = run_cli(kXgTokenize, "--tokenizer " + d.string() + " --add-special-tokens < " + tokenize_input("Hi\n"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "256 72 105\n");
}

TEST(XgTokenize, BadFlagsAndInputsAreOneLine) {
  const std::string qwen = kTokenizerFixtures + "/qwen3";
  for (const std::string& args : {std::string("--bogus"), std::string(""), "--tokenizer " + qwen + " --decode --add-special-tokens"}) {
    xg::test::CliRun r = run_cli(kXgTokenize, args + " < /dev/null");
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("xg-tokenize: ", 0), 0u) << r.err;
  }
  xg::test::CliRun r = run_cli(kXgTokenize, "--tokenizer " + qwen + " --decode < " + tokenize_input("1 2\n3 x4\n"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "xg-tokenize: stdin line 2: \"x4\" is not a token id\n");
  r = run_cli(kXgTokenize, "--tokenizer /nonexistent-xgrad < /dev/null");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

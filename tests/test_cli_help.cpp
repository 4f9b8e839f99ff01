// Every executable's --help, as a person reads it (cli::help_text): descriptions wrap at
// spaces only (a file name is never cut in two), no line is wider than 100 columns, and every
// floating-point default prints short (0.1, not 0.10000000000000001).
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "tests/cli_run.hpp"
#include "tools/cli/flags.hpp"

namespace cli_help_tests {

namespace {

std::vector<std::pair<std::string, std::string>> executables() {
  std::vector<std::pair<std::string, std::string>> exes;
  for (const char* tool : {"xg-data", "xg-train", "xg-finetune", "xg-generate", "xg-tokenize", "xg-export"})
    exes.emplace_back(tool, std::string(XGRAD_TOOL_DIR) + "/" + tool + " --help");
#ifdef XGRAD_PRENORM_EXE
  exes.emplace_back("prenorm_vs_postnorm", std::string(XGRAD_PRENORM_EXE) + " --help");
#endif
#ifdef XGRAD_SEED_DEMOS_EXE
  exes.emplace_back("seed_demos", std::string(XGRAD_SEED_DEMOS_EXE) + " --help");
#endif
#ifdef XGRAD_STEP_BENCH_EXE
  exes.emplace_back("xgrad_step_bench", std::string(XGRAD_STEP_BENCH_EXE) + " --help");
  exes.emplace_back("xgrad_lora_bench", std::string(XGRAD_LORA_BENCH_EXE) + " --help");
#endif
  return exes;
}

// The help with each line's leading spaces and the line breaks collapsed to one space: a word
// wrapped at a space reads whole, a word cut in two does not.
std::string joined(const std::string& help) {
  return std::regex_replace(help, std::regex("\n *"), " ");
}

}  // namespace

TEST(CliHelp, EveryExecutableWrapsAtSpacesAndPrintsShortDefaults) {
  const std::regex long_float(R"([0-9]\.[0-9]{12,})");
  for (const auto& [name, cmd] : executables()) {
    SCOPED_TRACE(name);
    const xg::test::CliRun r = xg::test::run_cli("sh", "-c '" + cmd + "'");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_FALSE(std::regex_search(r.out, long_float)) << r.out;
    // Every line but the usage line (the synopsis is not wrapped) fits in 100 columns.
    std::istringstream lines(r.out);
    std::string line;
    std::getline(lines, line);
    while (std::getline(lines, line)) EXPECT_LE(line.size(), 100u) << "'" << line << "'";
  }
}

TEST(CliHelp, TrainersNameTheirFilesWhole) {
  for (const char* tool : {"xg-train", "xg-finetune"}) {
    SCOPED_TRACE(tool);
    const xg::test::CliRun r = xg::test::run_cli(std::string(XGRAD_TOOL_DIR) + "/" + tool, "--help");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(joined(r.out).find("<out>/checkpoint.safetensors"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--max-skipped arg (=0.1)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--warmup arg (=auto)"), std::string::npos) << r.out;
  }
}

// A CPU whose oneDNN has no bf16 matmul (an AVX2 one; ONEDNN_MAX_CPU_ISA=AVX2 makes this one
// look so) refuses XGRAD_GEMM_BF16=onednn on one line as the program starts, and without the
// variable says its bf16 products run widened and why.
TEST(CliHelp, AnAvx2CpuRefusesOneDnnBf16ProductsAndSaysWhichRun) {
  const std::string exe = std::string(XGRAD_TOOL_DIR) + "/xg-train";
  xg::test::CliRun r = xg::test::run_cli("env", "ONEDNN_MAX_CPU_ISA=AVX2 XGRAD_GEMM_BF16=onednn '" + exe + "' --help");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "xg-train: XGRAD_GEMM_BF16=onednn: oneDNN has no bf16 matmul on this CPU (it needs AVX-512); unset it or "
            "use widened (see --help)\n");
  r = xg::test::run_cli("env", "-u XGRAD_GEMM_BF16 ONEDNN_MAX_CPU_ISA=AVX2 '" + exe + "' --help");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(joined(r.out).find("bf16 matrix products: bf16 widened to float32, then"), std::string::npos) << r.out;
  EXPECT_NE(joined(r.out).find("(the CPU has no AVX512-BF16 or AMX)"), std::string::npos) << r.out;
}

// help_text itself: one column for all groups, wrapping at spaces, a long word on its own line.
TEST(CliHelp, HelpTextWrapsAtSpaces) {
  namespace po = boost::program_options;
  double rate = 0.1;
  po::options_description opts = xg::cli::flag_group("prog options");
  po::options_description group = xg::cli::flag_group("more");
  opts.add_options()("rate", po::value(&rate)->default_value(rate), "a rate");
  group.add_options()("out", po::value<std::string>(),
                      "the folder that holds config.json, model.safetensors and the checkpoint "
                      "<out>/checkpoint.safetensors, written atomically");
  opts.add(group);
  const std::string help = xg::cli::help_text(opts, 60);
  EXPECT_NE(help.find("  --rate arg (=0.1)  a rate\n"), std::string::npos) << help;
  EXPECT_NE(help.find("<out>/checkpoint.safetensors"), std::string::npos) << help;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 60u) << line;
  EXPECT_NE(help.find("more:\n"), std::string::npos) << help;
}

}  // namespace cli_help_tests

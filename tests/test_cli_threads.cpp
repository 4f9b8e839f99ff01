// Tests for cli/threads.cpp and autograd/threads.cpp: --threads in every executable, the
// library's thread count, and the one-line description of the threads and their wait policy.
#include "cli/threads.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "autograd/threads.hpp"
#include "cli/flags.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace {

// Restores the thread count a test changes.
struct ThreadCountGuard {
  int saved = xg::num_threads();
  ~ThreadCountGuard() { xg::set_num_threads(saved); }
};

}  // namespace

TEST(CliThreads, ParsedFlagSetsTheThreadCount) {
  ThreadCountGuard guard;
  int threads = 0;
  boost::program_options::options_description opts = xg::cli::threads_flag(threads);
  boost::program_options::variables_map vm;
  const char* argv[] = {"prog", "--threads", "1"};
  xg::cli::store_checked(boost::program_options::parse_command_line(3, argv, opts), vm);
  boost::program_options::notify(vm);
  EXPECT_EQ(threads, 1);
  xg::cli::apply_threads(threads);
  EXPECT_EQ(xg::num_threads(), 1);
  EXPECT_EQ(xg::threads_description().rfind("1 thread, ", 0), 0u) << xg::threads_description();
}

TEST(CliThreads, ZeroKeepsTheDefault) {
  ThreadCountGuard guard;
  const int before = xg::num_threads();
  xg::cli::apply_threads(0);
  EXPECT_EQ(xg::num_threads(), before);
}

TEST(CliThreads, OutOfRangeIsAUsageErrorNamingTheFlag) {
  for (int bad : {-1, 1025}) {
    try {
      xg::cli::apply_threads(bad);
      ADD_FAILURE() << "no error for --threads " << bad;
    } catch (const xg::cli::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "--threads: expected 0 (the default) or 1..1024, got " + std::to_string(bad));
    }
  }
  EXPECT_XG_ERROR(xg::set_num_threads(0), "set_num_threads: expected at least 1 thread, got 0");
}

// Every executable takes the flag and refuses a bad value before doing any work.
TEST(CliThreads, EveryExecutableTakesTheFlag) {
  const std::string tools = XGRAD_TOOL_DIR;
  std::vector<std::pair<std::string, std::string>> exes = {
      {tools + "/xg-train", "--data d --out o "},
      {tools + "/xg-finetune", "--base b --data d --out o "},
      {tools + "/xg-generate", "--base b "},
      {tools + "/xg-data", ""},
      {XGRAD_PRENORM_EXE, ""},
      {XGRAD_SEED_DEMOS_EXE, "positions "}};
#ifdef XGRAD_STEP_BENCH_EXE  // built with XGRAD_BUILD_BENCH
  exes.emplace_back(XGRAD_STEP_BENCH_EXE, "");
#endif
  for (const auto& [exe, args] : exes) {
    SCOPED_TRACE(exe);
    const xg::test::CliRun help = xg::test::run_cli(exe, args + "--help");
    EXPECT_EQ(help.status, 0);
    EXPECT_NE(help.out.find("--threads"), std::string::npos) << help.out;
    const xg::test::CliRun bad = xg::test::run_cli(exe, args + "--threads 2000");  // required flags given: the bad value is what fails
    EXPECT_EQ(bad.status, 2);
    EXPECT_NE(bad.err.find("--threads: expected 0 (the default) or 1..1024, got 2000"), std::string::npos) << bad.err;
  }
}

// Tests for cli/threads.cpp and autograd/threads.cpp: --threads in every executable, the
// library's thread count, and the one-line description of the threads and their wait policy.
#include "cli/threads.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
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

// Every executable with the flags it requires, so that a bad --threads is what fails.
static std::vector<std::pair<std::string, std::string>> executables() {
  const std::string tools = XGRAD_TOOL_DIR;
  std::vector<std::pair<std::string, std::string>> exes = {
      {tools + "/xg-train", "--data d --out o "},
      {tools + "/xg-finetune", "--base b --data d --out o "},
      {tools + "/xg-generate", "--base b "},
      {tools + "/xg-tokenize", "--tokenizer t "},
      {tools + "/xg-export", "--base b --to gguf --out o "},
      {tools + "/xg-data", ""},
      {XGRAD_PRENORM_EXE, ""},
      {XGRAD_SEED_DEMOS_EXE, "positions "}};
#ifdef XGRAD_STEP_BENCH_EXE  // built with XGRAD_BUILD_BENCH
  exes.emplace_back(XGRAD_STEP_BENCH_EXE, "");
  exes.emplace_back(XGRAD_LORA_BENCH_EXE, "");
#endif
  return exes;
}

// Every executable takes the flag and refuses a bad value before doing any work.
TEST(CliThreads, EveryExecutableTakesTheFlag) {
  const auto exes = executables();
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

// libgomp reads its wait policy before main; xgrad's default (passive, from
// libxgrad_wait_policy.so's constructor) must be in the environment by then, which depends on
// the order the libraries are initialised in. libgomp's own report (OMP_DISPLAY_ENV=verbose)
// says what it read: passive is a spin count of 0 (its default spins 300,000 times; LLVM's
// libomp, which the sanitizer build links, reads the environment later and shows a block time
// of 0). A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is never overridden.
TEST(CliThreads, DefaultPassiveWaitReachesLibgompInEveryExecutable) {
  const std::string tools = XGRAD_TOOL_DIR;
  const std::string clean = "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u XGRAD_DEFAULT_WAIT_POLICY OMP_DISPLAY_ENV=verbose ";
  for (const auto& [exe, args] : executables()) {
    SCOPED_TRACE(exe);
    const xg::test::CliRun def = xg::test::run_cli("/usr/bin/env", clean + "'" + exe + "' " + args + "--help");
    EXPECT_EQ(def.status, 0);
    // libgomp: a spin count of 0; LLVM's libomp (the sanitizer build's clang): a block time of 0.
    EXPECT_TRUE(def.err.find("GOMP_SPINCOUNT = '0'") != std::string::npos ||
                def.err.find("KMP_BLOCKTIME='0'") != std::string::npos)
        << def.err;
  }
  const std::string exe = tools + "/xg-generate";  // its --help ends with the threads line
  const xg::test::CliRun def = xg::test::run_cli("/usr/bin/env", clean + "'" + exe + "' --help");
  EXPECT_NE(def.out.find("threads, passive wait (xgrad's default; OMP_WAIT_POLICY=active to spin)"), std::string::npos)
      << def.out;
  const xg::test::CliRun active = xg::test::run_cli("/usr/bin/env", clean + "OMP_WAIT_POLICY=active '" + exe + "' --help");
  EXPECT_NE(active.err.find("OMP_WAIT_POLICY = 'ACTIVE'"), std::string::npos) << active.err;
  EXPECT_NE(active.out.find("threads, OMP_WAIT_POLICY=active"), std::string::npos) << active.out;
  const xg::test::CliRun spin = xg::test::run_cli("/usr/bin/env", clean + "GOMP_SPINCOUNT=1000 '" + exe + "' --help");
  EXPECT_NE(spin.err.find("GOMP_SPINCOUNT = '1000'"), std::string::npos) << spin.err;
  EXPECT_NE(spin.out.find("threads, GOMP_SPINCOUNT=1000"), std::string::npos) << spin.out;
}

// This test process links the library too, so its own policy is xgrad's default, and its
// children (the executables the other tests run) inherit it as xgrad's default, not as a
// user's setting.
TEST(CliThreads, ThisProcessAndItsChildrenReportTheDefault) {
  if (std::getenv("XGRAD_DEFAULT_WAIT_POLICY") == nullptr) GTEST_SKIP() << "the environment chose a wait policy";
  EXPECT_NE(xg::threads_description().find("passive wait (xgrad's default"), std::string::npos)
      << xg::threads_description();
  const xg::test::CliRun child = xg::test::run_cli(std::string(XGRAD_TOOL_DIR) + "/xg-generate", "--help");
  EXPECT_NE(child.out.find("passive wait (xgrad's default"), std::string::npos) << child.out;
}

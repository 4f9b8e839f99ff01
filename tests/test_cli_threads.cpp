// Tests for tools/cli/threads.cpp and autograd/threads.cpp: --threads in every executable, the
// library's thread count, and the one-line description of the threads and their wait policy.
#include "tools/cli/threads.hpp"

#include <gtest/gtest.h>

#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "autograd/ops.hpp"
#include "autograd/threads.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"
#include "tools/cli/flags.hpp"

namespace cli_threads_tests {

namespace {

// Restores the thread count a test changes.
struct ThreadCountGuard {
  int saved = xg::num_threads();
  ~ThreadCountGuard() { xg::set_num_threads(saved); }
};

// --help's threads line, unwrapped (help text wraps at 100 columns).
std::string threads_line(const std::string& help) {
  const std::size_t at = help.find("\nthreads: ");
  if (at == std::string::npos) return "";
  std::string line;
  for (std::size_t i = at + 1; i < help.size(); ++i) {
    if (help[i] == '\n' && (i + 1 >= help.size() || help[i + 1] != ' ')) break;
    if (help[i] == '\n') {
      while (i + 1 < help.size() && help[i + 1] == ' ') ++i;
      line += ' ';
    } else {
      line += help[i];
    }
  }
  return line;
}

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

// libgomp reads its wait policy before main; xgrad's default (a short spin, from
// libxgrad_wait_policy.so's constructor) must be in the environment by then, which depends on
// the order the libraries are initialised in. libgomp's own report (OMP_DISPLAY_ENV=verbose)
// says what it read: a spin count of 10000 (its default spins 300,000 times; LLVM's libomp,
// which the sanitizer build links, does not read GOMP_SPINCOUNT and shows its own block
// time). A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is never overridden.
TEST(CliThreads, DefaultShortSpinReachesLibgompInEveryExecutable) {
  const std::string tools = XGRAD_TOOL_DIR;
  const std::string clean =
      "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u XGRAD_DEFAULT_WAIT_POLICY -u OMP_NUM_THREADS OMP_DISPLAY_ENV=verbose ";
  for (const auto& [exe, args] : executables()) {
    SCOPED_TRACE(exe);
    const xg::test::CliRun def = xg::test::run_cli("/usr/bin/env", clean + "'" + exe + "' " + args + "--help");
    EXPECT_EQ(def.status, 0);
    EXPECT_TRUE(def.err.find("GOMP_SPINCOUNT = '10000'") != std::string::npos ||
                def.err.find("KMP_BLOCKTIME=") != std::string::npos)
        << def.err;
  }
  const std::string exe = tools + "/xg-generate";  // its --help ends with the threads line
  const xg::test::CliRun def = xg::test::run_cli("/usr/bin/env", clean + "'" + exe + "' --help");
  EXPECT_NE(threads_line(def.out).find("short spin wait (xgrad's default, GOMP_SPINCOUNT=10000; OMP_WAIT_POLICY=passive to"),
            std::string::npos)
      << threads_line(def.out);
  const xg::test::CliRun passive = xg::test::run_cli("/usr/bin/env", clean + "OMP_WAIT_POLICY=passive '" + exe + "' --help");
  EXPECT_TRUE(passive.err.find("GOMP_SPINCOUNT = '0'") != std::string::npos ||
              passive.err.find("KMP_BLOCKTIME='0'") != std::string::npos)
      << passive.err;
  EXPECT_NE(threads_line(passive.out).find(" busy), OMP_WAIT_POLICY=passive"), std::string::npos) << threads_line(passive.out);
  const xg::test::CliRun spin = xg::test::run_cli("/usr/bin/env", clean + "GOMP_SPINCOUNT=1000 '" + exe + "' --help");
  EXPECT_NE(spin.err.find("GOMP_SPINCOUNT = '1000'"), std::string::npos) << spin.err;
  EXPECT_NE(threads_line(spin.out).find(" busy), GOMP_SPINCOUNT=1000"), std::string::npos) << threads_line(spin.out);
  // A child of an xgrad program inherits GOMP_SPINCOUNT=10000 with the marker: still xgrad's
  // default. The same value without the marker is a user's setting.
  const xg::test::CliRun child =
      xg::test::run_cli("/usr/bin/env", clean + "GOMP_SPINCOUNT=10000 XGRAD_DEFAULT_WAIT_POLICY=10000 '" + exe + "' --help");
  EXPECT_NE(threads_line(child.out).find("short spin wait (xgrad's default"), std::string::npos) << threads_line(child.out);
  const xg::test::CliRun user = xg::test::run_cli("/usr/bin/env", clean + "GOMP_SPINCOUNT=10000 '" + exe + "' --help");
  EXPECT_NE(threads_line(user.out).find(" busy), GOMP_SPINCOUNT=10000"), std::string::npos) << threads_line(user.out);
}

// The thread count follows the load unless it was chosen; a chosen count says nothing more.
TEST(CliThreads, DefaultCountFollowsTheLoadAChosenOneDoesNot) {
  const std::string exe = std::string(XGRAD_TOOL_DIR) + "/xg-generate";
  const std::string clean = "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u XGRAD_DEFAULT_WAIT_POLICY -u OMP_NUM_THREADS ";
  const xg::test::CliRun def = xg::test::run_cli("/usr/bin/env", clean + "'" + exe + "' --help");
  if (xg::test::run_cli("/usr/bin/nproc", "").out != "1\n") {
    EXPECT_NE(threads_line(def.out).find(" threads (fewer while other programs keep these cores busy), short spin"),
              std::string::npos)
        << threads_line(def.out);
  }
  const xg::test::CliRun fixed = xg::test::run_cli("/usr/bin/env", clean + "OMP_NUM_THREADS=2 '" + exe + "' --help");
  EXPECT_NE(threads_line(fixed.out).find("threads: 2 threads, short spin wait"), std::string::npos)
      << threads_line(fixed.out);
}

// How many cores other programs leave: a core counts as taken above a quarter of its time.
// Two threads against a program that keeps one of two cores busy see it as half taken (the
// process gets half the shared core), one thread beside it as wholly taken: both give 1.
TEST(Threads, CountForTheOthersLoad) {
  EXPECT_EQ(xg::threads_for_load(2, 0.0), 2);
  EXPECT_EQ(xg::threads_for_load(2, 0.2), 2);   // a daemon's noise
  EXPECT_EQ(xg::threads_for_load(2, 0.5), 1);   // a busy core seen from two threads
  EXPECT_EQ(xg::threads_for_load(2, 1.0), 1);   // a busy core seen from one thread
  EXPECT_EQ(xg::threads_for_load(2, 3.0), 1);   // never below one
  EXPECT_EQ(xg::threads_for_load(8, 2.0), 6);
  EXPECT_EQ(xg::threads_for_load(8, 1.5), 6);
  EXPECT_EQ(xg::threads_for_load(1, 0.0), 1);
}

// The others' load is the machine's busy time on these CPUs less this process's own.
TEST(Threads, OthersLoadIsTheBusyTimeLessOurOwn) {
  const xg::LoadSample a{10.0, 100.0, 5.0};
  EXPECT_NEAR(xg::others_load(a, {10.5, 101.0, 5.5}), 1.0, 1e-9);   // 1 s busy, 0.5 s ours, in 0.5 s
  EXPECT_NEAR(xg::others_load(a, {11.0, 101.9, 6.9}), 0.0, 1e-9);   // all of it ours
  EXPECT_DOUBLE_EQ(xg::others_load(a, {11.0, 101.9, 7.0}), 0.0);   // tick rounding: never below 0
  EXPECT_DOUBLE_EQ(xg::others_load(a, {11.0, -1.0, 7.0}), 0.0);    // /proc/stat unreadable
  EXPECT_DOUBLE_EQ(xg::others_load(a, a), 0.0);
}

// A child that keeps a core busy shows in the load this process reads from /proc/stat (other
// tests running beside this one can only add to it).
TEST(Threads, ASpinningChildCountsAsOthersLoad) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile unsigned long x = 0;
    for (;;) x = x + 1;
  }
  usleep(50000);
  const xg::LoadSample a = xg::sample_load();
  usleep(400000);
  const xg::LoadSample b = xg::sample_load();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_GE(a.busy_s, 0) << "/proc/stat unreadable";
  EXPECT_GT(xg::others_load(a, b), 0.7);
}

// torch.set_num_threads is process-wide; OpenMP's thread count is per thread (a new thread
// starts from OMP_NUM_THREADS or the core count). A thread of the user's, started before or
// after set_num_threads, runs xgrad's loops and products on the count that was set, from its
// first op on.
TEST(Threads, SetNumThreadsReachesTheUsersOtherThreads) {
  ThreadCountGuard guard;
  int start = 0;  // what OpenMP gives a new thread, whatever this one's count is
  std::thread probe([&] { start = omp_get_max_threads(); });
  probe.join();
  const int want = start + 1;
  std::mutex m;
  std::condition_variable cv;
  bool set = false;
  int early_seen = 0, late_seen = 0, late_api = 0;
  std::thread early([&] {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return set; });
    const xg::Tensor t = xg::ones({4}) * 2.0;  // an op, as the thread's first since the change
    early_seen = omp_get_max_threads();
  });
  xg::set_num_threads(want);
  {
    std::lock_guard<std::mutex> lock(m);
    set = true;
  }
  cv.notify_one();
  early.join();
  std::thread late([&] {
    late_api = xg::num_threads();
    late_seen = omp_get_max_threads();
  });
  late.join();
  EXPECT_EQ(early_seen, want);
  EXPECT_EQ(late_api, want);
  EXPECT_EQ(late_seen, want);
}

}  // namespace cli_threads_tests

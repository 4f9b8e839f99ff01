// Test helpers for running a command-line executable as a user would: its exit status, stdout
// and stderr (captured in files named after the current test), and reading files back.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace xg::test {

struct CliRun {
  int status = -1;  // the exit status; -1 when the process did not exit normally
  std::string out, err;
};

// The whole file as a string ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The number of '\n' in s.
inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// XGRAD_BINARY_DIR/cli_<Suite>_<Test>: a path prefix of the current test's own files. CTest runs
// each test in its own process, in parallel: files named after the test are never shared.
inline std::string test_file_base() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(XGRAD_BINARY_DIR) + "/cli_" + info->test_suite_name() + "_" + info->name();
}

// Runs `'exe' args` through the shell (args as typed on a command line, quoted as needed).
inline CliRun run_cli(const std::string& exe, const std::string& args) {
  const std::string base = test_file_base();
  const std::string cmd = "'" + exe + "' " + args + " >" + base + ".out 2>" + base + ".err";
  const int st = std::system(cmd.c_str());
  CliRun r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

}  // namespace xg::test

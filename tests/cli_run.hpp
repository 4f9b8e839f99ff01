// Test helpers for running a command-line executable as a user would: its exit status, stdout
// and stderr (captured in files named after the current test), per-test scratch folders, and
// reading files back.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

// XGRAD_BINARY_DIR/dir_<Suite>_<Test>[_<sub>]: a scratch folder of the current test, emptied
// and created (named after the test, so tests running in parallel never share one).
inline std::filesystem::path fresh_test_dir(const std::string& sub = "") {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path d = std::filesystem::path(XGRAD_BINARY_DIR) /
                            (std::string("dir_") + info->test_suite_name() + "_" + info->name() + (sub.empty() ? "" : "_" + sub));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
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

// Starts `command` through /bin/sh, waits (polling every 2 ms, up to timeout_ms) until `file`
// exists, then SIGKILLs the process, as a crash would. Returns true when it was killed by
// that signal after the file appeared (false: the file never appeared, or the process had
// already exited).
inline bool kill_when_file_appears(const std::string& command, const std::string& file, int timeout_ms = 10000) {
  const std::string cmd = "exec " + command;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  bool appeared = false;
  for (int waited = 0; waited < timeout_ms && !appeared; waited += 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    appeared = std::filesystem::exists(file);
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return appeared && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// The records of one kind of a log.jsonl, parsed.
inline std::vector<nlohmann::json> log_records(const std::filesystem::path& log, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == kind) out.push_back(j);
  }
  return out;
}

}  // namespace xg::test

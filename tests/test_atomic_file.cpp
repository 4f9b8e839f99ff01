// io/atomic_file.cpp: a failed write leaves the previous file whole and no temporary behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/atomic_file.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(AtomicFile, WritesAndReplaces) {
  const fs::path d = xg::test::fresh_test_dir("replace");
  xg::io::write_file_atomic((d / "a.txt").string(), std::string("first"), "test");
  EXPECT_EQ(slurp(d / "a.txt"), "first");
  xg::io::write_file_atomic((d / "a.txt").string(), std::string("second, longer"), "test");
  EXPECT_EQ(slurp(d / "a.txt"), "second, longer");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
}

TEST(AtomicFile, FailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  const fs::path d = xg::test::fresh_test_dir("fail");
  const std::string path = (d / "ckpt.bin").string();
  xg::io::write_file_atomic(path, std::string("old checkpoint"), "test");
  EXPECT_THROW(xg::io::write_file_atomic(
                   path,
                   [](std::ostream& f) {
                     f << "half of a new checkpoint";
                     throw xg::Error("interrupted");
                   },
                   "test"),
               xg::Error);
  EXPECT_EQ(slurp(path), "old checkpoint");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
}

TEST(AtomicFile, MissingFolderNamesWhoAndTheFile) {
  EXPECT_XG_ERROR(xg::io::write_file_atomic("/nonexistent-dir/x.json", std::string("{}"), "save_config"),
                  "save_config: cannot open /nonexistent-dir/x.json.tmp.");
}

// A writer killed mid-write leaves <name>.tmp.<pid>; the next start removes it (a folder too),
// but never a live process's, which is still being written.
TEST(AtomicFile, StaleTemporariesOfDeadProcessesAreRemoved) {
  const fs::path d = xg::test::fresh_test_dir("stale");
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string suffix = ".tmp." + std::to_string(dead);
  std::ofstream(d / ("model.safetensors" + suffix)) << "half";
  fs::create_directories(d / ("merged" + suffix));
  std::ofstream(d / ("merged" + suffix) / "config.json") << "{}";
  std::ofstream(d / ("args.json.tmp." + std::to_string(::getpid()))) << "live";
  std::ofstream(d / "notes.tmp.txt") << "not ours";
  std::ofstream(d / "model.safetensors") << "whole";
  std::vector<std::string> removed = xg::io::remove_stale_temporaries(d.string());
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{(d / ("merged" + suffix)).string(), (d / ("model.safetensors" + suffix)).string()}));
  EXPECT_TRUE(fs::exists(d / ("args.json.tmp." + std::to_string(::getpid()))));
  EXPECT_TRUE(fs::exists(d / "notes.tmp.txt"));
  EXPECT_TRUE(fs::exists(d / "model.safetensors"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 3);
}

namespace atomic_file_stale {

// A child that has exited but is not reaped yet: a zombie, as a `kill -9`ed run is until its
// parent waits for it. kill(pid, 0) still succeeds on it.
pid_t zombie() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  for (int i = 0; i < 500; ++i) {  // until it has exited (its /proc state turns Z)
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    if (line.find(") Z") != std::string::npos) break;
    usleep(2000);
  }
  return pid;
}

// A process started after now (a live child sleeping) while `file` says it was last written an
// hour ago: the pid of a dead writer, reused. Returns the child's pid (kill and reap it after).
pid_t reused_pid_of(const fs::path& dir, const std::string& name) {
  const pid_t pid = fork();
  if (pid == 0) {
    ::pause();
    _exit(0);
  }
  const fs::path file = dir / (name + std::to_string(pid));
  std::ofstream(file) << "half";
  fs::last_write_time(file, fs::last_write_time(file) - std::chrono::hours(1));
  return pid;
}

// A zombie's temporaries are stale, and so is the temporary of a pid that a process started
// after the file was written now has; save_adapter's `.staged.<pid>` too. A live writer's stays.
TEST(AtomicFile, TemporariesOfZombiesAndReusedPidsAreStale) {
  const fs::path d = xg::test::fresh_test_dir("zombie");
  const pid_t z = zombie();
  std::ofstream(d / ("checkpoint.safetensors.tmp." + std::to_string(z))) << "half";
  std::ofstream(d / ("adapter_model.safetensors.staged." + std::to_string(z))) << "half";
  const pid_t reused = reused_pid_of(d, "log.jsonl.tmp.");
  std::ofstream(d / "summary.json.tmp.1") << "pid 1 started before it: maybe its writer";
  EXPECT_EQ(xg::io::remove_stale_temporaries(d.string()).size(), 3u);
  EXPECT_TRUE(fs::exists(d / "summary.json.tmp.1"));
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
  kill(reused, SIGKILL);
  waitpid(reused, nullptr, 0);
  waitpid(z, nullptr, 0);
}

// Writing a file removes its own temporaries of dead writers, so a run that is never resumed
// does not keep them either; another file's, or a live process's, stay.
TEST(AtomicFile, AWriteRemovesItsOwnStaleTemporaries) {
  const fs::path d = xg::test::fresh_test_dir("siblings");
  const pid_t z = zombie();
  const std::string dead = ".tmp." + std::to_string(z);
  std::ofstream(d / ("ckpt.bin" + dead)) << "half";
  std::ofstream(d / ("other.bin" + dead)) << "half";
  std::ofstream(d / "ckpt.bin.tmp.1") << "pid 1 lives";
  xg::io::write_file_atomic((d / "ckpt.bin").string(), std::string("whole"), "test");
  EXPECT_FALSE(fs::exists(d / ("ckpt.bin" + dead)));
  EXPECT_TRUE(fs::exists(d / ("other.bin" + dead)));
  EXPECT_TRUE(fs::exists(d / "ckpt.bin.tmp.1"));
  waitpid(z, nullptr, 0);
}

}  // namespace atomic_file_stale

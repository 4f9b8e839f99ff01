// io/atomic_file.cpp: a failed write leaves the previous file whole and no temporary behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

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

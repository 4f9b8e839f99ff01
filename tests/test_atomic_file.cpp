// autograd/atomic_file.cpp: a failed write leaves the previous file whole and no temporary behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/atomic_file.hpp"
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
  xg::write_file_atomic((d / "a.txt").string(), std::string("first"), "test");
  EXPECT_EQ(slurp(d / "a.txt"), "first");
  xg::write_file_atomic((d / "a.txt").string(), std::string("second, longer"), "test");
  EXPECT_EQ(slurp(d / "a.txt"), "second, longer");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
}

TEST(AtomicFile, FailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  const fs::path d = xg::test::fresh_test_dir("fail");
  const std::string path = (d / "ckpt.bin").string();
  xg::write_file_atomic(path, std::string("old checkpoint"), "test");
  EXPECT_THROW(xg::write_file_atomic(
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
  EXPECT_XG_ERROR(xg::write_file_atomic("/nonexistent-dir/x.json", std::string("{}"), "save_config"),
                  "save_config: cannot open /nonexistent-dir/x.json.tmp.");
}

// finetune/run_log.cpp on a full disk: log.jsonl lines are written whole or not at all, the
// run's error names the file and the disk, and a reader skips a torn last line with a warning.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "autograd/error.hpp"
#include "finetune/run_log.hpp"
#include "tests/cli_run.hpp"

namespace run_log_full_disk {

namespace fs = std::filesystem;

// Status of a child that appends records to `path` under a file size limit of `limit` bytes
// (a full disk, without root: writes past the limit fail with EFBIG, one crossing it is cut
// short): 0 when the RunLog threw an xg::Error naming the file and the disk, else 1.
int fill_log(const std::string& path, rlim_t limit) {
  const pid_t pid = fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      xg::finetune::RunLog log("xg-test", path, 1000, 0);
      for (int64_t step = 1; step <= 1000; ++step) log.train_step(step, {{"loss", 2.0 / static_cast<double>(step)}}, 1e3, 0);
    } catch (const xg::Error& e) {
      const std::string want = "xg-test: writing " + path + " failed (File too large: the disk holding " +
                               fs::path(path).parent_path().string() + " is full); stopped at step ";
      _exit(std::string(e.what()).rfind(want, 0) == 0 ? 0 : 1);
    }
    _exit(1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(RunLog, AFullDiskLeavesOnlyWholeLines) {
  const fs::path d = xg::test::fresh_test_dir("full");
  const std::string path = (d / "log.jsonl").string();
  EXPECT_EQ(fill_log(path, 1000), 0);
  const std::string text = xg::test::slurp(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "a line was cut: " << text.substr(text.rfind('\n', text.size() - 2));
  EXPECT_EQ(xg::finetune::read_run_log(path).size(), static_cast<std::size_t>(xg::test::count_lines(text)));
}

// A log a killed run left with a torn last line: a reader skips it with a warning, and the next
// run's RunLog cuts it off before appending (else it would glue itself to the next line).
TEST(RunLog, ATornLastLineIsSkippedByReadersAndCutOffByTheNextRun) {
  const fs::path d = xg::test::fresh_test_dir("torn");
  const std::string path = (d / "log.jsonl").string();
  std::ofstream(path) << "{\"kind\":\"train\",\"step\":1}\n{\"kind\":\"train\",\"step\":2,\"grad_norm\":0.86,\"kind\":\"tr";
  testing::internal::CaptureStderr();
  EXPECT_EQ(xg::finetune::read_run_log(path).size(), 1u);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(path + ":2: skipped a torn last line of "), std::string::npos);
  {
    testing::internal::CaptureStderr();
    xg::finetune::RunLog log("xg-test", path, 10, 0);
    log.event("resume", 1, {});
    EXPECT_NE(testing::internal::GetCapturedStderr().find("removed a torn last line of 52 bytes"), std::string::npos);
  }
  const auto records = xg::finetune::read_run_log(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1]["kind"], "resume");
  std::ofstream(path, std::ios::app) << "{not json}\n{\"kind\":\"eval\"}\n";
  EXPECT_THROW(xg::finetune::read_run_log(path), xg::Error);
}

}  // namespace run_log_full_disk

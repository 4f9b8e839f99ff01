// tools/xg_data.cpp, run as a user would: bad flags are one line with status 2, and
// a failed run (packages missing or corrupt) writes nothing into --out.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli_run.hpp"

namespace fs = std::filesystem;
using xg::test::count_lines;
using xg::test::run_cli;

namespace {

const std::string kXgData = std::string(XGRAD_TOOL_DIR) + "/xg-data";

}  // namespace

TEST(XgData, BadFlagsAreOneLineAndStatus2) {
  for (const std::string args : {"--bogus", "--pkgs /nonexistent-xgrad --out x", "--pkgs . --out x --heldout-fraction 2",
                                 "--pkgs . --out x --heldout-novel ulysses"}) {
    xg::test::CliRun r = run_cli(kXgData, args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("xg-data: ", 0), 0u) << r.err;
  }
}

TEST(XgData, MissingPackagesFailAndWriteNothing) {
  const fs::path d = xg::test::fresh_test_dir("missing");
  fs::create_directories(d / "pkgs" / "usr" / "share");  // extracted, but without the packages
  xg::test::CliRun r = run_cli(kXgData, "--pkgs " + (d / "pkgs").string() + " --out " + (d / "out").string());
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find((d / "pkgs").string()), std::string::npos) << r.err;
  EXPECT_TRUE(!fs::exists(d / "out") || fs::is_empty(d / "out"));
}

// tools/cli/output.cpp: the executables' output folder and files, printf formatting, the git revision
// and the experiments' JSON header, the run's settings, and the "no plot" note said once.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "cli_run.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/settings.hpp"
#include "autograd/threads.hpp"
#include "tools/cli/output.hpp"

namespace cli = xg::cli;

TEST(CliOutput, FilesAndFormatting) {
  const std::string dir = xg::test::test_file_base() + "/a/b";
  cli::make_dir(dir);
  cli::make_dir(dir);  // already there: fine
  cli::write_text(dir + "/t.txt", "one\ntwo\n");
  EXPECT_EQ(xg::test::slurp(dir + "/t.txt"), "one\ntwo\n");
  cli::write_text(dir + "/t.txt", "three\n");
  EXPECT_EQ(xg::test::slurp(dir + "/t.txt"), "three\n");
  try {
    cli::write_text("/nonexistent/folder/t.txt", "x");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "cannot write /nonexistent/folder/t.txt");
  }
  EXPECT_EQ(cli::fmt("%.3g", 3.14159), "3.14");
  EXPECT_EQ(cli::fmt("%.9g", 0.1), "0.1");
}

TEST(CliOutput, ExperimentHeader) {
  const nlohmann::json flags = {{"layers", 3}, {"sweep", ""}};
  const nlohmann::json j = cli::experiment_json("prog", "part 1", 7, flags);
  EXPECT_EQ(j["experiment"], "prog part 1");
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["flags"], flags);
  EXPECT_EQ(j["git_revision"], cli::git_revision());
  EXPECT_GT(std::strlen(cli::git_revision()), 0u);
  EXPECT_EQ(j["gemm"], xg::gemm_backend_description());  // which library and kernels ran the products
  EXPECT_EQ(j["settings"], cli::settings_json());          // and under which settings
  EXPECT_EQ(j.size(), 6u) << j.dump();
}

TEST(CliOutput, SettingsAreEveryVariableAndWhatTheyResolvedTo) {
  xg::Settings s = xg::settings();
  s.gemm = "onednn";
  s.memory_limit = "1e9";
  xg::SettingsGuard guard(s);
  const nlohmann::json j = cli::settings_json();
  EXPECT_EQ(j.size(), s.table().size() + 3) << j.dump();
  for (const auto& [name, value] : s.table()) EXPECT_EQ(j.at(name), value) << name;
  EXPECT_EQ(j["XGRAD_GEMM"], "onednn");
  EXPECT_EQ(j["XGRAD_MEMORY_LIMIT"], "1e9");
  EXPECT_EQ(j["gemm backend"], xg::gemm_backend_description());
  EXPECT_EQ(j["thread policy"], xg::threads_description());
  EXPECT_EQ(j["own kernels"], xg::build_kernels_description());
}

TEST(CliOutput, ReportPlotSaysNoPlotOnce) {
  bool warned = false;
  ::testing::internal::CaptureStdout();
  cli::report_plot("out", "a", true, "", warned);
  cli::report_plot("out", "b", false, "gnuplot not found", warned);
  cli::report_plot("out", "c", false, "gnuplot not found", warned);
  cli::report_plot("out", "d", true, "", warned);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "wrote out/a.png and .svg\nno plot: gnuplot not found\nwrote out/d.png and .svg\n");
  EXPECT_TRUE(warned);
}

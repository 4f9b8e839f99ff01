// experiments/cli_util.cpp: the experiment executables' shared flag parsing (one-line usage
// errors naming the flag), output folder and files, flags as JSON and the JSON header.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <limits>
#include <string>

#include "cli_run.hpp"
#include "experiments/cli_util.hpp"

namespace cli = xg::experiments::cli;
namespace po = boost::program_options;

namespace {

// The message of the UsageError that f throws ("" when it throws none).
template <typename F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const cli::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ExperimentsCliUtil, ParseDoubles) {
  EXPECT_EQ(cli::parse_doubles("x", "1,-2.5,3e2", false, true), (std::vector<double>{1, -2.5, 300}));
  EXPECT_EQ(usage_error([] { cli::parse_doubles("lrs", "0.1,0", true, true); }),
            "--lrs: expected a comma-separated list of positive numbers, got '0.1,0'");
  EXPECT_EQ(usage_error([] { cli::parse_doubles("x", "1,2x", false, true); }),
            "--x: expected a comma-separated list of numbers, got '1,2x'");
  EXPECT_EQ(usage_error([] { cli::parse_doubles("x", "1,,2", false, true); }),
            "--x: expected a comma-separated list of numbers, got '1,,2'");
  EXPECT_EQ(usage_error([] { cli::parse_doubles("x", "", false, true); }), "--x: expected at least one value");
  // finite: inf is rejected only when asked; NaN is never positive.
  EXPECT_EQ(usage_error([] { cli::parse_doubles("x", "1,inf", false, true); }),
            "--x: expected a comma-separated list of numbers, got '1,inf'");
  EXPECT_EQ(cli::parse_doubles("x", "inf", true, false),
            (std::vector<double>{std::numeric_limits<double>::infinity()}));
  EXPECT_EQ(usage_error([] { cli::parse_doubles("x", "nan", true, false); }),
            "--x: expected a comma-separated list of positive numbers, got 'nan'");
}

TEST(ExperimentsCliUtil, ParseInts) {
  EXPECT_EQ(cli::parse_ints("t", "0,2,10", 0), (std::vector<int64_t>{0, 2, 10}));
  EXPECT_EQ(usage_error([] { cli::parse_ints("shifts", "1,x", 1); }),
            "--shifts: expected a comma-separated list of integers >= 1, got '1,x'");
  EXPECT_EQ(usage_error([] { cli::parse_ints("t", "-1", 0); }),
            "--t: expected a comma-separated list of integers >= 0, got '-1'");
  EXPECT_EQ(usage_error([] { cli::parse_ints("depths", "4,1e3", 1, "positive integers"); }),
            "--depths: expected a comma-separated list of positive integers, got '4,1e3'");
  EXPECT_EQ(usage_error([] { cli::parse_ints("depths", ",", 1); }),
            "--depths: expected a comma-separated list of integers >= 1, got ','");
  EXPECT_EQ(usage_error([] { cli::parse_ints("depths", "", 1); }), "--depths: expected at least one value");
}

TEST(ExperimentsCliUtil, FilesAndFormatting) {
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

TEST(ExperimentsCliUtil, FlagsAndHeaderAsJson) {
  int64_t layers = 0;
  uint64_t seed = 0;
  double scale = 0;
  std::string norm;
  bool quick = false;
  po::options_description opts;
  opts.add_options()("layers", po::value<int64_t>(&layers)->default_value(8), "")(
      "seed", po::value<uint64_t>(&seed)->default_value(42), "")("scale", po::value<double>(&scale), "")(
      "norm", po::value<std::string>(&norm)->default_value("layernorm"), "")("quick", po::bool_switch(&quick), "")(
      "sweep", "");
  const char* argv[] = {"prog", "--layers", "3", "--scale", "0.5", "--sweep"};
  po::variables_map vm;
  po::store(po::parse_command_line(6, argv, opts), vm);
  po::notify(vm);
  // A switch without a value (--sweep) is an empty string to program_options.
  const nlohmann::json flags = cli::flags_json(vm);
  EXPECT_EQ(flags, (nlohmann::json{{"layers", 3}, {"seed", 42}, {"scale", 0.5}, {"norm", "layernorm"},
                                   {"quick", false}, {"sweep", ""}}))
      << flags.dump();
  const nlohmann::json j = cli::experiment_json("prog", "part 1", 7, flags);
  EXPECT_EQ(j["experiment"], "prog part 1");
  EXPECT_EQ(j["seed"], 7);
  EXPECT_EQ(j["flags"], flags);
  EXPECT_TRUE(j["git_revision"].is_string());
  EXPECT_FALSE(j["git_revision"].get<std::string>().empty());
}

TEST(ExperimentsCliUtil, ReportPlotSaysNoPlotOnce) {
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

// tools/cli/flags.cpp: the executables' flag parsing: one-line usage errors naming the flag (negative
// unsigned values, unknown choices, bad lists), --help, and the flags recorded as JSON.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tools/cli/flags.hpp"

namespace cli = xg::cli;
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

TEST(CliFlags, StoreCheckedRejectsNegativeUnsignedValues) {
  uint64_t seed = 0;
  int64_t steps = 0;
  po::options_description opts;
  opts.add_options()("seed", po::value(&seed), "")("steps", po::value(&steps), "");
  {
    const char* argv[] = {"prog", "--seed", "-1"};
    po::variables_map vm;
    EXPECT_EQ(usage_error([&] { cli::store_checked(po::parse_command_line(3, argv, opts), vm); }),
              "--seed: expected an integer >= 0, got '-1'");
  }
  {
    const char* argv[] = {"prog", "--seed", "7", "--steps", "-3"};  // a signed flag may be negative
    po::variables_map vm;
    cli::store_checked(po::parse_command_line(5, argv, opts), vm);
    po::notify(vm);
    EXPECT_EQ(seed, 7u);
    EXPECT_EQ(steps, -3);
  }
}

TEST(CliFlags, StoreCheckedRejectsNonFiniteNumbers) {
  double lr = 1, epochs = 0;
  po::options_description opts;
  opts.add_options()("lr", po::value(&lr), "")("epochs", po::value(&epochs), "");
  for (const char* bad : {"nan", "inf", "-inf", "NaN"}) {
    const char* argv[] = {"prog", "--lr", "0.5", "--epochs", bad};
    po::variables_map vm;
    const std::string message = usage_error([&] { cli::store_checked(po::parse_command_line(5, argv, opts), vm); });
    EXPECT_EQ(message, std::string("--epochs: expected a finite number, got '") + bad + "'");
  }
  const char* argv[] = {"prog", "--lr", "1e30"};  // large but finite: for the flag's own check
  po::variables_map vm;
  cli::store_checked(po::parse_command_line(3, argv, opts), vm);
  po::notify(vm);
  EXPECT_EQ(lr, 1e30);
}

TEST(CliFlags, ParsePrintsHelpOrNotifies) {
  int64_t n = 1;
  po::options_description opts("prog options");
  opts.add_options()("help", "show this help")("n", po::value(&n)->default_value(n), "a number");
  {
    char a0[] = "prog", a1[] = "--n", a2[] = "5";
    char* argv[] = {a0, a1, a2};
    po::variables_map vm;
    ::testing::internal::CaptureStdout();
    EXPECT_FALSE(cli::parse(3, argv, opts, vm, "usage: prog [--n N]"));
    EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
    EXPECT_EQ(n, 5);
  }
  {
    char a0[] = "prog", a1[] = "--help";
    char* argv[] = {a0, a1};
    po::variables_map vm;
    ::testing::internal::CaptureStdout();
    EXPECT_TRUE(cli::parse(2, argv, opts, vm, "usage: prog [--n N]"));
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(out.rfind("usage: prog [--n N]\n\nprog options:\n", 0), 0u) << out;
    EXPECT_NE(out.find("--n arg (=1)"), std::string::npos) << out;
  }
  {
    char a0[] = "prog", a1[] = "--m";
    char* argv[] = {a0, a1};
    po::variables_map vm;
    EXPECT_THROW(cli::parse(2, argv, opts, vm, ""), po::unknown_option);
  }
}

TEST(CliFlags, ChoiceAndRequire) {
  const std::map<std::string, int> kinds = {{"rmsnorm", 0}, {"layernorm", 1}};
  EXPECT_EQ(cli::choice("norm", "layernorm", kinds), 1);
  EXPECT_EQ(usage_error([&] { cli::choice("norm", "batchnorm", kinds); }),
            "--norm: expected one of layernorm, rmsnorm, got 'batchnorm'");
  EXPECT_EQ(usage_error([] { cli::require(true, "unused"); }), "");
  EXPECT_EQ(usage_error([] { cli::require(false, "--steps must be positive"); }), "--steps must be positive");
}

TEST(CliFlags, ParseDoubles) {
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

TEST(CliFlags, ParseInts) {
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

TEST(CliFlags, FlagsAsJson) {
  int64_t layers = 0;
  uint64_t seed = 0;
  double scale = 0;
  std::string norm;
  bool quick = false;
  po::options_description opts;
  opts.add_options()("layers", po::value<int64_t>(&layers)->default_value(8), "")(
      "seed", po::value<uint64_t>(&seed)->default_value(42), "")("scale", po::value<double>(&scale), "")(
      "norm", po::value<std::string>(&norm)->default_value("layernorm"), "")("quick", po::bool_switch(&quick), "")(
      "sweep", "")("count", po::value<int>(), "");
  const char* argv[] = {"prog", "--layers", "3", "--scale", "0.5", "--sweep", "--count", "2"};
  po::variables_map vm;
  po::store(po::parse_command_line(8, argv, opts), vm);
  po::notify(vm);
  // A switch without a value (--sweep) is an empty string to program_options; a type flags_json
  // does not know (int) is recorded as true.
  const nlohmann::json flags = cli::flags_json(vm);
  EXPECT_EQ(flags, (nlohmann::json{{"layers", 3}, {"seed", 42}, {"scale", 0.5}, {"norm", "layernorm"},
                                   {"quick", false}, {"sweep", ""}, {"count", true}}))
      << flags.dump();
  // No flags: an empty object, not null.
  EXPECT_EQ(cli::flags_json(po::variables_map{}), nlohmann::json::object());
}

// tools/cli/run_main.cpp: an executable's exceptions as one line on stderr and its exit status (2 for a
// usage error, with "(see --help)"; 1 for any other failure; 0 after --help, body not run).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "tools/cli/flags.hpp"
#include "tools/cli/run_main.hpp"

namespace cli = xg::cli;

namespace {

struct Outcome {
  int status;
  std::string err;
  bool ran;  // whether the body ran
};

// run_main("prog", parse_flags, body) with its stderr captured.
template <typename Parse, typename Body>
Outcome run(Parse parse_flags, Body body) {
  bool ran = false;
  ::testing::internal::CaptureStderr();
  const int status = cli::run_main("prog", parse_flags, [&] {
    ran = true;
    return body();
  });
  return {status, ::testing::internal::GetCapturedStderr(), ran};
}

}  // namespace

TEST(CliRunMain, StatusOfEachOutcome) {
  const auto parsed = [] { return -1; };
  Outcome o = run(parsed, [] { return 0; });
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.err, "");
  EXPECT_TRUE(o.ran);

  o = run(parsed, [] { return 3; });  // the body's own status
  EXPECT_EQ(o.status, 3);

  o = run([] { return 0; }, [] { return 1; });  // --help: the body does not run
  EXPECT_EQ(o.status, 0);
  EXPECT_FALSE(o.ran);
}

TEST(CliRunMain, ErrorsWhileParsingAreUsageErrors) {
  Outcome o = run([]() -> int { throw std::invalid_argument("unrecognised option '--x'"); }, [] { return 0; });
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "prog: unrecognised option '--x' (see --help)\n");
  EXPECT_FALSE(o.ran);

  o = run([]() -> int { throw cli::UsageError("--steps must be positive"); }, [] { return 0; });
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "prog: --steps must be positive (see --help)\n");
}

TEST(CliRunMain, ErrorsWhileRunning) {
  const auto parsed = [] { return -1; };
  Outcome o = run(parsed, []() -> int { throw cli::UsageError("--adapter: no such folder"); });
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "prog: --adapter: no such folder (see --help)\n");

  o = run(parsed, []() -> int { throw std::runtime_error("cannot read data.txt"); });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "prog: cannot read data.txt\n");

  // A message that already names the program (the training loop's) is not prefixed twice.
  o = run(parsed, []() -> int { throw std::runtime_error("prog: step 3: loss is NaN"); });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "prog: step 3: loss is NaN\n");
}

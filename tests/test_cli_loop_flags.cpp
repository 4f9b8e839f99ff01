// tools/cli/loop_flags.cpp: the trainers' training-loop flags bound to finetune::LoopOptions (defaults
// from its values, parsed values written back) and its validation as a usage error.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <sstream>
#include <string>

#include "tools/cli/flags.hpp"
#include "tools/cli/loop_flags.hpp"

namespace cli = xg::cli;
namespace po = boost::program_options;

TEST(CliLoopFlags, BindsLoopOptions) {
  xg::finetune::LoopOptions o;
  o.lr = 2e-3;  // a trainer's own default, shown by --help
  const po::options_description opts = cli::loop_flags(o, "seed of everything");
  std::ostringstream help;
  help << opts;
  EXPECT_NE(help.str().find("--lr arg (=0.002)"), std::string::npos) << help.str();
  EXPECT_NE(help.str().find("seed of everything"), std::string::npos) << help.str();

  const char* argv[] = {"prog", "--steps", "20", "--warmup", "5", "--schedule", "linear", "--seed", "9", "--resume"};
  po::variables_map vm;
  cli::store_checked(po::parse_command_line(10, argv, opts), vm);
  po::notify(vm);
  EXPECT_EQ(o.steps, 20);
  EXPECT_EQ(o.warmup, 5);
  EXPECT_EQ(o.schedule, xg::finetune::LrSchedule::Linear);
  EXPECT_EQ(cli::flags_json(vm)["schedule"], "linear");  // args.json keeps the spelling
  EXPECT_EQ(o.seed, 9u);
  EXPECT_TRUE(o.resume);
  EXPECT_FALSE(o.detect_anomaly);
  EXPECT_FALSE(o.gradient_checkpointing);
  EXPECT_EQ(o.lr, 2e-3);
  EXPECT_NO_THROW(cli::validate_loop(o, "prog"));

  const char* argv2[] = {"prog", "--gradient-checkpointing"};
  po::variables_map vm2;
  cli::store_checked(po::parse_command_line(2, argv2, opts), vm2);
  po::notify(vm2);
  EXPECT_TRUE(o.gradient_checkpointing);
  EXPECT_EQ(cli::flags_json(vm2)["gradient-checkpointing"], true);  // as args.json records it
}

TEST(CliLoopFlags, InvalidOptionsAreUsageErrors) {
  xg::finetune::LoopOptions o;
  o.steps = 10;
  o.warmup = 20;
  try {
    cli::validate_loop(o, "prog");
    ADD_FAILURE() << "no error";
  } catch (const cli::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "prog: --warmup 20 is longer than the run (--steps 10)");
  }
}

TEST(CliLoopFlags, EnumsParseByNameAndRefuseOthers) {
  xg::finetune::LoopOptions o;
  const po::options_description opts = cli::loop_flags(o, "seed");
  const char* argv[] = {"prog", "--on-nan", "skip", "--schedule", "constant"};
  po::variables_map vm;
  cli::store_checked(po::parse_command_line(5, argv, opts), vm);
  po::notify(vm);
  EXPECT_EQ(o.on_nan, xg::finetune::NanPolicy::Skip);
  EXPECT_EQ(o.schedule, xg::finetune::LrSchedule::Constant);
  const char* bad[] = {"prog", "--schedule", "exponential"};
  po::variables_map vm2;
  cli::store_checked(po::parse_command_line(3, bad, opts), vm2);
  try {
    po::notify(vm2);
    ADD_FAILURE() << "no error";
  } catch (const cli::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--schedule: expected constant, cosine or linear, got 'exponential'");
  }
  EXPECT_EQ(cli::schedule_name(cli::parse_schedule("cosine")), "cosine");
  EXPECT_EQ(cli::nan_policy_name(cli::parse_nan_policy("stop")), "stop");
}

// The library's option names become the flags in the command line's messages.
TEST(CliLoopFlags, LibraryMessagesNameTheFlags) {
  EXPECT_EQ(cli::loop_error_for_flags("TrainLoop: min_lr_ratio must be in [0, 1], got 2", "xg-train"),
            "xg-train: --min-lr-ratio must be in [0, 1], got 2");
  EXPECT_EQ(cli::loop_error_for_flags("TrainLoop: lr must be positive, got 0", "p"), "p: --lr must be positive, got 0");
  xg::finetune::LoopOptions o;
  o.steps = 0;
  try {
    cli::validate_loop(o, "xg-train");
    ADD_FAILURE() << "no error";
  } catch (const cli::UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "xg-train: --steps must be positive, got 0");
  }
}

// The default warmup is "auto" in --help, and -1 (kAutoWarmup) in the options.
TEST(CliLoopFlags, AutoWarmupShowsAsAuto) {
  xg::finetune::LoopOptions o;
  o.warmup = xg::finetune::kAutoWarmup;
  const po::options_description opts = cli::loop_flags(o, "seed");
  const std::string help = cli::help_text(opts);
  EXPECT_NE(help.find("--warmup arg (=auto)"), std::string::npos) << help;
  EXPECT_NE(help.find("auto: min(100, steps / 10)"), std::string::npos) << help;
}

TEST(CliLoopFlags, AdamBetasParseAsAPairInRange) {
  xg::finetune::LoopOptions o;
  const po::options_description opts = cli::loop_flags(o, "seed");
  std::ostringstream help;
  help << opts;
  EXPECT_NE(help.str().find("--adam-betas arg (=0.9,0.95)"), std::string::npos) << help.str();
  const char* argv[] = {"prog", "--adam-betas", "0.8,0.999"};
  po::variables_map vm;
  cli::store_checked(po::parse_command_line(3, argv, opts), vm);
  po::notify(vm);
  EXPECT_EQ(o.beta1, 0.8);
  EXPECT_EQ(o.beta2, 0.999);
  for (const char* bad : {"0.9", "0.9,1", "-0.1,0.9", "0.9,0.99,0.9", "a,b", ""}) {
    try {
      cli::parse_betas(bad);
      ADD_FAILURE() << bad << ": no error";
    } catch (const cli::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--adam-betas: expected BETA1,BETA2 with each in [0, 1), got '") + bad + "'");
    }
  }
  o.beta2 = 1.0;
  EXPECT_THROW(cli::validate_loop(o, "prog"), cli::UsageError);
}

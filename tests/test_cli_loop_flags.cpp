// cli/loop_flags.cpp: the trainers' training-loop flags bound to finetune::LoopOptions (defaults
// from its values, parsed values written back) and its validation as a usage error.
#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <sstream>
#include <string>

#include "cli/flags.hpp"
#include "cli/loop_flags.hpp"

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
  EXPECT_EQ(o.schedule, "linear");
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

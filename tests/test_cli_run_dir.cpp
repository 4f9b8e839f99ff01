// tools/cli/run_dir.cpp: a run folder is owned by one run (the lock), never reused silently, never a
// model folder the run reads (nor a sibling mistaken for one), and a resume keeps its flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "autograd/error.hpp"
#include "tests/cli_run.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/run_dir.hpp"

namespace cli = xg::cli;
namespace fs = std::filesystem;

namespace {

// The message of what f throws ("" when nothing).
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CliRunDir, OutIsNeverAnInputNorInsideOne) {
  const fs::path d = xg::test::fresh_test_dir();
  fs::create_directories(d / "base");
  const std::vector<std::pair<std::string, std::string>> inputs{{"base", (d / "base").string()}, {"eval-data", ""}};
  const cli::RunDirOptions o;
  EXPECT_EQ(error_of([&] { cli::RunDir("p", (d / "base" / ".").string(), false, o, inputs); }),
            "--out " + (d / "base" / ".").string() + " is --base " + (d / "base").string() +
                ": a run never writes where its inputs are");
  EXPECT_NE(error_of([&] { cli::RunDir("p", (d / "base" / "x" / "y").string(), false, o, inputs); }).find(" is inside --base "),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d / "base" / "x"));
  // A sibling whose name starts with the base's is neither.
  cli::RunDir sibling("p", (d / "base2").string(), false, o, inputs);
  EXPECT_TRUE(fs::exists(d / "base2" / ".lock"));
}

TEST(CliRunDir, OneRunAtATimeAndNoSilentReuse) {
  const fs::path d = xg::test::fresh_test_dir();
  const std::string out = (d / "run").string();
  cli::RunDirOptions o;
  auto first = std::make_unique<cli::RunDir>("p", out, false, o);
  first->record_args({{"flags", {{"lr", 0.1}}}});
  // Another open of the lock (another run, or this process again) cannot take it.
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, true, o); }),
            "p: --out " + out + " is in use by another run (process " + std::to_string(::getpid()) + " holds " + out +
                "/.lock)");
  first.reset();  // the run ends
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, false, o); }),
            "--out " + out + " already holds a run (args.json): --resume continues it, --overwrite replaces it");
  o.overwrite = true;
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, true, o); }),
            "--resume continues the run in --out, --overwrite replaces it: give one");
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, false, o); }), "");
  EXPECT_FALSE(fs::exists(out + "/args.json"));
}

TEST(CliRunDir, AResumeKeepsItsFlags) {
  const fs::path d = xg::test::fresh_test_dir();
  const std::string out = (d / "run").string();
  cli::RunDirOptions o;
  cli::RunDir("p", out, false, o).record_args({{"flags", {{"lr", 0.1}, {"steps", 10}, {"threads", 2}}}});
  const std::string args = xg::test::slurp(out + "/args.json");
  // --threads changes nothing that is computed: free. --lr is refused, and args.json kept.
  EXPECT_EQ(error_of([&] {
              cli::RunDir("p", out, true, o).record_args({{"flags", {{"lr", 0.2}, {"steps", 10}, {"threads", 1}}}});
            }),
            "--resume: --lr was 0.1 in " + out + "/args.json, now 0.2 (a resumed run keeps its settings; --allow-change lr "
            "accepts the change)");
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, true, o).record_args({{"flags", {{"lr", 0.1}, {"threads", 1}}}}); }),
            "--resume: --steps was 10 in " + out + "/args.json, now not given (a resumed run keeps its settings; "
            "--allow-change steps accepts the change)");
  EXPECT_EQ(xg::test::slurp(out + "/args.json"), args);
  o.allow_change = "--steps,lr";
  cli::RunDir("p", out, true, o).record_args({{"flags", {{"lr", 0.2}, {"steps", 20}, {"threads", 1}}}});
  EXPECT_NE(xg::test::slurp(out + "/args.json").find("20"), std::string::npos);
  o.allow_change = "stepz";
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, true, o).record_args({{"flags", {{"lr", 0.2}, {"steps", 20}}}}); }),
            "--allow-change: 'stepz' is not a flag of p");
}

// A flag's value need not be UTF-8 (found by fuzz_flags: nlohmann::json's dump threw): args.json
// gets U+FFFD for its bad bytes, and a resume with the same value matches it.
TEST(CliRunDir, FlagValuesThatAreNotUtf8) {
  const fs::path d = xg::test::fresh_test_dir();
  const std::string out = (d / "run").string();
  const nlohmann::json args = {{"flags", {{"sample-prompt", std::string("caf\xe9")}}}};
  cli::RunDir("p", out, false, cli::RunDirOptions{}).record_args(args);
  EXPECT_NE(xg::test::slurp(out + "/args.json").find("caf\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(error_of([&] { cli::RunDir("p", out, true, cli::RunDirOptions{}).record_args(args); }), "");
}

// A run that fails before its first checkpoint leaves --out as it found it: the folders it
// made are gone, and in a folder that was there only what it added is removed. Once it has
// written a checkpoint (it can be resumed), or when it ends without an error, all stays.
TEST(CliRunDir, ARunThatFailsBeforeACheckpointLeavesOutAsItFoundIt) {
  const fs::path d = xg::test::fresh_test_dir();
  const cli::RunDirOptions o;
  auto fail_after = [&](const std::string& out, bool resume, const std::vector<std::string>& files) {
    try {
      cli::RunDir run("p", out, resume, o);
      run.record_args({{"flags", {{"lr", 0.1}}}});
      for (const std::string& f : files) std::ofstream(out + "/" + f) << "x";
      throw std::runtime_error("step 1 failed");
    } catch (const std::runtime_error&) {
    }
  };
  fail_after((d / "a" / "b" / "run").string(), false, {"log.jsonl"});
  EXPECT_FALSE(fs::exists(d / "a")) << "every folder the run made is removed";
  fs::create_directories(d / "mine");
  fail_after((d / "mine").string(), false, {"log.jsonl", "best.safetensors"});
  ASSERT_TRUE(fs::exists(d / "mine"));
  EXPECT_TRUE(fs::is_empty(d / "mine")) << "not even the lock is left";
  // A resumed run keeps what was there (its lock, log and checkpoint); what it added goes.
  const std::string run = (d / "run").string();
  cli::RunDir("p", run, false, o).record_args({{"flags", {{"lr", 0.1}}}});
  std::ofstream(run + "/checkpoint.safetensors") << "step 1";
  fail_after(run, true, {"best.safetensors"});
  EXPECT_TRUE(fs::exists(run + "/.lock"));
  EXPECT_TRUE(fs::exists(run + "/args.json"));
  EXPECT_EQ(xg::test::slurp(run + "/checkpoint.safetensors"), "step 1");
  EXPECT_FALSE(fs::exists(run + "/best.safetensors"));
  // A checkpoint written by the failing run keeps everything: it can be resumed.
  fail_after(run, true, {"best.safetensors", "checkpoint.safetensors"});
  EXPECT_TRUE(fs::exists(run + "/best.safetensors"));
  fail_after((d / "new").string(), false, {"log.jsonl", "checkpoint.safetensors"});
  EXPECT_TRUE(fs::exists(d / "new" / "log.jsonl"));
  EXPECT_TRUE(fs::exists(d / "new" / ".lock"));
  // A run that ends well keeps its folder, checkpoint or not.
  cli::RunDir("p", (d / "done").string(), false, o).record_args({{"flags", {{"lr", 0.1}}}});
  EXPECT_TRUE(fs::exists(d / "done" / "args.json"));
}

// Tests for finetune/reward_process.cpp: a reward program that answers, and ones that hang,
// crash, print garbage, flood their output or answer NaN; each failure names the program and
// the row, and leaves no process behind.
#include "finetune/reward_process.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace reward_process_tests {

using xg::finetune::RewardProcess;
using json = nlohmann::json;

// A program that reads JSON lines and answers the length of the completion field (sh: the
// line's length in bytes stands in for it, which is enough to see one answer per request).
TEST(RewardProcess, AnswersOneNumberPerRequestInOrder) {
  RewardProcess p("while IFS= read -r line; do echo \" ${#line} \"; done", 5.0);
  const json a = {{"prompt", "p"}, {"completion", "abc"}}, b = {{"prompt", "p"}, {"completion", "abcdefgh"}};
  EXPECT_EQ(p.score(a, "row 1"), static_cast<double>(a.dump().size()));
  EXPECT_EQ(p.score(b, "row 2"), static_cast<double>(b.dump().size()));
  EXPECT_EQ(p.score(a, "row 3"), static_cast<double>(a.dump().size()));
}

TEST(RewardProcess, AnswersInCSyntaxAndNegative) {
  RewardProcess p("while read -r l; do echo -2.5e-1; done", 5.0);
  EXPECT_EQ(p.score({{"x", 1}}, "row 1"), -0.25);
}

TEST(RewardProcess, AHangIsATimeout) {
  RewardProcess p("while read -r l; do sleep 30; done", 0.3);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_XG_ERROR(p.score({{"x", 1}}, "data.jsonl:7"),
                  "--reward-cmd 'while read -r l; do sleep 30; done' gave no answer within 0.3 s (--reward-timeout) "
                  "(scoring data.jsonl:7)");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_XG_ERROR(p.score({{"x", 1}}, "data.jsonl:8"), "the program was stopped by an earlier error");
}

TEST(RewardProcess, ACrashNamesTheExit) {
  RewardProcess p("read -r l; exit 3", 5.0);
  EXPECT_XG_ERROR(p.score({{"x", 1}}, "row 1"), "exited with status 3 without answering (scoring row 1)");
  RewardProcess k("kill -9 $$", 5.0);
  EXPECT_XG_ERROR(k.score({{"x", 1}}, "row 2"), "was killed by signal 9");
}

TEST(RewardProcess, GarbageNanAndFloodsAreRefused) {
  RewardProcess g("while read -r l; do echo 'great job'; done", 5.0);
  EXPECT_XG_ERROR(g.score({{"x", 1}}, "row 1"), "answered \"great job\", not a number (scoring row 1)");
  RewardProcess n("while read -r l; do echo nan; done", 5.0);
  EXPECT_XG_ERROR(n.score({{"x", 1}}, "row 2"), "answered \"nan\": a reward must be a finite number");
  RewardProcess e("while read -r l; do echo; done", 5.0);
  EXPECT_XG_ERROR(e.score({{"x", 1}}, "row 3"), "answered \"\", not a number");
  // An endless line: refused once it passes the bound, without reading it all.
  RewardProcess f("read -r l; while :; do printf 1111111111111111; done", 5.0);
  EXPECT_XG_ERROR(f.score({{"x", 1}}, "row 4"), "answered more than 4096 bytes without a newline");
}

TEST(RewardProcess, AProgramThatDoesNotReadIsNoticed) {
  // It exits at once: the write or the read notices, and names how it ended.
  RewardProcess p("exit 0", 5.0);
  EXPECT_XG_ERROR(p.score({{"big", std::string(1 << 20, 'x')}}, "row 1"), "exited with status 0");
  EXPECT_XG_ERROR(RewardProcess("", 1.0), "--reward-cmd: the command is empty");
  EXPECT_XG_ERROR(RewardProcess("cat", 0.0), "--reward-timeout must be positive, got 0");
}

// The answer line alone (what fuzz_reward_answer feeds): a number, or one short line saying
// what was answered, quoted as JSON and cut, however long or strange the line.
TEST(RewardProcess, AnAnswerLineIsANumberOrOneShortLine) {
  using xg::finetune::parse_reward_answer;
  EXPECT_EQ(parse_reward_answer(" 0.5\r"), 0.5);
  EXPECT_EQ(parse_reward_answer("-1e-3"), -1e-3);
  EXPECT_XG_ERROR(parse_reward_answer("1\t2"), "answered \"1\\t2\", not a number");
  // strtod would skip a leading form feed (but no trailing one): neither end takes one.
  EXPECT_XG_ERROR(parse_reward_answer("\f2"), "answered \"\\f2\", not a number");
  EXPECT_XG_ERROR(parse_reward_answer("2\f"), "answered \"2\\f\", not a number");
  EXPECT_XG_ERROR(parse_reward_answer(std::string("1\0", 2)), "answered \"1\\u0000\", not a number");
  // 4,000 digits that overflow: the message quotes the first 40 bytes.
  std::string huge = "9" + std::string(3999, '0');
  try {
    parse_reward_answer(huge);
    ADD_FAILURE() << "no error";
  } catch (const xg::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m, "answered \"" + huge.substr(0, 40) + "\"...: a reward must be a finite number");
  }
  try {
    parse_reward_answer("x\n" + std::string(10000, 'y'));
    ADD_FAILURE() << "no error";
  } catch (const xg::Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 100u) << e.what();
  }
}

// What this process's stderr receives while `f` runs (the reward program's stderr is ours).
template <class F>
std::string stderr_of(F f) {
  const std::string path = std::filesystem::temp_directory_path() / ("xgrad-stderr-" + std::to_string(::getpid()));
  std::fflush(stderr);
  const int saved = ::dup(2), fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, 2);
  ::close(fd);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  return all;
}

// A program (one command: the shell execs it) that crashes is reported by its signal, and the
// shell adds no "Segmentation fault" line of its own to stderr.
TEST(RewardProcess, ACrashIsReportedByItsSignal) {
  const std::string dir = xg::test::fresh_test_dir().string(), prog = dir + "/crash.sh";
  std::ofstream(prog) << "#!/bin/sh\nread -r l\necho 'about to crash' >&2\nkill -SEGV $$\n";
  std::filesystem::permissions(prog, std::filesystem::perms::owner_all);
  std::string message;
  const std::string err = stderr_of([&] {
    RewardProcess p(prog + " --flag", 5.0);
    try {
      p.score({{"x", 1}}, "row 1");
    } catch (const xg::Error& e) {
      message = e.what();
    }
  });
  EXPECT_EQ(message, "--reward-cmd '" + prog + " --flag' was killed by signal 11 (SIGSEGV) without answering (scoring row 1)");
  EXPECT_EQ(err, "about to crash\n");
  // A shell script of several commands stays the shell's: its status says which signal.
  stderr_of([&] {
    RewardProcess s(prog + " && echo 1", 5.0);
    EXPECT_XG_ERROR(s.score({{"x", 1}}, "row 2"),
                    "exited with status 139 (as a shell reports a command it ran being killed by signal 11, SIGSEGV) "
                    "without answering (scoring row 2)");
  });
}

// A program that is not there, or cannot run, is found before anything starts; the shell's
// own words (builtins, loops) and commands it has to expand are left to it.
TEST(RewardProcess, AProgramThatCannotRunIsFoundBeforeItStarts) {
  using xg::finetune::check_reward_command;
  const std::string dir = xg::test::fresh_test_dir().string();
  EXPECT_XG_ERROR(check_reward_command("no-such-reward-program-xg --x 1"),
                  "--reward-cmd 'no-such-reward-program-xg --x 1': no program 'no-such-reward-program-xg' in any folder of PATH");
  EXPECT_XG_ERROR(RewardProcess("no-such-reward-program-xg", 1.0), "no program 'no-such-reward-program-xg'");
  EXPECT_XG_ERROR(check_reward_command(dir + "/missing.py"), "--reward-cmd '" + dir + "/missing.py': " + dir +
                                                                 "/missing.py does not exist");
  std::ofstream(dir + "/plain.py") << "print(1)\n";
  EXPECT_XG_ERROR(check_reward_command(dir + "/plain.py arg"), dir + "/plain.py is not executable");
  EXPECT_XG_ERROR(check_reward_command(dir), dir + " is a folder, not a program");
  EXPECT_XG_ERROR(check_reward_command("  "), "--reward-cmd: the command is empty");
  for (const char* fine : {"cat", "sh -c 'exit 0'", "read -r l; exit 3", "while read -r l; do echo 1; done", "exit 0",
                           "FOO=1 cat", "\"$HOME/x\" y", "/bin/cat -"})
    EXPECT_NO_THROW(check_reward_command(fine)) << fine;
}

}  // namespace reward_process_tests

// Tests for finetune/reward_process.cpp: a reward program that answers, and ones that hang,
// crash, print garbage, flood their output or answer NaN; each failure names the program and
// the row, and leaves no process behind.
#include "finetune/reward_process.hpp"

#include <gtest/gtest.h>

#include <chrono>

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
  EXPECT_XG_ERROR(g.score({{"x", 1}}, "row 1"), "answered 'great job', not a number (scoring row 1)");
  RewardProcess n("while read -r l; do echo nan; done", 5.0);
  EXPECT_XG_ERROR(n.score({{"x", 1}}, "row 2"), "answered nan: a reward must be a finite number");
  RewardProcess e("while read -r l; do echo; done", 5.0);
  EXPECT_XG_ERROR(e.score({{"x", 1}}, "row 3"), "answered '', not a number");
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

}  // namespace reward_process_tests

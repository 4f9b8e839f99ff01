// A reward program: a long-running subprocess that scores completions, one JSON line in and
// one number out per completion (xg-finetune --reward-cmd). Its time, output and exit are
// bounded: a program that hangs, crashes, floods its output or answers anything but a finite
// number is an xg::Error naming the program and the row, and the program is stopped.
#pragma once

#include <string>
#include <sys/types.h>

#include <nlohmann/json.hpp>

namespace xg::finetune {

// Checks, before anything starts, that the program a --reward-cmd command line runs can run: its
// first word, when it is a plain name or path (not quoted, expanded, an assignment, or one of
// the shell's own words such as `read` or `while`), must be an executable file, given as a path
// or found in a folder of PATH. Otherwise an xg::Error naming --reward-cmd and what is wrong.
void check_reward_command(const std::string& command);

// The reward one answer line holds: a finite number, JSON or C syntax, surrounding spaces and
// tabs (and a '\r') allowed. Anything else is an xg::Error of one short line saying what was
// answered ("answered \"great\", not a number"), the line quoted as JSON and cut.
double parse_reward_answer(const std::string& line);

class RewardProcess {
 public:
  // The longest answer line read (bytes, newline excluded); more is an error.
  static constexpr std::size_t kMaxLine = 4096;

  // Starts `command` with /bin/sh -c (so it may hold arguments and quoting) after
  // check_reward_command; its stdin and stdout are pipes to this process, its stderr is this
  // process's. A command that is one program with its arguments is exec'd by the shell, so a
  // crash is seen as its signal, with no line of the shell's on stderr; a longer shell command
  // stays the shell's, whose status 128 + N says a command it ran died of signal N. It is
  // killed if this process dies. `timeout_seconds`: how long one answer may take.
  RewardProcess(std::string command, double timeout_seconds);
  ~RewardProcess();  // closes its stdin, waits up to a second for it to exit, then kills it
  RewardProcess(const RewardProcess&) = delete;
  RewardProcess& operator=(const RewardProcess&) = delete;

  // Writes `request` as one JSON line and reads one line back: a finite number (JSON or C
  // syntax, surrounding spaces allowed). `what` names the row in errors ("data.jsonl:12").
  double score(const nlohmann::json& request, const std::string& what);

  const std::string& command() const { return command_; }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& why);
  void stop();
  std::string exit_status();

  std::string command_;
  bool exec_ = false;  // the shell execs the program: a crash is the program's own signal
  double timeout_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string pending_;  // bytes read past the last answer's newline
  std::string ended_;    // how the program ended, once seen
};

}  // namespace xg::finetune

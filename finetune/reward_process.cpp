// RewardProcess: fork/exec with two pipes, poll() for every read and write under one deadline.
#include "finetune/reward_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "autograd/error.hpp"
#include "finetune/detail/quoted.hpp"

namespace xg::finetune {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms > 0 ? static_cast<int>(std::min<long long>(ms, 1 << 30)) : 0;
}

// "SIGSEGV" (glibc's abbreviation), or the signal's description when it has none.
std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? str_cat("SIG", abbrev) : std::string(strsignal(sig));
}

// The words /bin/sh reads itself rather than as a program: POSIX's reserved words and the
// builtins of dash and POSIX (echo, kill, test ... run as builtins too, whatever PATH holds).
bool is_shell_word(const std::string& w) {
  static const char* const words[] = {
      "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then", "until", "while",
      ".", ":", "[", "alias", "bg", "break", "cd", "chdir", "command", "continue", "echo", "eval", "exec", "exit",
      "export", "false", "fc", "fg", "getopts", "hash", "jobs", "kill", "local", "printf", "pwd", "read", "readonly",
      "return", "set", "shift", "test", "times", "trap", "true", "type", "ulimit", "umask", "unalias", "unset", "wait"};
  for (const char* x : words)
    if (w == x) return true;
  return false;
}

// The command's first word when it is a plain program name or path, as the shell would run it
// unchanged; "" when the shell would read it otherwise (quotes, $, ~, globs, NAME=VALUE ...).
std::string plain_first_word(const std::string& cmd) {
  const std::size_t b = cmd.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  std::size_t e = b;
  while (e < cmd.size() && (std::isalnum(static_cast<unsigned char>(cmd[e])) || std::strchr("_./+-@%,", cmd[e]))) ++e;
  if (e < cmd.size() && !std::strchr(" \t", cmd[e])) return "";  // the word goes on with a character the shell reads
  return cmd.substr(b, e - b);
}

// True when `cmd` is one command: no unquoted ; & | ( ) or newline (the & of a redirection,
// 2>&1, is part of it). Quotes and backslashes are followed as the shell reads them.
bool is_one_command(const std::string& cmd) {
  char quote = 0;
  for (std::size_t i = 0; i < cmd.size(); ++i) {
    const char c = cmd[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (quote == '"' && c == '\\') ++i;
      continue;
    }
    if (c == '\\') ++i;
    else if (c == '\'' || c == '"') quote = c;
    else if (c == '&' && i > 0 && (cmd[i - 1] == '>' || cmd[i - 1] == '<')) continue;
    else if (std::strchr(";&|()\n", c)) return false;
  }
  return true;
}

// Why `file` (a path) cannot be run, or "" when it can.
std::string why_not_runnable(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return str_cat(file, " does not exist");
  if (S_ISDIR(st.st_mode)) return str_cat(file, " is a folder, not a program");
  if (!S_ISREG(st.st_mode) || ::access(file.c_str(), X_OK) != 0) return str_cat(file, " is not executable");
  return "";
}

}  // namespace

void check_reward_command(const std::string& command) {
  check(command.find_first_not_of(" \t\n") != std::string::npos, "--reward-cmd: the command is empty");
  const std::string program = plain_first_word(command);
  if (program.empty() || is_shell_word(program)) return;  // the shell's to read
  std::string why;
  if (program.find('/') != std::string::npos) {
    why = why_not_runnable(program);
  } else {
    // As the shell searches: each folder of PATH in order (an empty one is the current folder),
    // or dash's own list when PATH is unset.
    const char* env = std::getenv("PATH");
    const std::string path = env ? env : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    why = str_cat("no program '", program, "' in any folder of PATH");
    for (std::size_t b = 0; b <= path.size();) {
      std::size_t e = path.find(':', b);
      if (e == std::string::npos) e = path.size();
      const std::string dir = e == b ? "." : path.substr(b, e - b);
      if (why_not_runnable(dir + "/" + program).empty()) {
        why.clear();
        break;
      }
      b = e + 1;
    }
  }
  check(why.empty(), "--reward-cmd '", command, "': ", why);
}

double parse_reward_answer(const std::string& line) {
  const std::size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
  const std::string t = b == std::string::npos ? "" : line.substr(b, e - b + 1);
  char* end = nullptr;
  // NOTE: strtod skips any leading white space (a form feed, a vertical tab); only the spaces
  // trimmed above are allowed, at either end alike (fuzz_reward_answer's corpus held "\f\f2").
  const bool starts_number = !t.empty() && !std::isspace(static_cast<unsigned char>(t[0]));
  const double v = starts_number ? std::strtod(t.c_str(), &end) : 0.0;
  check(starts_number && end == t.c_str() + t.size(), "answered ", quoted(t), ", not a number");
  check(std::isfinite(v), "answered ", quoted(t), ": a reward must be a finite number");
  return v;
}

// How the program ended, or "" while it runs; the first call that sees the end reaps it.
std::string RewardProcess::exit_status() {
  if (!ended_.empty() || pid_ <= 0) return ended_;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) != pid_) return "";
  if (WIFSIGNALED(st)) {
    ended_ = str_cat("was killed by signal ", WTERMSIG(st), " (", signal_name(WTERMSIG(st)), ")");
  } else if (!WIFEXITED(st)) {
    ended_ = "stopped";
  } else {
    const int code = WEXITSTATUS(st);
    ended_ = str_cat("exited with status ", code);
    // A shell that ran the program (not exec'd) outlives its crash and exits with 128 + N.
    if (!exec_ && code > 128 && code < 128 + NSIG)
      ended_ += str_cat(" (as a shell reports a command it ran being killed by signal ", code - 128, ", ",
                        signal_name(code - 128), ")");
  }
  return ended_;
}

RewardProcess::RewardProcess(std::string command, double timeout_seconds)
    : command_(std::move(command)), timeout_(timeout_seconds) {
  check_reward_command(command_);
  check(timeout_ > 0 && std::isfinite(timeout_), "--reward-timeout must be positive, got ", timeout_);
  // One program with its arguments is exec'd, so that it is the process we wait for: its crash
  // is then its signal, not the status of a shell that outlived it and printed its own line.
  const std::string program = plain_first_word(command_);
  exec_ = !program.empty() && !is_shell_word(program) && is_one_command(command_);
  const std::string shell_line = exec_ ? "exec " + command_ : command_;
  // NOTE: a program that exits while we write would end this process with SIGPIPE; ignored, the
  // write fails with EPIPE and the error names the program instead.
  signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  check(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0, "--reward-cmd: cannot make pipes (",
        std::strerror(errno), ")");
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    const int e = errno;
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    throw Error(str_cat("--reward-cmd: cannot start '", command_, "' (", std::strerror(e), ")"));
  }
  if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
    // Its own process group, so that stopping it stops what it started too (a shell's `sleep`
    // would otherwise outlive it and hold the pipes of whoever runs us).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(in[0], 0);
    dup2(out[1], 1);
    signal(SIGPIPE, SIG_DFL);
    execl("/bin/sh", "sh", "-c", shell_line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid_, pid_);  // as the child does: whichever runs first, the group exists before any kill
  close(in[0]);
  close(out[1]);
  to_child_ = in[1];
  from_child_ = out[0];
}

RewardProcess::~RewardProcess() { stop(); }

void RewardProcess::stop() {
  if (to_child_ >= 0) close(to_child_), to_child_ = -1;
  if (from_child_ >= 0) close(from_child_), from_child_ = -1;
  if (pid_ <= 0) return;
  // A well-behaved program exits at the end of its input; give it a second.
  for (int i = 0; i < 100 && exit_status().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (exit_status().empty()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  kill(-pid_, SIGKILL);  // anything it started and left running
  pid_ = -1;
}

void RewardProcess::fail(const std::string& what, const std::string& why) {
  if (pid_ > 0) kill(-pid_, SIGKILL);
  stop();
  throw Error(str_cat("--reward-cmd '", command_, "' ", why, " (scoring ", what, ")"));
}

double RewardProcess::score(const nlohmann::json& request, const std::string& what) {
  check(pid_ > 0, "--reward-cmd '", command_, "': the program was stopped by an earlier error");
  const Clock::time_point deadline =
      Clock::now() + std::chrono::microseconds(static_cast<long long>(timeout_ * 1e6));
  const std::string timeout_msg = str_cat("gave no answer within ", timeout_, " s (--reward-timeout)");
  // Write the request whole (a pipe takes 64 KB at once; a longer one as the program reads).
  std::string line = request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  for (std::size_t done = 0; done < line.size();) {
    pollfd p{to_child_, POLLOUT, 0};
    const int r = poll(&p, 1, ms_left(deadline));
    if (r == 0) fail(what, timeout_msg);
    if (r < 0 && errno == EINTR) continue;
    const ssize_t n = write(to_child_, line.data() + done, line.size() - done);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      // It closed its input, most likely by exiting: give the exit a moment to be seen.
      const std::string why = str_cat("stopped reading its input (", std::strerror(errno), ")");
      std::string st;
      for (int i = 0; i < 50 && (st = exit_status()).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      fail(what, st.empty() ? why : st);
    }
    done += static_cast<std::size_t>(n);
  }
  // Read up to a newline.
  std::size_t nl;
  while ((nl = pending_.find('\n')) == std::string::npos) {
    if (pending_.size() > kMaxLine) fail(what, str_cat("answered more than ", kMaxLine, " bytes without a newline"));
    pollfd p{from_child_, POLLIN, 0};
    const int r = poll(&p, 1, ms_left(deadline));
    if (r == 0) fail(what, timeout_msg);
    if (r < 0 && errno == EINTR) continue;
    char buf[4096];
    const ssize_t n = read(from_child_, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      // End of its output: it exited (or closed stdout); give the exit a moment to be seen.
      std::string st;
      for (int i = 0; i < 50 && (st = exit_status()).empty(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      fail(what, st.empty() ? "closed its output without answering" : st + " without answering");
    }
    pending_.append(buf, static_cast<std::size_t>(n));
  }
  std::string answer = pending_.substr(0, nl);
  pending_.erase(0, nl + 1);
  if (answer.size() > kMaxLine) fail(what, str_cat("answered more than ", kMaxLine, " bytes in a line"));
  try {
    return parse_reward_answer(answer);
  } catch (const Error& e) {
    fail(what, e.what());
  }
}

}  // namespace xg::finetune

// RewardProcess: fork/exec with two pipes, poll() for every read and write under one deadline.
#include "finetune/reward_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "autograd/error.hpp"

namespace xg::finetune {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms > 0 ? static_cast<int>(std::min<long long>(ms, 1 << 30)) : 0;
}

}  // namespace

// How the program ended, or "" while it runs; the first call that sees the end reaps it.
std::string RewardProcess::exit_status() {
  if (!ended_.empty() || pid_ <= 0) return ended_;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) != pid_) return "";
  ended_ = WIFEXITED(st)     ? str_cat("exited with status ", WEXITSTATUS(st))
           : WIFSIGNALED(st) ? str_cat("was killed by signal ", WTERMSIG(st), " (", strsignal(WTERMSIG(st)), ")")
                             : "stopped";
  return ended_;
}

RewardProcess::RewardProcess(std::string command, double timeout_seconds)
    : command_(std::move(command)), timeout_(timeout_seconds) {
  check(!command_.empty(), "--reward-cmd: the command is empty");
  check(timeout_ > 0 && std::isfinite(timeout_), "--reward-timeout must be positive, got ", timeout_);
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
    execl("/bin/sh", "sh", "-c", command_.c_str(), static_cast<char*>(nullptr));
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
  const std::size_t b = answer.find_first_not_of(" \t\r"), e = answer.find_last_not_of(" \t\r");
  const std::string t = b == std::string::npos ? "" : answer.substr(b, e - b + 1);
  char* end = nullptr;
  errno = 0;
  const double v = t.empty() ? 0.0 : std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) fail(what, str_cat("answered '", answer.substr(0, 80), "', not a number"));
  if (!std::isfinite(v)) fail(what, str_cat("answered ", t, ": a reward must be a finite number"));
  return v;
}

}  // namespace xg::finetune

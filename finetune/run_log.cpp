// RunLog: progress line on a terminal, plain lines elsewhere, JSON lines on disk.
#include "finetune/run_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/error.hpp"

namespace xg::finetune {

namespace {

std::string metric_text(const Metrics& m) {
  std::string s;
  for (const auto& [k, v] : m) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%s %.4g", s.empty() ? "" : "  ", k.c_str(), v);
    s += buf;
  }
  return s;
}

// %.4g: 2.123, 0.0001235.
std::string cli_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// The size of the file open as `fd` up to its last '\n' (0: none), so that a line cut by a
// run killed mid-write, or by a full disk, can be cut off.
off_t whole_lines_size(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  char buf[4096];
  for (off_t end = st.st_size; end > 0;) {
    const off_t start = end > static_cast<off_t>(sizeof buf) ? end - static_cast<off_t>(sizeof buf) : 0;
    const ssize_t n = ::pread(fd, buf, static_cast<std::size_t>(end - start), start);
    if (n <= 0) return st.st_size;  // unreadable: leave it as it is
    for (ssize_t i = n - 1; i >= 0; --i)
      if (buf[i] == '\n') return start + i + 1;
    end = start;
  }
  return 0;
}

}  // namespace

std::vector<nlohmann::json> read_run_log(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  check(f.good(), "read_run_log: cannot open ", path);
  std::vector<nlohmann::json> records;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    const bool last = f.eof();  // no '\n' after it: a line cut mid-write
    try {
      records.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      if (!last) throw Error(str_cat(path, ":", n, ": not a JSON line (", e.what(), ")"));
      std::fprintf(stderr, "warning: %s:%lld: skipped a torn last line of %zu bytes (a run stopped mid-write)\n",
                   path.c_str(), static_cast<long long>(n), line.size());
    }
  }
  return records;
}

RunLog::RunLog(std::string program, const std::string& log_path, int64_t total_steps, int tty)
    : program_(std::move(program)), total_(total_steps), tty_(tty < 0 ? ::isatty(STDERR_FILENO) == 1 : tty == 1) {
  if (log_path.empty()) return;
  path_ = log_path;
  fd_ = ::open(log_path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);  // read: a torn last line
  if (fd_ < 0) throw Error(str_cat(program_, ": cannot open ", log_path, " for appending (", std::strerror(errno), ")"));
  // A line a killed run left half-written would glue itself to the first line appended now.
  struct stat st {};
  const off_t whole = whole_lines_size(fd_);
  if (::fstat(fd_, &st) == 0 && whole < st.st_size && ::ftruncate(fd_, whole) == 0)
    std::fprintf(stderr, "%s: %s: removed a torn last line of %lld bytes (a run stopped mid-write)\n", program_.c_str(),
                 log_path.c_str(), static_cast<long long>(st.st_size - whole));
}

RunLog::~RunLog() {
  clear_line();
  if (fd_ >= 0) ::close(fd_);
}

void RunLog::clear_line() {
  if (line_open_) std::fputc('\n', stderr);
  line_open_ = false;
}

std::string RunLog::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

double RunLog::eta_seconds(int64_t step) const {
  if (first_step_ < 0 || step <= first_step_) return NAN;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_time_).count();
  return elapsed / static_cast<double>(step - first_step_) * static_cast<double>(total_ - step);
}

void RunLog::append(const std::string& kind, int64_t step, const Metrics& m, const std::string& text) {
  if (path_.empty()) return;
  nlohmann::json j = {{"kind", kind}, {"step", step}};
  for (const auto& [k, v] : m) j[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(std::to_string(v));
  if (!text.empty()) j["text"] = text;
  // Samples of a byte-level model may be invalid UTF-8: such bytes become U+FFFD in the log.
  const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
  // Whole or not at all: a write cut short (a full disk, a file size limit) is cut off again, and
  // the run stops, since a log that silently loses lines while training goes on is worse. The
  // checkpoint on disk is the last complete one (written atomically).
  struct stat st {};
  const off_t before = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = n < 0 ? errno : ENOSPC;
    if (before >= 0 && ::ftruncate(fd_, before) != 0)  // then read_run_log skips the torn line
      std::fprintf(stderr, "%s: could not cut a partial line off %s\n", program_.c_str(), path_.c_str());
    const std::string dir = path_.find('/') == std::string::npos ? "." : path_.substr(0, path_.rfind('/'));
    throw Error(str_cat(program_, ": writing ", path_, " failed (", std::strerror(err), err == ENOSPC || err == EFBIG
                                                                          ? str_cat(": the disk holding ", dir, " is full")
                                                                          : std::string(),
                        "); stopped at step ", step, ", the last checkpoint is kept"));
  }
}

void RunLog::train_step(int64_t step, const Metrics& m, double tokens_per_s, int64_t every) {
  if (first_step_ < 0) {
    first_step_ = step - 1;
    first_time_ = std::chrono::steady_clock::now();
  }
  Metrics rec = m;
  rec["tokens_per_s"] = tokens_per_s;
  append("train", step, rec, "");
  if (muted_) return;
  char head[96];
  std::snprintf(head, sizeof head, "%s: step %lld/%lld  ", program_.c_str(), static_cast<long long>(step),
                static_cast<long long>(total_));
  char tail[96];
  std::snprintf(tail, sizeof tail, "  %.0f tok/s  ETA %s", tokens_per_s, format_duration(eta_seconds(step)).c_str());
  const std::string line = head + metric_text(m) + tail;
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    line_open_ = true;
  } else if (every > 0 && (step % every == 0 || step == total_)) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

void RunLog::event(const std::string& kind, int64_t step, const Metrics& m, const std::string& text) {
  append(kind, step, m, text);
  if (muted_) return;
  clear_line();
  std::string line = str_cat(program_, ": ", kind, " step ", step);
  // A per-token loss (the evaluation reports how many tokens it averaged over) says its unit:
  // "loss 2.12 nats/token over 9690 tokens", and bits_per_byte its own.
  std::string units;
  Metrics rest = m;
  auto loss = rest.find("loss"), tokens = rest.find("tokens");
  if (loss != rest.end() && tokens != rest.end()) {
    units = str_cat(cli_number(loss->second), " nats/token over ", static_cast<long long>(tokens->second), " tokens");
    units = "loss " + units;
    rest.erase("loss");
    rest.erase("tokens");
    auto bpb = rest.find("bits_per_byte");
    if (bpb != rest.end()) {
      units += str_cat(" (", cli_number(bpb->second), " bits/byte)");
      rest.erase(bpb);
    }
  }
  for (const std::string& part : {units, metric_text(rest), text})
    if (!part.empty()) line += "  " + part;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void RunLog::note(const std::string& text) {
  if (muted_) return;
  clear_line();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace xg::finetune

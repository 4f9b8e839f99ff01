// RunLog: progress line on a terminal, plain lines elsewhere, JSON lines on disk.
#include "finetune/run_log.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
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

}  // namespace

RunLog::RunLog(std::string program, const std::string& log_path, int64_t total_steps, int tty)
    : program_(std::move(program)), total_(total_steps), tty_(tty < 0 ? ::isatty(STDERR_FILENO) == 1 : tty == 1) {
  if (!log_path.empty()) {
    path_ = log_path;
    file_.open(log_path, std::ios::app);
    if (!file_) throw Error(str_cat(program_, ": cannot open ", log_path, " for appending"));
  }
}

RunLog::~RunLog() { clear_line(); }

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
  file_ << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  file_.flush();
  // A log cut mid-line while training goes on is worse than a run that stops: the disk is full.
  if (!file_) throw Error(str_cat(program_, ": writing ", path_, " failed (disk full?); stopped at step ", step));
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

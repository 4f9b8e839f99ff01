// What a training run tells its user: a progress line (step, loss, tokens/s, ETA) redrawn in
// place on a terminal, plain log lines otherwise, and every record as JSON in <out>/log.jsonl.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

namespace xg::finetune {

using Metrics = std::map<std::string, double>;

class RunLog {
 public:
  // `log_path` empty: no file. `tty`: redraw one progress line with '\r' (default: whether
  // stderr is a terminal).
  RunLog(std::string program, const std::string& log_path, int64_t total_steps, int tty = -1);
  ~RunLog();

  // A training step: updates the progress line (terminal) or prints a log line every
  // `every` steps (otherwise); always appends a record {"kind": "train", "step", ...metrics}.
  void train_step(int64_t step, const Metrics& m, double tokens_per_s, int64_t every);
  // An evaluation or any other event: always printed on its own line and logged.
  void event(const std::string& kind, int64_t step, const Metrics& m, const std::string& text = "");
  // Free text to the terminal only (samples, notes).
  void note(const std::string& text);
  // Prints nothing from now on (the ranks other than 0 of a data-parallel run); a log file
  // given to the constructor is still written.
  void mute() { muted_ = true; }

  // The ETA in seconds from the steps done since construction (or the last resume).
  double eta_seconds(int64_t step) const;
  static std::string format_duration(double seconds);

 private:
  void clear_line();
  void append(const std::string& kind, int64_t step, const Metrics& m, const std::string& text);

  std::string program_;
  std::string path_;  // of log.jsonl ("" = none)
  std::ofstream file_;
  int64_t total_;
  bool tty_;
  bool line_open_ = false;
  bool muted_ = false;
  int64_t first_step_ = -1;
  std::chrono::steady_clock::time_point first_time_;
};

}  // namespace xg::finetune

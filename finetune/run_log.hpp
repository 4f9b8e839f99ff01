// What a training run tells its user: a progress line (step, loss, tokens/s, ETA) redrawn in
// place on a terminal, plain log lines otherwise, and every record as JSON in <out>/log.jsonl.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xg::finetune {

using Metrics = std::map<std::string, double>;

// The records of a log.jsonl. A last line cut mid-write (no '\n', not JSON: a run killed or
// stopped by a full disk while writing it) is skipped with a warning on stderr; a bad line
// elsewhere is an xg::Error naming the file and line.
std::vector<nlohmann::json> read_run_log(const std::string& path);

class RunLog {
 public:
  // `log_path` empty: no file. `tty`: redraw one progress line with '\r' (default: whether
  // stderr is a terminal). A torn last line in an existing log (a run killed mid-write) is cut
  // off, with a note on stderr. Every record is appended whole or not at all: a failed write is
  // undone and throws xg::Error naming the file, the disk and the step.
  RunLog(std::string program, const std::string& log_path, int64_t total_steps, int tty = -1);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

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
  int fd_ = -1;  // log.jsonl, opened O_APPEND
  int64_t total_;
  bool tty_;
  bool line_open_ = false;
  bool muted_ = false;
  int64_t first_step_ = -1;
  std::chrono::steady_clock::time_point first_time_;
};

}  // namespace xg::finetune

// Helpers of the whole-step benchmarks (step_bench.cpp, lora_bench.cpp): the median of the
// timed steps, wall time and the process's peak RSS, as their PyTorch scripts measure them.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace xg::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The high-water mark of resident memory, MB (Python's resource.getrusage(RUSAGE_SELF)).
inline double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Restarts the high-water mark at the current resident memory (Linux's clear_refs "5"), so that
// what the setup held (a random model made in float32, then stored in bf16 or q8_0) does not count
// as the steps' peak. False where the kernel does not allow it.
inline bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// The high-water mark since the last reset_peak_rss(), MB (VmHWM in /proc/self/status); -1 if unreadable.
inline double peak_rss_since_reset_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  123 kB"
  return -1;
}

}  // namespace xg::bench

// Test helpers for runs under mpirun (XGRAD_MPIEXEC): the launcher's command line, a shell
// command's output, and what two runs' logs and weight files hold, to compare them.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"
#include "io/safetensors.hpp"
#include "tests/cli_run.hpp"

#ifdef XGRAD_MPIEXEC

namespace xg::test {

// `mpirun -np <ranks>` as CI can run it: oversubscribing the 2-core machine is allowed, and
// as root OpenMPI needs to be told it is.
inline std::string mpirun(int ranks) {
  return std::string(XGRAD_MPIEXEC) + " --oversubscribe -np " + std::to_string(ranks) +
         (::geteuid() == 0 ? " --allow-run-as-root" : "") + " ";
}

// Runs `command` (a shell command line) with its output in the test's files.
inline CliRun shell(const std::string& command) {
  const std::string base = test_file_base();
  const int st = std::system((command + " >" + base + ".out 2>" + base + ".err").c_str());
  CliRun r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  return r;
}

// The "train" records of a log.jsonl: (step, loss).
inline std::vector<std::pair<int64_t, double>> train_losses(const std::filesystem::path& log) {
  std::vector<std::pair<int64_t, double>> out;
  for (const nlohmann::json& j : log_records(log, "train"))
    out.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>());
  return out;
}

// The largest |a - b| over every tensor of two safetensors files with the same names.
inline double max_weight_diff(const std::filesystem::path& a, const std::filesystem::path& b) {
  const TensorMap ta = io::load_safetensors(a.string()), tb = io::load_safetensors(b.string());
  EXPECT_EQ(ta.size(), tb.size());
  double worst = 0;
  for (const auto& [name, t] : ta) {
    auto it = tb.find(name);
    if (it == tb.end()) {
      ADD_FAILURE() << "no tensor " << name << " in " << b;
      continue;
    }
    const Tensor x = t.to(kFloat64), y = it->second.to(kFloat64);
    for (int64_t i = 0; i < x.numel(); ++i) worst = std::max(worst, std::abs(x.data<double>()[i] - y.data<double>()[i]));
  }
  return worst;
}

// Whether two files hold the same bytes (both must exist).
inline bool same_bytes(const std::filesystem::path& a, const std::filesystem::path& b) {
  EXPECT_TRUE(std::filesystem::exists(a)) << a;
  EXPECT_TRUE(std::filesystem::exists(b)) << b;
  return slurp(a.string()) == slurp(b.string());
}

// 200 lines of a short repeated text: data for the tiny models of the tests.
inline void write_fox_text(const std::filesystem::path& p) {
  std::ofstream f(p);
  for (int i = 0; i < 200; ++i) f << "line " << i % 10 << ": the quick brown fox jumps over the lazy dog.\n";
}

}  // namespace xg::test

#endif  // XGRAD_MPIEXEC

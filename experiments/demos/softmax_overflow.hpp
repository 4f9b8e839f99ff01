// Softmax overflow: exp(x) / sum(exp(x)) overflows in float32 for large logits (above
// log(FLT_MAX) = 88.72), the max-subtracted form does not; xgrad's softmax, log_softmax and
// cross_entropy against both.
#pragma once

#include <cstdint>
#include <vector>

namespace xg::experiments::demos {

struct SoftmaxConfig {
  // Rows of logits: [1000, 1001, 1002] overflows every exp, [10, 5, 100] one, [1, 2, 3] none.
  std::vector<std::vector<double>> logits = {{1000, 1001, 1002}, {10, 5, 100}, {1, 2, 3}};
  std::vector<int64_t> targets = {2, 1, 2};  // one class per row, for cross-entropy
  void validate() const;
};

struct SoftmaxRow {
  std::vector<double> logits;
  std::vector<double> naive;           // float32 exp(x) / sum(exp(x)) with xgrad's ops
  std::vector<double> naive_log;       // float32 log(naive)
  std::vector<double> stable_formula;  // exp(x - max) / sum(exp(x - max)), in double
  std::vector<double> log_formula;     // x - max - log(sum(exp(x - max))), in double
  std::vector<double> softmax;         // xgrad's softmax (float32)
  std::vector<double> log_softmax;     // xgrad's log_softmax (float32)
  int64_t target;
  double ce_formula, ce_naive;  // -log p[target] (the naive one from the naive softmax)
  double ce;                    // xgrad's cross_entropy (float32, reduction none)
  bool naive_finite;            // every naive probability is finite
};

struct SoftmaxResult {
  std::vector<SoftmaxRow> rows;
  double ce_mean;          // losses::cross_entropy over all rows (reduction mean)
  double ce_mean_formula;  // the mean of the rows' formula losses
  double overflow_at;      // float32: exp(x) = inf from x > log(FLT_MAX) = 88.72
};

SoftmaxResult run_softmax(const SoftmaxConfig& c);

}  // namespace xg::experiments::demos

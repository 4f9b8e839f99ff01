// Naive vs numerically stable softmax in float32 with xgrad's elementwise ops, its fused
// softmax / log_softmax kernels and the fused cross-entropy, against the formulas in double.
#include "experiments/demos/softmax_overflow.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "autograd/ops.hpp"
#include "losses/cross_entropy.hpp"

namespace xg::experiments::demos {

void SoftmaxConfig::validate() const {
  check(!logits.empty(), "softmax: needs at least one row of logits");
  check(targets.size() == logits.size(), "softmax: needs one target per row of logits, got ", targets.size(),
        " targets for ", logits.size(), " rows");
  for (std::size_t r = 0; r < logits.size(); ++r) {
    check(logits[r].size() == logits[0].size() && !logits[r].empty(), "softmax: every row needs ", logits[0].size(),
          " logits, row ", r, " has ", logits[r].size());
    check(targets[r] >= 0 && targets[r] < static_cast<int64_t>(logits[r].size()), "softmax: target ", targets[r],
          " of row ", r, " is not a class in [0, ", logits[r].size(), ")");
  }
}

SoftmaxResult run_softmax(const SoftmaxConfig& c) {
  c.validate();
  NoGradGuard no_grad;
  const int64_t N = static_cast<int64_t>(c.logits.size()), C = static_cast<int64_t>(c.logits[0].size());
  std::vector<double> flat;
  for (const auto& row : c.logits) flat.insert(flat.end(), row.begin(), row.end());
  Tensor x = from_vector(flat, {N, C});  // float32, as torch.tensor([...]) is
  Tensor e = exp(x);
  Tensor naive = e / sum(e, {-1}, true);  // no max subtracted: exp(1000) = inf, inf / inf = NaN
  std::vector<double> naive_v = naive.to_vector(), naive_log_v = log(naive).to_vector();
  std::vector<double> sm = softmax(x, -1).to_vector(), lsm = log_softmax(x, -1).to_vector();
  std::vector<double> ce = losses::cross_entropy(x, from_vector(c.targets, {N}), -100, losses::Reduction::None).to_vector();

  SoftmaxResult r;
  r.ce_mean = losses::cross_entropy(x, from_vector(c.targets, {N})).item();
  r.ce_mean_formula = 0;
  for (int64_t i = 0; i < N; ++i) {
    SoftmaxRow row;
    row.logits = c.logits[i];
    row.target = c.targets[i];
    // The logits as float32 holds them, then the formulas in double.
    std::vector<double> xs(C);
    for (int64_t j = 0; j < C; ++j) xs[j] = static_cast<double>(static_cast<float>(c.logits[i][j]));
    const double m = *std::max_element(xs.begin(), xs.end());
    double z = 0;
    for (double v : xs) z += std::exp(v - m);
    for (int64_t j = 0; j < C; ++j) {
      row.naive.push_back(naive_v[i * C + j]);
      row.naive_log.push_back(naive_log_v[i * C + j]);
      row.stable_formula.push_back(std::exp(xs[j] - m) / z);
      row.log_formula.push_back(xs[j] - m - std::log(z));
      row.softmax.push_back(sm[i * C + j]);
      row.log_softmax.push_back(lsm[i * C + j]);
    }
    row.ce_formula = -row.log_formula[row.target];
    row.ce_naive = -row.naive_log[row.target];
    row.ce = ce[i];
    row.naive_finite = std::all_of(row.naive.begin(), row.naive.end(), [](double v) { return std::isfinite(v); });
    r.ce_mean_formula += row.ce_formula / static_cast<double>(N);
    r.rows.push_back(row);
  }
  r.overflow_at = std::log(static_cast<double>(FLT_MAX));
  return r;
}

}  // namespace xg::experiments::demos

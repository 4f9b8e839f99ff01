// LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019) by hand: [1, 3, 5, 7] step by
// step (and a second example, [3, 4]), by the explicit formula and by xgrad's modules.
#pragma once

#include <cstdint>
#include <vector>

namespace xg::experiments::demos {

struct NormsConfig {
  std::vector<double> x = {1, 3, 5, 7};  // small integers: every step checks by hand
  std::vector<double> homework = {3, 4};  // the second example (--homework), gamma = [1, 1]
  int64_t param_dim = 8;                  // width of the parameter-count comparison
  void validate() const;
};

struct LayerNormSteps {
  double mean, var, sigma;        // var divides by N (biased), as LayerNorm does
  std::vector<double> formula;    // (x - mean) / sigma (the textbook formula: no eps)
  std::vector<double> formula_eps;  // (x - mean) / sqrt(var + 1e-5) (nn.LayerNorm's eps)
  std::vector<double> module;     // xgrad's nn::LayerNorm(N, 1e-5, elementwise_affine=false)
  double out_mean, out_std;       // of the module's output (std biased)
};

struct RMSNormSteps {
  double mean_sq, rms;
  std::vector<double> formula;      // x / rms (no eps)
  std::vector<double> formula_eps;  // x / sqrt(mean_sq + 1e-6) (LLaMA's eps)
  std::vector<double> module;       // xgrad's nn::RMSNorm(N, 1e-6) (weight = 1)
  double out_mean, out_rms;
};

struct NormsResult {
  LayerNormSteps layer;
  RMSNormSteps rms;
  RMSNormSteps homework;
  int64_t layernorm_params, rmsnorm_params;  // num_parameters() of LayerNorm / RMSNorm(param_dim)
};

NormsResult run_norms(const NormsConfig& c);

}  // namespace xg::experiments::demos

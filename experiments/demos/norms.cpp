// LayerNorm / RMSNorm by hand (double precision) and by xgrad's nn::LayerNorm / nn::RMSNorm
// (float32, torch.tensor's default dtype).
#include "experiments/demos/norms.hpp"

#include <cmath>

#include "autograd/ops.hpp"
#include "nn/norm.hpp"

namespace xg::experiments::demos {

void NormsConfig::validate() const {
  check(x.size() >= 2, "norms: --x needs at least two numbers, got ", x.size());
  check(homework.size() >= 1, "norms: --homework needs at least one number");
  check(param_dim >= 1, "norms: --param-dim must be positive, got ", param_dim);
}

namespace {

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

RMSNormSteps rms_steps(const std::vector<double>& x) {
  RMSNormSteps r;
  const double n = static_cast<double>(x.size());
  r.mean_sq = 0;
  for (double v : x) r.mean_sq += v * v / n;
  r.rms = std::sqrt(r.mean_sq);
  for (double v : x) {
    r.formula.push_back(v / r.rms);
    r.formula_eps.push_back(v / std::sqrt(r.mean_sq + 1e-6));
  }
  nn::RMSNorm norm(static_cast<int64_t>(x.size()), 1e-6);
  r.module = norm(from_vector(x, {static_cast<int64_t>(x.size())})).to_vector();
  r.out_mean = mean_of(r.module);
  double sq = 0;
  for (double v : r.module) sq += v * v / n;
  r.out_rms = std::sqrt(sq);
  return r;
}

}  // namespace

NormsResult run_norms(const NormsConfig& c) {
  c.validate();
  NoGradGuard no_grad;
  NormsResult r;
  const std::vector<double>& x = c.x;
  const double n = static_cast<double>(x.size());
  LayerNormSteps& l = r.layer;
  l.mean = mean_of(x);
  l.var = 0;
  for (double v : x) l.var += (v - l.mean) * (v - l.mean) / n;
  l.sigma = std::sqrt(l.var);
  for (double v : x) {
    l.formula.push_back((v - l.mean) / l.sigma);
    l.formula_eps.push_back((v - l.mean) / std::sqrt(l.var + 1e-5));
  }
  // NOTE: the hand calculation, as textbooks write it, divides by sigma itself; nn.LayerNorm
  // (and ours) divide by sqrt(var + 1e-5). For [1, 3, 5, 7] the two agree to 6 decimals.
  nn::LayerNorm ln(static_cast<int64_t>(x.size()), 1e-5, false);
  l.module = ln(from_vector(x, {static_cast<int64_t>(x.size())})).to_vector();
  l.out_mean = mean_of(l.module);
  double var = 0;
  for (double v : l.module) var += (v - l.out_mean) * (v - l.out_mean) / n;
  l.out_std = std::sqrt(var);
  r.rms = rms_steps(x);
  // NOTE: RMS(x) = sqrt((1/d) sum x_i^2). It is sometimes written without the square root
  // (that is the mean square); for the second example [3, 4] the RMS is sqrt((9 + 16) / 2).
  r.homework = rms_steps(c.homework);
  r.layernorm_params = nn::LayerNorm(c.param_dim).num_parameters();
  r.rmsnorm_params = nn::RMSNorm(c.param_dim).num_parameters();
  return r;
}

}  // namespace xg::experiments::demos

// Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers", arXiv
// 2004.08249): Post-LN whose residual branch is scaled per sublayer by omega, profiled at init.
#pragma once

#include <memory>
#include <vector>

#include "nn/decoder.hpp"

namespace xg::experiments {

// A Post-LN DecoderLM (no final norm) run with Admin's sublayer rule
//   x_i = LN(x_{i-1} * omega_i + f_i(x_{i-1}))            (paper, eq. 6; sublayers i = 1..2N)
// omega_i is a learnable vector of d_model entries, all set at init by profile() to
//   omega_i = sqrt(sum_{j<i} Var[f_j(x_{j-1})])             (paper, section 4.3 / Algorithm 1)
// NOTE: our reading of the sum: j runs over the 2N sublayers (attention and FFN each count, as
// in the paper's encoder and decoder) and starts at j = 0 with f_0(x_{-1}) := x_0, the input
// embedding (token + position), so omega_1 = sqrt(Var[x_0]) and
//   omega_i^2 = Var[x_0] + sum_{j=1}^{i-1} Var[f_j(x_{j-1})].
// The variances are measured by one forward of Post-LN (omega = 1) on a profiling batch, each
// over all B*T*C entries (mean removed), without recording a graph.
class AdminLM {
 public:
  explicit AdminLM(const nn::LMConfig& config);  // norm_position Post and final_norm false are forced
  // Sets every omega from one Post-LN forward of tokens [B, T] (Algorithm 1's profiling pass).
  // Returns the measured variances: [Var x_0, Var f_1, ..., Var f_2N].
  std::vector<double> profile(const Tensor& tokens);
  Tensor forward(const Tensor& tokens) const;  // int64 [B, T] -> logits [B, T, V]
  Tensor operator()(const Tensor& tokens) const { return forward(tokens); }
  std::vector<Tensor> parameters() const;  // the LM's, then omega_1..omega_2N
  const std::vector<Tensor>& omega() const { return omega_; }
  nn::DecoderLM& lm() { return *lm_; }

 private:
  // One pass; with `vars` the Post-LN forward (omega ignored) that records the variances.
  Tensor run(const Tensor& tokens, std::vector<double>* vars) const;
  std::shared_ptr<nn::DecoderLM> lm_;
  std::vector<Tensor> omega_;  // 2N vectors [C]
};

}  // namespace xg::experiments

// A controlled experiment on positional encodings: near-identical tokens (so that differences in
// attention come from positions alone), the same W_q / W_k, and attention scores with no
// positional encoding, sinusoidal encoding (Vaswani et al. 2017, added to x) and RoPE (Su et al.,
// RoFormer, on q and k).
#pragma once

#include <cstdint>
#include <vector>

namespace xg::experiments::demos {

struct PositionsConfig {
  int64_t seq_len = 16, d_model = 32, head_dim = 32;  // one head, small enough to print
  double token_scale = 0.5;  // token_vec = randn(1, d_model) * 0.5
  double noise = 0.03;       // x = token_vec repeated + randn(T, d_model) * 0.03
  double gain = 0.5;         // xavier_normal_(W_q / W_k, gain=0.5)
  uint64_t seed = 42;
  std::vector<int64_t> shifts = {1, 7, 100, 1000};  // RoPE: positions i+s, j+s instead of i, j
  void validate() const;
};

using Matrix = std::vector<std::vector<double>>;  // [query i][key j]

struct PositionScheme {
  const char* name;   // "none", "sinusoidal", "rope"
  Matrix scores;      // q_i . k_j / sqrt(d_head)
  Matrix weights;     // softmax over j, from xgrad's scaled_dot_product_attention
  std::vector<double> weight_profile, score_profile;  // mean over |i - j| = 0 .. T-1
  double max_dev_uniform = 0;  // max |weight - 1/T|
  // Max over diagonals of (max - min) of the scores with j - i fixed: 0 when the scores
  // depend on j - i alone (a Toeplitz map).
  double toeplitz_spread = 0;
  double identical_toeplitz_spread = 0;  // the same with every token = the shared vector (no noise)
  // The same token vectors placed at positions s .. s+T-1 instead of 0 .. T-1: max over i, j
  // and the shifts of |score_s(i, j) - score(i, j)|.
  double max_shift_change = 0;
};

struct PositionsResult {
  PositionScheme none, sinusoidal, rope;
  double max_abs_score = 0;  // over the three maps (the scale for tolerances)
};

PositionsResult run_positions(const PositionsConfig& c);

}  // namespace xg::experiments::demos

// QK-Norm (Henry et al. 2020; Dehghani et al. 2023): softmax(q k^T / sqrt(d)) degenerates to
// one-hot as the keys grow, unless q and k pass through RMSNorm first; one example (keys 8x
// larger than the queries, as keys grown large late in training) and a scale sweep.
#pragma once

#include <cstdint>
#include <vector>

namespace xg::experiments::demos {

struct QKNormConfig {
  int64_t head_dim = 8, seq_len = 4;  // one query row of 4 weights, small enough to print
  double k_scale = 8.0;             // the example's keys: K = randn * 8
  std::vector<double> scales;       // the sweep (empty: 2^-2 .. 2^7 by half powers of two)
  int64_t trials = 32;              // independent (Q, K) draws averaged per sweep point
  uint64_t seed = 42;
  void validate() const;
};

// One query row of the example (query 0 against the seq_len keys).
struct QKExample {
  double q_norm_min, q_norm_max, k_norm_min, k_norm_max;  // per-token L2 norms
  std::vector<double> scores, weights;
};

struct QKPoint {
  double scale;
  double entropy_plain, max_prob_plain;    // mean over trials and query rows; entropy in nats
  double entropy_qknorm, max_prob_qknorm;
  double max_logit_plain, max_logit_qknorm;  // max |q.k / sqrt(d)|
};

struct QKNormResult {
  QKExample plain, qknorm;
  std::vector<QKPoint> sweep;
  double max_entropy;      // log(seq_len): uniform weights
  double logit_bound;      // |q^.k^| / sqrt(d) <= sqrt(d) for RMS-normalised q^, k^ (weight 1)
  double max_prob_bound;   // 1 / (1 + (T-1) exp(-2 logit_bound)): the most one-hot QK-Norm allows
};

QKNormResult run_qknorm(const QKNormConfig& c);

}  // namespace xg::experiments::demos

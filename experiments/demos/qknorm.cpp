// QK-Norm with xgrad's modules: the q_norm / k_norm RMSNorms of a GroupedQueryAttention built
// with qk_norm, and the attention weights from the scaled_dot_product_attention kernel.
#include "experiments/demos/qknorm.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/ops.hpp"
#include "nn/attention.hpp"

namespace xg::experiments::demos {

void QKNormConfig::validate() const {
  check(head_dim >= 1 && seq_len >= 2, "qknorm: --d-head must be >= 1 and --seq-len >= 2, got ", head_dim, " and ",
        seq_len);
  check(k_scale > 0, "qknorm: --k-scale must be positive, got ", k_scale);
  check(trials >= 1, "qknorm: --trials must be at least 1, got ", trials);
  for (double s : scales) check(s > 0, "qknorm: --scales must be positive, got ", s);
}

namespace {

// q: [N, 1, T, hs], k: [N, 1, T, hs] -> the weights [N, 1, T, T] (v = I, so the kernel's
// output softmax(q k^T / sqrt(hs)) I is the weight matrix).
Tensor weights(const Tensor& q, const Tensor& k) {
  const int64_t T = k.size(2);
  std::vector<double> eye(T * T, 0.0);
  for (int64_t i = 0; i < T; ++i) eye[i * T + i] = 1;
  return scaled_dot_product_attention(q, k, expand(from_vector(eye, {1, 1, T, T}), {k.size(0), 1, T, T}));
}

std::vector<double> row_norms(const Tensor& t) {  // [..., hs] -> L2 norm of each row
  const int64_t hs = t.size(-1);
  std::vector<double> v = t.to_vector(), out;
  for (std::size_t i = 0; i < v.size(); i += hs) {
    double s = 0;
    for (int64_t j = 0; j < hs; ++j) s += v[i + j] * v[i + j];
    out.push_back(std::sqrt(s));
  }
  return out;
}

struct RowStats {
  double entropy = 0, max_prob = 0;
};

RowStats mean_row_stats(const Tensor& w) {  // [..., T]: mean entropy and mean max over the rows
  const int64_t T = w.size(-1);
  std::vector<double> v = w.to_vector();
  RowStats s;
  const double rows = static_cast<double>(v.size() / T);
  for (std::size_t r = 0; r < v.size(); r += T) {
    double h = 0, m = 0;
    for (int64_t j = 0; j < T; ++j) {
      const double p = v[r + j];
      if (p > 0) h -= p * std::log(p);
      m = std::max(m, p);
    }
    s.entropy += h / rows;
    s.max_prob += m / rows;
  }
  return s;
}

double max_abs_logit(const Tensor& q, const Tensor& k) {
  std::vector<double> v = (matmul(q, transpose(k, -2, -1)) / std::sqrt(static_cast<double>(q.size(-1)))).to_vector();
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

QKNormResult run_qknorm(const QKNormConfig& c) {
  c.validate();
  NoGradGuard no_grad;
  const int64_t hs = c.head_dim, T = c.seq_len;
  // The attention's own QK-Norm: RMSNorm(d_head, eps 1e-6) over each head's features.
  nn::GQASpec o;
  o.n_heads = o.n_kv_heads = 1;
  o.out_bias = true;
  o.qk_norm = true;
  nn::SublayerContext ctx;
  ctx.d_model = hs;
  nn::GroupedQueryAttention attn(o, ctx);
  const nn::RMSNorm& q_norm = *attn.q_norm();
  const nn::RMSNorm& k_norm = *attn.k_norm();

  QKNormResult r;
  Generator gen(c.seed);
  {  // the example: Q ~ N(0, 1), K ~ N(0, 1) * 8, query 0's row
    Tensor q = randn({1, 1, T, hs}, kFloat32, &gen);
    Tensor k = randn({1, 1, T, hs}, kFloat32, &gen) * c.k_scale;
    auto example = [&](const Tensor& qq, const Tensor& kk) {
      QKExample e;
      auto qn = row_norms(qq), kn = row_norms(kk);
      e.q_norm_min = *std::min_element(qn.begin(), qn.end());
      e.q_norm_max = *std::max_element(qn.begin(), qn.end());
      e.k_norm_min = *std::min_element(kn.begin(), kn.end());
      e.k_norm_max = *std::max_element(kn.begin(), kn.end());
      std::vector<double> s = (matmul(qq, transpose(kk, -2, -1)) / std::sqrt(static_cast<double>(hs))).to_vector();
      std::vector<double> w = weights(qq, kk).to_vector();
      e.scores.assign(s.begin(), s.begin() + T);
      e.weights.assign(w.begin(), w.begin() + T);
      return e;
    };
    r.plain = example(q, k);
    r.qknorm = example(q_norm(q), k_norm(k));
  }
  std::vector<double> scales = c.scales;
  if (scales.empty())
    for (int e = -4; e <= 14; ++e) scales.push_back(std::pow(2.0, e / 2.0));
  Tensor q = randn({c.trials, 1, T, hs}, kFloat32, &gen);
  Tensor k0 = randn({c.trials, 1, T, hs}, kFloat32, &gen);
  Tensor qn = q_norm(q);
  for (double s : scales) {
    Tensor k = k0 * s;
    Tensor kn = k_norm(k);
    RowStats plain = mean_row_stats(weights(q, k)), normed = mean_row_stats(weights(qn, kn));
    r.sweep.push_back({s, plain.entropy, plain.max_prob, normed.entropy, normed.max_prob, max_abs_logit(q, k),
                       max_abs_logit(qn, kn)});
  }
  r.max_entropy = std::log(static_cast<double>(T));
  r.logit_bound = std::sqrt(static_cast<double>(hs));
  r.max_prob_bound = 1.0 / (1.0 + static_cast<double>(T - 1) * std::exp(-2.0 * r.logit_bound));
  return r;
}

}  // namespace xg::experiments::demos

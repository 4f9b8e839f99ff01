// The positional-encoding experiment with xgrad's modules: Linear projections (xavier_normal_),
// SinusoidalPositionalEncoding, RotaryEmbedding (interleaved pairs) and the
// scaled_dot_product_attention kernel.
#include "experiments/demos/positions.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/ops.hpp"
#include "nn/init.hpp"
#include "nn/linear.hpp"
#include "nn/position.hpp"

namespace xg::experiments::demos {

void PositionsConfig::validate() const {
  check(seq_len >= 2, "positions: --seq-len must be at least 2, got ", seq_len);
  check(d_model >= 2 && d_model % 2 == 0, "positions: --d-model must be a positive even number, got ", d_model);
  check(head_dim >= 2 && head_dim % 2 == 0,
        "positions: --d-head must be a positive even number (RoPE rotates pairs), got ", head_dim);
  check(noise >= 0 && token_scale >= 0 && gain > 0, "positions: --noise and --token-scale must be >= 0 and --gain > 0");
  for (int64_t s : shifts) check(s >= 1, "positions: --shifts must be positive, got ", s);
}

namespace {

Matrix to_matrix(const Tensor& t) {  // [T, T] (leading dims of size 1 allowed)
  const int64_t T = t.size(-1);
  std::vector<double> v = t.to_vector();
  Matrix m(T, std::vector<double>(T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) m[i][j] = v[i * T + j];
  return m;
}

// Mean of m[i][j] over the pairs with |i - j| = d, for d = 0 .. T-1 (the distance profile).
std::vector<double> distance_profile(const Matrix& m) {
  const int64_t T = static_cast<int64_t>(m.size());
  std::vector<double> sum(T, 0.0), count(T, 0.0);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      sum[std::abs(i - j)] += m[i][j];
      count[std::abs(i - j)] += 1;
    }
  for (int64_t d = 0; d < T; ++d) sum[d] /= count[d];
  return sum;
}

double toeplitz_spread(const Matrix& m) {
  const int64_t T = static_cast<int64_t>(m.size());
  double worst = 0;
  for (int64_t off = -(T - 1); off <= T - 1; ++off) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = std::max<int64_t>(0, -off); i < T && i + off < T; ++i) {
      lo = std::min(lo, m[i][i + off]);
      hi = std::max(hi, m[i][i + off]);
    }
    worst = std::max(worst, hi - lo);
  }
  return worst;
}

double max_abs_diff(const Matrix& a, const Matrix& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, std::fabs(a[i][j] - b[i][j]));
  return worst;
}

struct Maps {
  Tensor scores, weights;  // [1, 1, T, T]
};

// q, k: [1, 1, T, hs]. Scores by matmul; weights from the attention kernel with v = I, so that
// its output softmax(q k^T / sqrt(hs)) I is the weight matrix itself.
Maps attention_maps(const Tensor& q, const Tensor& k) {
  const int64_t T = q.size(2), hs = q.size(3);
  Maps m;
  m.scores = matmul(q, transpose(k, -2, -1)) / std::sqrt(static_cast<double>(hs));
  std::vector<double> eye(T * T, 0.0);
  for (int64_t i = 0; i < T; ++i) eye[i * T + i] = 1;
  m.weights = scaled_dot_product_attention(q, k, from_vector(eye, {1, 1, T, T}, q.dtype()));
  return m;
}

PositionScheme make_scheme(const char* name, const Maps& maps) {
  PositionScheme s{name, to_matrix(maps.scores), to_matrix(maps.weights), {}, {}, 0, 0, 0, 0};
  s.weight_profile = distance_profile(s.weights);
  s.score_profile = distance_profile(s.scores);
  const double uniform = 1.0 / static_cast<double>(s.weights.size());
  for (const auto& row : s.weights)
    for (double w : row) s.max_dev_uniform = std::max(s.max_dev_uniform, std::fabs(w - uniform));
  s.toeplitz_spread = toeplitz_spread(s.scores);
  return s;
}

}  // namespace

PositionsResult run_positions(const PositionsConfig& c) {
  c.validate();
  NoGradGuard no_grad;
  const int64_t T = c.seq_len, D = c.d_model, hs = c.head_dim;
  int64_t max_shift = 0;
  for (int64_t s : c.shifts) max_shift = std::max(max_shift, s);
  Generator gen(c.seed);
  // All tokens are (almost) the same vector: any structure in the maps comes from positions.
  Tensor token = randn({1, 1, D}, kFloat32, &gen) * c.token_scale;
  Tensor x = expand(token, {1, T, D}) + randn({1, T, D}, kFloat32, &gen) * c.noise;  // [1, T, D]
  nn::Linear w_q(D, hs, false), w_k(D, hs, false);
  Tensor wq = w_q.weight(), wk = w_k.weight();
  nn::init::xavier_normal_(wq, c.gain, &gen);
  nn::init::xavier_normal_(wk, c.gain, &gen);
  // [1, T, hs] -> [1, 1, T, hs]
  auto heads = [&](const Tensor& t) { return reshape(t, {1, 1, T, hs}); };

  PositionsResult r;
  // 1. no positional encoding
  Tensor q = heads(w_q(x)), k = heads(w_k(x));
  r.none = make_scheme("none", attention_maps(q, k));
  // 2. sinusoidal, added to the input (shifted: the table rows s .. s+T-1)
  nn::SinusoidalPositionalEncoding pe(D, max_shift + T);
  Maps sin0 = attention_maps(heads(w_q(pe(x))), heads(w_k(pe(x))));
  r.sinusoidal = make_scheme("sinusoidal", sin0);
  // 3. RoPE on the projected q and k (NOTE: in the interleaved layout, pairs (2i, 2i+1), as the
  // RoFormer paper and Meta's LLaMA code rotate them; Hugging Face's rotate-half layout pairs
  // (i, i + d/2) and gives another map with the same property)
  nn::RotaryEmbedding rope(hs, max_shift + T, 10000.0, RopeLayout::Interleaved);
  Maps rope0 = attention_maps(rope(q), rope(k));
  r.rope = make_scheme("rope", rope0);

  {  // identical tokens: only the positions tell them apart
    Tensor same = expand(token, {1, T, D});
    Tensor qs = heads(w_q(same)), ks = heads(w_k(same));
    r.none.identical_toeplitz_spread = toeplitz_spread(to_matrix(attention_maps(qs, ks).scores));
    r.sinusoidal.identical_toeplitz_spread =
        toeplitz_spread(to_matrix(attention_maps(heads(w_q(pe(same))), heads(w_k(pe(same)))).scores));
    r.rope.identical_toeplitz_spread = toeplitz_spread(to_matrix(attention_maps(rope(qs), rope(ks)).scores));
  }
  const Matrix sin_scores = r.sinusoidal.scores, rope_scores = r.rope.scores;
  for (int64_t s : c.shifts) {
    r.rope.max_shift_change =
        std::max(r.rope.max_shift_change, max_abs_diff(to_matrix(attention_maps(rope(q, s), rope(k, s)).scores), rope_scores));
    Maps sin_s = attention_maps(heads(w_q(pe(x, s))), heads(w_k(pe(x, s))));
    r.sinusoidal.max_shift_change = std::max(r.sinusoidal.max_shift_change, max_abs_diff(to_matrix(sin_s.scores), sin_scores));
  }
  for (const PositionScheme* s : {&r.none, &r.sinusoidal, &r.rope})
    for (const auto& row : s->scores)
      for (double v : row) r.max_abs_score = std::max(r.max_abs_score, std::fabs(v));
  return r;
}

}  // namespace xg::experiments::demos

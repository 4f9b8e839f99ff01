// Token sampling: filters applied to a copy of the logits in double precision.
#include "nn/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace xg::nn {

namespace {

void validate(const Tensor& logits, const SamplingOptions& o) {
  check(logits.dim() == 1 && logits.numel() > 0, "sample_token: expected logits [V], got ", shape_str(logits.shape()));
  check(o.temperature == 0 || (o.temperature >= kMinTemperature && std::isfinite(o.temperature)),
        "sample_token: temperature must be 0 (greedy) or in [", kMinTemperature, ", inf), got ", o.temperature);
  check(o.top_k >= 0, "sample_token: top_k must be >= 0, got ", o.top_k);
  check(o.top_p > 0 && o.top_p <= 1, "sample_token: top_p must be in (0, 1], got ", o.top_p);
  check(o.min_p >= 0 && o.min_p <= 1, "sample_token: min_p must be in [0, 1], got ", o.min_p);
  check(o.repetition_penalty > 0 && std::isfinite(o.repetition_penalty),
        "sample_token: repetition_penalty must be positive and finite, got ", o.repetition_penalty);
}

}  // namespace

Tensor sampling_probs(const Tensor& logits, const SamplingOptions& o, const std::vector<int64_t>& context) {
  validate(logits, o);
  std::vector<double> z = logits.to_vector();
  const std::size_t V = z.size();
  if (o.repetition_penalty != 1) {
    // Each token of the context once, however often it occurs (a gather and a scatter in HF).
    std::vector<bool> seen(V, false);
    for (int64_t id : context) {
      check(id >= 0 && static_cast<std::size_t>(id) < V, "sample_token: context token ", id, " is outside the vocabulary [0, ",
            V, ")");
      if (seen[id]) continue;
      seen[id] = true;
      z[id] = z[id] < 0 ? z[id] * o.repetition_penalty : z[id] / o.repetition_penalty;
    }
  }
  // -inf masks a token out; NaN, +inf or every token masked leaves nothing to draw from.
  bool any = false;
  for (std::size_t i = 0; i < V; ++i) {
    // Named, not printed: a NaN's sign bit (which kernel made it) would print as "-nan".
    check(!std::isnan(z[i]) && z[i] != std::numeric_limits<double>::infinity(), "sample_token: logit ", i, " is ",
          std::isnan(z[i]) ? "nan" : "inf", " (the model's weights or adapters hold NaN or Inf, or overflow)");
    any = any || std::isfinite(z[i]);
  }
  check(any, "sample_token: every logit is -inf (nothing to draw from)");
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  if (o.temperature == 0) {  // greedy: all mass on the first maximum
    const auto best = static_cast<std::size_t>(std::max_element(z.begin(), z.end()) - z.begin());
    std::vector<double> p(V, 0.0);
    p[best] = 1;
    return from_vector(p, {static_cast<int64_t>(V)}, kFloat64);
  }
  for (double& v : z) v /= o.temperature;
  std::vector<std::size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return z[a] > z[b]; });
  if (o.top_k > 0 && static_cast<std::size_t>(o.top_k) < V) {
    // Keep every logit >= the k-th largest (ties at the boundary survive, as in HF).
    const double kth = z[order[static_cast<std::size_t>(o.top_k) - 1]];
    for (double& v : z)
      if (v < kth) v = kNegInf;
  }
  const double m = z[order[0]];
  std::vector<double> p(V);
  double total = 0;
  for (std::size_t i = 0; i < V; ++i) total += (p[i] = std::exp(z[i] - m));
  for (double& v : p) v /= total;
  if (o.top_p < 1) {
    // Drop the tail once the cumulative mass of the more likely tokens exceeds top_p; the
    // most likely token always stays.
    double cum = 0;
    for (std::size_t r = 0; r < V; ++r) {
      const std::size_t i = order[r];
      if (r > 0 && cum >= o.top_p) p[i] = 0;
      cum += p[i] > 0 ? p[i] : 0;
    }
    const double kept = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& v : p) v /= kept;
  }
  if (o.min_p > 0) {
    // Relative to the most likely token's probability among those left; it always stays.
    const double floor = o.min_p * p[order[0]];
    for (std::size_t r = 1; r < V; ++r)
      if (p[order[r]] < floor) p[order[r]] = 0;
    const double kept = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& v : p) v /= kept;
  }
  return from_vector(p, {static_cast<int64_t>(V)}, kFloat64);
}

int64_t sample_token(const Tensor& logits, const SamplingOptions& o, Generator& gen, const std::vector<int64_t>& context) {
  const std::vector<double> p = sampling_probs(logits, o, context).to_vector();
  if (o.temperature == 0) return static_cast<int64_t>(std::max_element(p.begin(), p.end()) - p.begin());
  const double u = gen.uniform();
  double cum = 0;
  int64_t last = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = static_cast<int64_t>(i);
    cum += p[i];
    if (u < cum) return last;
  }
  return last;  // rounding left u just above the total
}

}  // namespace xg::nn

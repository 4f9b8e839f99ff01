// The percentile bootstrap of experiments/bootstrap.hpp (the method and its limits are said there).
#include "experiments/bootstrap.hpp"

#include <algorithm>
#include <cmath>

#include "autograd/error.hpp"

namespace xg::experiments {

namespace {

// SplitMix64 (Steele, Lea & Flood 2014): a small generator whose stream is the same on every
// platform and standard library (std::uniform_int_distribution's is not), so the intervals
// reproduce bit for bit anywhere.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // An index in [0, n): the high 64 bits of next() * n (Lemire 2019, without the rejection
  // step: its bias is below n / 2^64, far under anything a few thousand resamples resolve).
  std::size_t index(std::size_t n) {
    return static_cast<std::size_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
};

// The q-quantile of sorted values, interpolated linearly (numpy's default).
double quantile_sorted(const std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace

double Interval::rel_half_width() const { return (hi - lo) / 2 / std::fabs(estimate); }

double median(std::vector<double> v) {
  check(!v.empty(), "median: no values");
  const std::size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  if (v.size() % 2 == 1) return v[m];
  const double upper = v[m];
  return (*std::max_element(v.begin(), v.begin() + m) + upper) / 2;
}

Interval bootstrap_ci(const std::vector<std::vector<double>>& samples, const Statistic& statistic,
                      const BootstrapOptions& o) {
  check(!samples.empty(), "bootstrap_ci: no samples");
  for (const auto& s : samples) check(!s.empty(), "bootstrap_ci: an empty sample");
  check(o.resamples >= 1, "bootstrap_ci: resamples must be at least 1, got ", o.resamples);
  check(o.level > 0 && o.level < 1, "bootstrap_ci: level must be in (0, 1), got ", o.level);
  Interval r;
  r.estimate = statistic(samples);
  r.n = static_cast<int64_t>(samples.front().size());
  SplitMix64 gen{o.seed};
  std::vector<std::vector<double>> drawn = samples;
  std::vector<double> stats(static_cast<std::size_t>(o.resamples));
  for (double& stat : stats) {
    for (std::size_t k = 0; k < samples.size(); ++k)
      for (double& v : drawn[k]) v = samples[k][gen.index(samples[k].size())];
    stat = statistic(drawn);
  }
  std::sort(stats.begin(), stats.end());
  r.lo = quantile_sorted(stats, (1 - o.level) / 2);
  r.hi = quantile_sorted(stats, (1 + o.level) / 2);
  return r;
}

Interval median_ci(const std::vector<double>& values, const BootstrapOptions& o) {
  check(!values.empty(), "median_ci: no values");
  return bootstrap_ci({values}, [](const std::vector<std::vector<double>>& s) { return median(s[0]); }, o);
}

}  // namespace xg::experiments

// Confidence intervals over seeds for the study's medians: a percentile bootstrap with its own
// fixed-seed generator, so that every interval the study prints is reproducible bit for bit.
//
// The method (Efron & Tibshirani 1993, ch. 13): from the n values of a sample (one per seed),
// draw `resamples` new samples of n values with replacement, compute the statistic (by default
// the median) of each, and take the (1 - level)/2 and (1 + level)/2 quantiles of those
// statistics (linear interpolation, numpy's default) as the interval. The estimate itself is
// the statistic of the original sample. Why this method: the values (gradient norms, ratios,
// final losses) are skewed and the statistic is a median, for which there is no simple
// standard-error formula; the percentile bootstrap needs neither normality nor a density
// estimate. Its limits: with few values the interval is made of sample values (with 3 seeds the
// 95% interval of a median is the range of the three), and it is a little too narrow for small
// n (it ignores values the sample did not show), so read an interval from fewer than ~10 seeds
// as a lower bound on the uncertainty.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace xg::experiments {

struct BootstrapOptions {
  int64_t resamples = 4000;  // at least 2,000 for 95% percentile intervals (Efron & Tibshirani)
  uint64_t seed = 20200612;  // the resampling generator's seed: fixed, so intervals reproduce
  double level = 0.95;
};

// An estimate with its interval [lo, hi].
struct Interval {
  double estimate = 0, lo = 0, hi = 0;
  int64_t n = 0;  // the values it came from (the first sample's, for bootstrap_ci of several)
  // Half the interval's width relative to the estimate: (hi - lo) / 2 / |estimate|.
  double rel_half_width() const;
  bool contains(double v) const { return lo <= v && v <= hi; }
};

// The median (the mean of the two middle values for an even count); throws xg::Error when empty.
double median(std::vector<double> values);

// The median of `values` with its percentile-bootstrap interval.
Interval median_ci(const std::vector<double>& values, const BootstrapOptions& options = {});

// Any statistic of K independent samples (say, one per depth), each resampled on its own with
// replacement: statistic(samples) is the estimate, and the quantiles of statistic(resampled)
// over the resamples are the interval. One generator, seeded from options.seed, draws every
// index, sample by sample in order.
using Statistic = std::function<double(const std::vector<std::vector<double>>&)>;
Interval bootstrap_ci(const std::vector<std::vector<double>>& samples, const Statistic& statistic,
                      const BootstrapOptions& options = {});

}  // namespace xg::experiments

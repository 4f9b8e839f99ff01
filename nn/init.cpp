// Initialisers: each draws a fresh tensor and copies it into t's storage.
#include "nn/init.hpp"

#include <cmath>

namespace xg::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  check(t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got ", shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

void uniform_(Tensor& t, double lo, double hi, Generator* gen) { t.copy_(uniform(t.shape(), lo, hi, t.dtype(), gen)); }
void normal_(Tensor& t, double mean, double std, Generator* gen) { t.copy_(normal(t.shape(), mean, std, t.dtype(), gen)); }
void zeros_(Tensor& t) { t.fill_(0); }
void ones_(Tensor& t) { t.fill_(1); }
void constant_(Tensor& t, double value) { t.fill_(value); }

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  const double fan_in = static_cast<double>(fans(t).first);
  const double bound = std::sqrt(6.0 / ((1 + a * a) * fan_in));
  uniform_(t, -bound, bound, gen);
}

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  uniform_(t, -bound, bound, gen);
}

void xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}

}  // namespace xg::nn::init

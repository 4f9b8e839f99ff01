// The portable generator, random factories, and dropout.
#include "autograd/random.hpp"

#include <cmath>
#include <sstream>

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"

namespace xg {

void Generator::manual_seed(uint64_t seed) {
  engine_.seed(seed);
  has_spare_ = false;
  spare_ = 0;
}

double Generator::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller on (0, 1]: u1 never 0, so log(u1) is finite.
  const double u1 = 1.0 - uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  constexpr double kTwoPi = 6.28318530717958647692;
  spare_ = r * std::sin(kTwoPi * u2);
  has_spare_ = true;
  return r * std::cos(kTwoPi * u2);
}

std::string Generator::state() const {
  std::ostringstream os;
  os << engine_ << ' ' << has_spare_ << ' ';
  os.precision(17);
  os << spare_;
  return os.str();
}

void Generator::set_state(const std::string& s) {
  std::istringstream is(s);
  is >> engine_ >> has_spare_ >> spare_;
  check(!is.fail(), "Generator::set_state: malformed state string");
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

template <class F>
static Tensor fill_random(const Shape& shape, Dtype dtype, const char* op, F draw) {
  Tensor t = empty(shape, dtype);
  dispatch_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    // Serial on purpose: the sequence must not depend on the thread count.
    for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(draw());
  });
  return t;
}

static Generator& pick(Generator* gen) { return gen ? *gen : default_generator(); }

Tensor rand(const Shape& shape, Dtype dtype, Generator* gen) {
  Generator& g = pick(gen);
  return fill_random(shape, dtype, "rand", [&] { return g.uniform(); });
}

Tensor randn(const Shape& shape, Dtype dtype, Generator* gen) {
  Generator& g = pick(gen);
  return fill_random(shape, dtype, "randn", [&] { return g.normal(); });
}

Tensor uniform(const Shape& shape, double lo, double hi, Dtype dtype, Generator* gen) {
  check(lo <= hi, "uniform: lower bound ", lo, " is above upper bound ", hi);
  Generator& g = pick(gen);
  return fill_random(shape, dtype, "uniform", [&] { return lo + (hi - lo) * g.uniform(); });
}

Tensor normal(const Shape& shape, double mean, double std, Dtype dtype, Generator* gen) {
  check(std >= 0, "normal: std must be non-negative, got ", std);
  Generator& g = pick(gen);
  return fill_random(shape, dtype, "normal", [&] { return mean + std * g.normal(); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  check(low < high, "randint: empty range [", low, ", ", high, ")");
  Generator& g = pick(gen);
  Tensor t = empty(shape, kInt64);
  int64_t* p = t.data<int64_t>();
  const uint64_t span = static_cast<uint64_t>(high - low);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = low + static_cast<int64_t>(g.next_u64() % span);
  return t;
}

Tensor randperm(int64_t n, Generator* gen) {
  check(n >= 0, "randperm: n must be non-negative, got ", n);
  Generator& g = pick(gen);
  Tensor t = arange(static_cast<double>(n), kInt64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(i + 1))]);
  return t;
}

// out = x * mask / (1 - p), mask ~ Bernoulli(1 - p)   =>   dx = g * mask / (1 - p)
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  check(p >= 0 && p <= 1, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, zeros({}, x.dtype()));
  Generator& g = pick(gen);
  Tensor scale = empty(x.shape(), x.dtype());  // mask / (1 - p): 0 or 1/(1-p)
  dispatch_float(x.dtype(), "dropout", [&](auto tag) {
    using T = decltype(tag);
    T* s = scale.data<T>();
    const T keep = static_cast<T>(1.0 / (1.0 - p));
    for (int64_t i = 0, n = x.numel(); i < n; ++i) s[i] = g.uniform() < p ? T(0) : keep;
  });
  return mul(x, scale);
}

}  // namespace xg

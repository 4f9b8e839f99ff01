// Random numbers: one documented, portable generator (std::mt19937_64, whose output the
// C++ standard fixes, with our own uniform and Box-Muller normal transforms, so the
// same seed gives the same tensors with any compiler and standard library), and the ops
// that use it: rand, randn, randint, dropout.
#pragma once

#include <cstdint>
#include <random>

#include "autograd/tensor.hpp"

namespace xg {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64() { return engine_(); }
  double uniform();  // [0, 1) with 53 random bits
  double normal();   // N(0, 1) by Box-Muller (the spare value is kept for the next call)
  // The whole state, for checkpoints: engine text plus the spare normal.
  std::string state() const;
  void set_state(const std::string& s);

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// The default generator (one per process; seeded with 0 until manual_seed is called).
Generator& default_generator();
void manual_seed(uint64_t seed);

Tensor rand(const Shape& shape, Dtype dtype = kFloat32, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, Dtype dtype = kFloat32, Generator* gen = nullptr);  // N(0, 1)
Tensor uniform(const Shape& shape, double lo, double hi, Dtype dtype = kFloat32, Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, Dtype dtype = kFloat32, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);  // int64 in [low, high)
// Random permutation of 0..n-1 (int64).
Tensor randperm(int64_t n, Generator* gen = nullptr);

// Zeroes each element with probability p and scales the rest by 1/(1-p) when training;
// the identity otherwise   =>   dx = g * mask / (1 - p)
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace xg

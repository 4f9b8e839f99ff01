// Shared helpers for the micro-benchmarks: random float32 inputs and throughput counters.
#pragma once

#include <benchmark/benchmark.h>

#include "xgrad.hpp"

namespace xg::bench {

// A float32 tensor of N(0, 1) values (fixed seed, so every run sees the same data).
inline Tensor randn32(const Shape& shape, uint64_t seed = 0) {
  Generator gen(seed);
  return randn(shape, kFloat32, &gen);
}

// Reports GFLOP/s from the work of one iteration (rates divide by the measured time).
inline void set_gflops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// Reports GB/s (10^9 bytes) from the bytes one iteration reads plus writes.
inline void set_gbps(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace xg::bench

// Shared helpers for the micro-benchmarks: the three reference configs, random float32 inputs
// and throughput counters.
#pragma once

#include <benchmark/benchmark.h>

#include <array>

#include "xgrad.hpp"

namespace xg::bench {

// The three reference configs of the LLaMA-style byte LM that the step benchmark trains
// (bench/README.md): model dim d, layers L, heads H, sequence T, batch B. Head dim hs = d / H;
// rows = B * T tokens; d_ff = ffn_dim(d).
struct RefConfig {
  const char* name;
  int64_t d, L, H, T, B;
  int64_t hs() const { return d / H; }
  int64_t rows() const { return B * T; }
};
inline constexpr std::array<RefConfig, 3> kRefConfigs{{
    {"tiny", 64, 2, 2, 64, 8},
    {"small", 256, 4, 4, 128, 8},
    {"medium", 512, 8, 8, 256, 4},
}};

// SwiGLU's hidden size: 8/3 d rounded up to a multiple of 64 (64 -> 192, 256 -> 704, 512 -> 1408),
// as bench/torch_step.py's ffn_dim.
inline constexpr int64_t ffn_dim(int64_t d) { return ((8 * d + 2) / 3 + 63) / 64 * 64; }

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

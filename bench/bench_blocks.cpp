// A decoded token's products with a blocked weight (autograd/blocks.hpp): x [1, K] w^T for
// w [N, K] as float32, q8_0, q4_0, a k-quant (q2_k ... q6_k), q4_1, q5_0, q5_1, iq4_nl or
// iq4_xs (random blocks for the last ten, as xgrad does not make them), one thread, the weights read from memory
// (enough copies to pass the caches, taken in turn; from_memory 0: one copy, from the caches
// where it fits). Decoding is these products alone, and it runs at the speed the weights stream
// in: GB/s counts the bytes the weight is stored in, "weights/s" its values.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "autograd/ops.hpp"
#include "bench/bench_util.hpp"

namespace {

// A [N, K] weight of random blocks of a dtype xgrad reads but does not make (a k-quant, q4_1,
// q5_0, q5_1, iq4_nl or iq4_xs): random codes and scales under small finite half scales (and mins).
xg::Tensor random_read_only(xg::Dtype d, int64_t N, int64_t K, uint64_t seed) {
  xg::Tensor w = xg::empty({N, K}, d);
  auto* p = static_cast<uint8_t*>(w.raw_data());
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < xg::storage_bytes(d, N * K); ++i) p[i] = static_cast<uint8_t>(rng());
  const uint16_t h = xg::float_to_half(1e-4f);
  const bool has_min = d == xg::kQ4_K || d == xg::kQ5_K || d == xg::kQ4_1 || d == xg::kQ5_1 || d == xg::kQ2_K;
  const int64_t at = d == xg::kQ6_K ? 208 : d == xg::kQ3_K ? 108 : d == xg::kQ2_K ? 80 : 0;  // the half d
  for (int64_t b = 0; b < N * K / xg::block_values(d); ++b) {
    uint8_t* blk = p + b * xg::block_bytes(d);
    std::memcpy(blk + at, &h, 2);
    if (has_min) std::memcpy(blk + at + 2, &h, 2);
  }
  return w;
}

// dtype: 0 float32, 1 q8_0, 2 q4_0, 3 q4_k, 4 q5_k, 5 q6_k, 6 q4_1, 7 q5_0, 8 q5_1, 9 iq4_nl, 10 iq4_xs,
// 11 q2_k, 12 q3_k
void BM_LinearOneRowBlocked(benchmark::State& state) {
  const xg::Dtype all[] = {xg::kFloat32, xg::kQ8_0, xg::kQ4_0,   xg::kQ4_K,   xg::kQ5_K, xg::kQ6_K, xg::kQ4_1,
                           xg::kQ5_0,    xg::kQ5_1, xg::kIQ4_NL, xg::kIQ4_XS, xg::kQ2_K, xg::kQ3_K};
  const xg::Dtype dtype = all[state.range(0)];
  const int64_t N = state.range(1), K = state.range(2), from_memory = state.range(3);
  const double bytes = static_cast<double>(xg::storage_bytes(dtype, N * K));
  const int64_t copies = from_memory ? std::max<int64_t>(1, static_cast<int64_t>((256 << 20) / bytes)) : 1;
  std::vector<xg::Tensor> ws;
  for (int64_t i = 0; i < copies; ++i)
    ws.push_back(xg::is_read_only_blocked(dtype) ? random_read_only(dtype, N, K, 2 + static_cast<uint64_t>(i))
                                                 : xg::bench::randn32({N, K}, 2 + static_cast<uint64_t>(i)).to(dtype));
  const xg::Tensor x = xg::bench::randn32({1, K}, 1);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  xg::NoGradGuard no_grad;
  int64_t i = 0;
  for (auto _ : state) {
    xg::Tensor y = xg::linear(x, ws[static_cast<std::size_t>(i++ % copies)]);
    benchmark::DoNotOptimize(y.raw_data());
  }
  omp_set_num_threads(threads);
  xg::bench::set_gbps(state, bytes);
  state.counters["weights/s"] = benchmark::Counter(static_cast<double>(N * K) * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
}
// A 135M-parameter model's gate/up (1536 x 576) and down (576 x 1536: what llama.cpp's Q4_K_M of
// such a model stores as q5_0), a 768-wide model's gate/up (2048 x 768: rows of whole k-quant
// super-blocks) and a 7B model's q (4096 x 4096)
BENCHMARK(BM_LinearOneRowBlocked)
    ->ArgsProduct({{0, 1, 2, 6, 7, 8, 9}, {1536}, {576}, {0, 1}})
    ->ArgsProduct({{0, 1, 2, 6, 7, 8, 9}, {576}, {1536}, {1}})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 10, 11, 12}, {2048}, {768}, {0, 1}})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {4096}, {4096}, {1}})
    ->ArgNames({"dtype", "N", "K", "from_memory"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

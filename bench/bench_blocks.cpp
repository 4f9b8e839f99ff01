// A decoded token's products with a blocked weight (autograd/blocks.hpp): x [1, K] w^T for
// w [N, K] as float32, q8_0 or q4_0, one thread, the weights read from memory (enough copies to
// pass the caches, taken in turn; from_memory 0: one copy, from the caches where it fits). Decoding is these products alone, and it runs at the speed
// the weights stream in: GB/s counts the bytes the weight is stored in, "weights/s" its values.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "autograd/ops.hpp"
#include "bench/bench_util.hpp"

namespace {

// dtype: 0 float32, 1 q8_0, 2 q4_0
void BM_LinearOneRowBlocked(benchmark::State& state) {
  const xg::Dtype dtype = state.range(0) == 0 ? xg::kFloat32 : state.range(0) == 1 ? xg::kQ8_0 : xg::kQ4_0;
  const int64_t N = state.range(1), K = state.range(2), from_memory = state.range(3);
  const double bytes = static_cast<double>(xg::storage_bytes(dtype, N * K));
  const int64_t copies = from_memory ? std::max<int64_t>(1, static_cast<int64_t>((256 << 20) / bytes)) : 1;
  std::vector<xg::Tensor> ws;
  for (int64_t i = 0; i < copies; ++i) ws.push_back(xg::bench::randn32({N, K}, 2 + static_cast<uint64_t>(i)).to(dtype));
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
// A 135M-parameter model's gate/up (1536 x 576) and down (576 x 1536), and a 7B model's q (4096 x 4096)
BENCHMARK(BM_LinearOneRowBlocked)
    ->ArgsProduct({{0, 1, 2}, {1536}, {576}, {0, 1}})
    ->ArgsProduct({{0, 1, 2}, {576}, {1536}, {1}})
    ->ArgsProduct({{0, 1, 2}, {4096}, {4096}, {1}})
    ->ArgNames({"dtype", "N", "K", "from_memory"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

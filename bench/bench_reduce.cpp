// Sum reductions over the last dim (contiguous rows) and over dim 0 (strided columns) of a
// float32 [R, C] array. GB/s counts the bytes read plus written once.
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;

// x: [R, C] -> [R]
void BM_SumLastDim(benchmark::State& state) {
  const int64_t R = state.range(0), C = state.range(1);
  Tensor x = xg::bench::randn32({R, C}, 1);
  for (auto _ : state) {
    Tensor y = xg::sum(x, {-1});
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * (R * C + R));
}
BENCHMARK(BM_SumLastDim)->Args({4096, 1024})->ArgNames({"R", "C"})->UseRealTime()->Unit(benchmark::kMicrosecond);

// x: [R, C] -> [C]
void BM_SumDim0(benchmark::State& state) {
  const int64_t R = state.range(0), C = state.range(1);
  Tensor x = xg::bench::randn32({R, C}, 1);
  for (auto _ : state) {
    Tensor y = xg::sum(x, {0});
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * (R * C + C));
}
BENCHMARK(BM_SumDim0)->Args({4096, 1024})->ArgNames({"R", "C"})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

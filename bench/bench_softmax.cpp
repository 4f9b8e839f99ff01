// Softmax over the last dim of attention-score rows, [B*H*T, T] = [8*8*256, 256] float32:
// forward, and forward + backward. GB/s counts the bytes read plus written once per pass.
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;

// x: [rows, T] -> softmax over T
void BM_SoftmaxForward(benchmark::State& state) {
  const int64_t rows = state.range(0), T = state.range(1);
  Tensor x = xg::bench::randn32({rows, T}, 1);
  for (auto _ : state) {
    Tensor y = xg::softmax(x, -1);
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * 2 * rows * T);  // read x, write y
}
BENCHMARK(BM_SoftmaxForward)->Args({8 * 8 * 256, 256})->ArgNames({"rows", "T"})->UseRealTime()->Unit(benchmark::kMicrosecond);

// y = softmax(x), then backward dx = y * (g - sum(g * y))
void BM_SoftmaxForwardBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), T = state.range(1);
  Tensor x = xg::bench::randn32({rows, T}, 1).requires_grad_();
  Tensor g = xg::bench::randn32({rows, T}, 2);
  for (auto _ : state) {
    Tensor y = xg::softmax(x, -1);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.zero_grad();
  }
  xg::bench::set_gbps(state, 4.0 * 5 * rows * T);  // forward: x, y; backward: g, y, dx
}
BENCHMARK(BM_SoftmaxForwardBackward)->Args({8 * 8 * 256, 256})->ArgNames({"rows", "T"})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

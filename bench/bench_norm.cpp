// RMSNorm (xg::rms_norm, the fused row kernel) over [B*T, d] rows of the three reference configs:
// forward, and forward + backward (dx and dweight). GB/s counts bytes read plus written once.
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;

// x: [B*T, d], one shape per reference config
void norm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "C"});
  for (const auto& c : xg::bench::kRefConfigs) b->Args({c.rows(), c.d});
}

// x: [rows, C], w: [C] -> x / sqrt(mean(x^2) + eps) * w
void BM_RMSNormForward(benchmark::State& state) {
  const int64_t rows = state.range(0), C = state.range(1);
  Tensor x = xg::bench::randn32({rows, C}, 1), w = xg::bench::randn32({C}, 2);
  for (auto _ : state) {
    Tensor y = xg::rms_norm(x, w, 1e-6);
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * 2 * rows * C);  // read x, write y (w and the row stats are negligible)
}
BENCHMARK(BM_RMSNormForward)->Apply(norm_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same forward, then backward: dx = rstd * (g w - x_hat * mean(g w x_hat)), dw = sum_rows(g x_hat)
void BM_RMSNormForwardBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), C = state.range(1);
  Tensor x = xg::bench::randn32({rows, C}, 1).requires_grad_(), w = xg::bench::randn32({C}, 2).requires_grad_();
  Tensor g = xg::bench::randn32({rows, C}, 3);
  for (auto _ : state) {
    Tensor y = xg::rms_norm(x, w, 1e-6);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.zero_grad();
    w.zero_grad();
  }
  xg::bench::set_gbps(state, 4.0 * 5 * rows * C);  // forward: x, y; backward: g, x, dx
}
BENCHMARK(BM_RMSNormForwardBackward)->Apply(norm_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

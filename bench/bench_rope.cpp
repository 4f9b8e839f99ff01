// Rotate-half RoPE (xg::apply_rope, the fused op RotaryEmbedding calls) on the q of the three
// reference configs, [B, H, T, hs]: forward, and forward + backward. GB/s: bytes read plus written.
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;

// q: [B, H, T, hs], one shape per reference config
void rope_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "H", "T", "hs"});
  for (const auto& c : xg::bench::kRefConfigs) b->Args({c.B, c.H, c.T, c.hs()});
}

// x: [B, H, T, hs], cos/sin: [T, hs/2] -> each pair (x[i], x[i + hs/2]) rotated by t * freq_i
void BM_RopeForward(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1), T = state.range(2), hs = state.range(3);
  Tensor x = xg::bench::randn32({B, H, T, hs}, 1);
  auto [cos, sin] = xg::rope_tables(hs, T);
  for (auto _ : state) {
    Tensor y = xg::apply_rope(x, cos, sin, 0, xg::RopeLayout::RotateHalf);
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * 2 * x.numel());  // read x, write y (the [T, hs/2] tables stay in cache)
}
BENCHMARK(BM_RopeForward)->Apply(rope_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same forward, then backward: dx = the inverse rotation of g
void BM_RopeForwardBackward(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1), T = state.range(2), hs = state.range(3);
  Tensor x = xg::bench::randn32({B, H, T, hs}, 1).requires_grad_();
  Tensor g = xg::bench::randn32({B, H, T, hs}, 2);
  auto [cos, sin] = xg::rope_tables(hs, T);
  for (auto _ : state) {
    Tensor y = xg::apply_rope(x, cos, sin, 0, xg::RopeLayout::RotateHalf);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.zero_grad();
  }
  xg::bench::set_gbps(state, 4.0 * 4 * x.numel());  // forward: x, y; backward: g, dx
}
BENCHMARK(BM_RopeForwardBackward)->Apply(rope_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

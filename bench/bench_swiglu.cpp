// SwiGLU at the three reference configs: the activation part silu(gate) * up on [B*T, d_ff] (GB/s),
// and the whole nn::SwiGLU FFN module, down(silu(gate(x)) * up(x)) on [B, T, d] (GFLOP/s).
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;
using xg::bench::ffn_dim;
using xg::bench::randn32;

// gate, up: [B*T, d_ff], one shape per reference config
void act_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "F"});
  for (const auto& c : xg::bench::kRefConfigs) b->Args({c.rows(), ffn_dim(c.d)});
}

// The activation as nn::SwiGLU runs it: the fused xg::swiglu(gate, up), one pass each way.
// GB/s counts that pass's bytes (forward: read gate and up, write out; backward: read g, gate
// and up, write dgate and dup). The two-op silu(gate) * up is timed below as SiLUTimesUp.
void BM_SwiGLUActForward(benchmark::State& state) {
  const int64_t rows = state.range(0), F = state.range(1);
  Tensor gate = randn32({rows, F}, 1), up = randn32({rows, F}, 2);
  for (auto _ : state) {
    Tensor y = xg::swiglu(gate, up);
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * 3 * rows * F);
}
BENCHMARK(BM_SwiGLUActForward)->Apply(act_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// y = silu(gate) * up   =>   dup = g * silu(gate),  dgate = g * up * s * (1 + gate * (1 - s)), s = sigmoid(gate)
void BM_SwiGLUActForwardBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), F = state.range(1);
  Tensor gate = randn32({rows, F}, 1).requires_grad_(), up = randn32({rows, F}, 2).requires_grad_();
  Tensor g = randn32({rows, F}, 3);
  for (auto _ : state) {
    Tensor y = xg::swiglu(gate, up);
    y.backward(g);
    benchmark::DoNotOptimize(gate.grad().raw_data());
    gate.zero_grad();
    up.zero_grad();
  }
  xg::bench::set_gbps(state, 4.0 * 8 * rows * F);  // forward: gate, up, y; backward: g, gate, up, dgate, dup
}
BENCHMARK(BM_SwiGLUActForwardBackward)->Apply(act_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same forward as two ops, xg::silu then xg::mul (what a user writing silu(gate) * up
// gets; two passes and a [rows, F] temporary), bytes counted as for the fused pass.
void BM_SiLUTimesUpForward(benchmark::State& state) {
  const int64_t rows = state.range(0), F = state.range(1);
  Tensor gate = randn32({rows, F}, 1), up = randn32({rows, F}, 2);
  for (auto _ : state) {
    Tensor y = xg::silu(gate) * up;
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * 3 * rows * F);
}
BENCHMARK(BM_SiLUTimesUpForward)->Apply(act_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// x: [B, T, d], one shape per reference config (d_ff = ffn_dim(d))
void ffn_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "T", "d", "F"});
  for (const auto& c : xg::bench::kRefConfigs) b->Args({c.B, c.T, c.d, ffn_dim(c.d)});
}

// FLOPs: three products of 2 * B*T * d * F each (gate, up: d -> F; down: F -> d); the
// elementwise silu and product are not counted.
double ffn_flops(int64_t B, int64_t T, int64_t d, int64_t F) { return 3 * 2.0 * static_cast<double>(B * T * d * F); }

// nn::SwiGLU(d, F, bias = false) forward, under NoGradGuard (no graph recorded; the
// backward case below times the training forward)
void BM_SwiGLUFFNForward(benchmark::State& state) {
  const int64_t B = state.range(0), T = state.range(1), d = state.range(2), F = state.range(3);
  xg::nn::SwiGLU ffn(d, F, false);
  Tensor x = randn32({B, T, d}, 1);
  xg::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = ffn(x);
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gflops(state, ffn_flops(B, T, d, F));
}
BENCHMARK(BM_SwiGLUFFNForward)->Apply(ffn_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same forward, then backward to x and the three weights: each product's two backward
// products (input and weight gradient), 3x the forward FLOPs in all.
void BM_SwiGLUFFNForwardBackward(benchmark::State& state) {
  const int64_t B = state.range(0), T = state.range(1), d = state.range(2), F = state.range(3);
  xg::nn::SwiGLU ffn(d, F, false);
  Tensor x = randn32({B, T, d}, 1).requires_grad_();
  Tensor g = randn32({B, T, d}, 2);
  for (auto _ : state) {
    Tensor y = ffn(x);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.zero_grad();
    ffn.zero_grad();
  }
  xg::bench::set_gflops(state, 3 * ffn_flops(B, T, d, F));
}
BENCHMARK(BM_SwiGLUFFNForwardBackward)->Apply(ffn_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

// Matrix products: xg::matmul on square sizes, xg::linear on the FFN shapes of a small
// LLaMA-style model (forward, and forward + backward), and raw cblas_sgemm as the
// machine's peak. All float32; GFLOP/s counts 2*M*N*K per product.
#include <cblas.h>

#include <vector>

#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;
using xg::bench::randn32;
using xg::bench::set_gflops;

// [N, N] @ [N, N]
void BM_MatmulForward(benchmark::State& state) {
  const int64_t N = state.range(0);
  Tensor a = randn32({N, N}, 1), b = randn32({N, N}, 2);
  for (auto _ : state) {
    Tensor y = xg::matmul(a, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_gflops(state, 2.0 * N * N * N);
}
BENCHMARK(BM_MatmulForward)->Arg(256)->Arg(512)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

// y = a @ b, then backward: da = g @ b^T, db = a^T @ g (three products)
void BM_MatmulForwardBackward(benchmark::State& state) {
  const int64_t N = state.range(0);
  Tensor a = randn32({N, N}, 1).requires_grad_(), b = randn32({N, N}, 2).requires_grad_();
  Tensor g = randn32({N, N}, 3);
  for (auto _ : state) {
    Tensor y = xg::matmul(a, b);
    y.backward(g);
    benchmark::DoNotOptimize(a.grad().raw_data());
    a.zero_grad();
    b.zero_grad();
  }
  set_gflops(state, 3 * 2.0 * N * N * N);
}
BENCHMARK(BM_MatmulForwardBackward)->Arg(256)->Arg(512)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

// The FFN projections of a LLaMA-style block with B*T = 1024 tokens:
// C = 256 (d_ff 704) and C = 512 (d_ff 1408), up (C -> d_ff) and down (d_ff -> C).
void linear_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "in", "out"});
  for (auto [C, F] : {std::pair<int64_t, int64_t>{256, 704}, {512, 1408}}) {
    b->Args({1024, C, F});
    b->Args({1024, F, C});
  }
}

// x: [M, in], w: [out, in] -> x @ w^T: [M, out]
void BM_LinearForward(benchmark::State& state) {
  const int64_t M = state.range(0), in = state.range(1), out = state.range(2);
  Tensor x = randn32({M, in}, 1), w = randn32({out, in}, 2);
  for (auto _ : state) {
    Tensor y = xg::linear(x, w);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_gflops(state, 2.0 * M * in * out);
}
BENCHMARK(BM_LinearForward)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// y = x @ w^T, then backward: dx = g @ w, dw = g^T @ x
void BM_LinearForwardBackward(benchmark::State& state) {
  const int64_t M = state.range(0), in = state.range(1), out = state.range(2);
  Tensor x = randn32({M, in}, 1).requires_grad_(), w = randn32({out, in}, 2).requires_grad_();
  Tensor g = randn32({M, out}, 3);
  for (auto _ : state) {
    Tensor y = xg::linear(x, w);
    y.backward(g);
    benchmark::DoNotOptimize(w.grad().raw_data());
    x.zero_grad();
    w.zero_grad();
  }
  set_gflops(state, 3 * 2.0 * M * in * out);
}
BENCHMARK(BM_LinearForwardBackward)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// The ceiling: cblas_sgemm into a preallocated output, no tensor machinery.
void BM_SgemmRaw(benchmark::State& state) {
  const int N = static_cast<int>(state.range(0));
  Tensor a = randn32({N, N}, 1), b = randn32({N, N}, 2);
  std::vector<float> c(static_cast<std::size_t>(N) * N);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a.data<float>(), N, b.data<float>(), N,
                0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
  }
  set_gflops(state, 2.0 * N * N * N);
}
BENCHMARK(BM_SgemmRaw)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

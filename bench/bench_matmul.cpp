// Matrix products: xg::matmul on square sizes, xg::linear on every projection shape of the
// three reference configs (forward, backward alone, forward + backward), raw cblas_sgemm
// as the machine's peak, and raw cblas_sgemm against dnnl_sgemm on one thread from small
// shapes to large (where gemm_backend.hpp's rule 3 draws its 2^23 line), one-row products
// (a decoded token) on xgrad's kernel against dnnl_sgemm, and the cores' float32 FMA peak
// that every sgemm rate is a fraction of; bf16 products (bf16 tensors, and float32 ones under
// xg::autocast) beside them. GFLOP/s counts 2*M*N*K per product.
#include <cblas.h>
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
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

// The projections of the reference configs, x: [M = B*T, in] @ W^T with W: [out, in]:
// w_q/w_k/w_v/w_o (d -> d), the FFN's gate and up (d -> d_ff) and down (d_ff -> d), and the LM
// head (d -> 256). tiny: M 512, d 64, d_ff 192; small: M 1024, d 256, d_ff 704 (its LM head
// is [1024, 256] x [256, 256]^T, the same shape as its qkv/o, so it runs once); medium:
// M 1024, d 512, d_ff 1408.
void linear_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "in", "out"});
  for (const auto& c : xg::bench::kRefConfigs) {
    const int64_t M = c.rows(), d = c.d, F = xg::bench::ffn_dim(d);
    b->Args({M, d, d});  // qkv / o
    b->Args({M, d, F});  // gate / up
    b->Args({M, F, d});  // down
    if (d != 256) b->Args({M, d, 256});  // LM head
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
BENCHMARK(BM_LinearForward)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// y = x @ w^T, then backward: dx = g @ w, dw = g^T @ x. With bf16, each pass under
// xg::autocast as a --bf16 step runs its projections: float32 x and w rounded to bf16 (w once
// per autocast scope, x every call), float32 sums and gradients.
void linear_forward_backward(benchmark::State& state, bool bf16) {
  const int64_t M = state.range(0), in = state.range(1), out = state.range(2);
  Tensor x = randn32({M, in}, 1).requires_grad_(), w = randn32({out, in}, 2).requires_grad_();
  Tensor g = randn32({M, out}, 3);
  for (auto _ : state) {
    xg::autocast mixed(bf16);  // one scope per pass, as the step bench opens one per step
    Tensor y = xg::linear(x, w);
    y.backward(g);
    benchmark::DoNotOptimize(w.grad().raw_data());
    x.zero_grad();
    w.zero_grad();
  }
  set_gflops(state, 3 * 2.0 * M * in * out);
  if (bf16) state.SetLabel(xg::bf16_gemm_description());
}
void BM_LinearForwardBackward(benchmark::State& state) { linear_forward_backward(state, false); }
BENCHMARK(BM_LinearForwardBackward)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// bf16 products (AVX512-BF16 or AMX through oneDNN where the CPU has them, else both operands
// widened to float32: gemm_backend.hpp). [N, N] @ [N, N] on bf16 tensors: the products' own
// rate, beside BM_MatmulForward's float32 one.
void BM_MatmulBf16Forward(benchmark::State& state) {
  const int64_t N = state.range(0);
  Tensor a = randn32({N, N}, 1).to(xg::kBFloat16), b = randn32({N, N}, 2).to(xg::kBFloat16);
  for (auto _ : state) {
    Tensor y = xg::matmul(a, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_gflops(state, 2.0 * N * N * N);
  state.SetLabel(xg::bf16_gemm_description());
}
BENCHMARK(BM_MatmulBf16Forward)->Arg(256)->Arg(512)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_LinearAutocastForwardBackward(benchmark::State& state) { linear_forward_backward(state, true); }
BENCHMARK(BM_LinearAutocastForwardBackward)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The backward alone of y = x @ w^T (graph built once, kept with retain_graph): the two
// products dx = g @ w ([M, out] x [out, in]) and dw = g^T @ x ([out, M] x [M, in]).
void BM_LinearBackward(benchmark::State& state) {
  const int64_t M = state.range(0), in = state.range(1), out = state.range(2);
  Tensor x = randn32({M, in}, 1).requires_grad_(), w = randn32({out, in}, 2).requires_grad_();
  Tensor g = randn32({M, out}, 3);
  Tensor y = xg::linear(x, w);
  for (auto _ : state) {
    y.backward(g, /*retain_graph=*/true);
    benchmark::DoNotOptimize(w.grad().raw_data());
    x.zero_grad();
    w.zero_grad();
  }
  set_gflops(state, 2 * 2.0 * M * in * out);
}
BENCHMARK(BM_LinearBackward)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

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

// One library's sgemm on one thread (as each thread's part of a split product, and each
// attention segment, runs), C = op(A) op(B) into a preallocated C, beta 0; lib 0 is OpenBLAS's
// cblas_sgemm, 1 oneDNN's dnnl_sgemm. op: 0 NN (dx = g W), 1 NT (x W^T), 2 TN (dW = g^T x).
// Shapes: attention's backward segments (32 query rows, 128 keys, head size 64), a d 64
// model's halves of its layers (tiny: 256 rows), then up through 2^23 multiply-adds to small's
// and medium's halves.
void BM_SgemmOneThread(benchmark::State& state) {
  const bool onednn = state.range(0) == 1, ta = state.range(1) == 2, tb = state.range(1) == 1;
  const int64_t M = state.range(2), N = state.range(3), K = state.range(4);
  Tensor a = randn32({M, K}, 1), b = randn32({K, N}, 2);
  std::vector<float> c(static_cast<std::size_t>(M * N));
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);  // OpenBLAS's OpenMP build and oneDNN both follow it
  for (auto _ : state) {
    if (onednn)
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, 0.0f,
                 c.data(), N);
    else
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                  static_cast<int>(N), static_cast<int>(K), 1.0f, a.data<float>(), static_cast<int>(lda),
                  b.data<float>(), static_cast<int>(ldb), 0.0f, c.data(), static_cast<int>(N));
    benchmark::DoNotOptimize(c.data());
  }
  omp_set_num_threads(threads);
  set_gflops(state, 2.0 * M * N * K);
}
void one_thread_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"lib", "op", "M", "N", "K"});
  const std::vector<std::vector<int64_t>> shapes = {
      {1, 32, 128, 64},    {0, 32, 64, 128},    {2, 128, 64, 32},    // attention: scores, dQ, dK (0.3 M)
      {1, 256, 64, 64},    {1, 256, 192, 64},   {2, 192, 64, 512},   // tiny's halves (1-6 M)
      {0, 128, 128, 256},  {2, 512, 128, 64},   {1, 256, 128, 256},  // 4.2 M, 4.2 M, 8.4 M
      {0, 256, 256, 256},  {2, 512, 256, 256},  {1, 512, 256, 256},  // 16.8 M, 33.6 M, small's half (33.6 M)
      {1, 512, 512, 512},  {2, 256, 512, 1024}};                     // medium's halves (134 M)
  for (const auto& s : shapes)
    for (int64_t lib : {0, 1}) b->Args({lib, s[0], s[1], s[2], s[3]});
}
BENCHMARK(BM_SgemmOneThread)->Apply(one_thread_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// One row x [1, K] times w^T, w [N, K], on one thread (a decoded token's projections): lib 0
// is xg::linear (xgrad's matrix-vector kernel, detail/gemv.hpp), 1 dnnl_sgemm called directly
// (which xg::linear ran before). from_memory 1 cycles through copies of w totalling 256 MB,
// beyond the caches, as a model too large for them reads its weights per token; 0 reuses one
// copy (from the cache). Counter GB/s: w's bytes per second.
void BM_LinearOneRow(benchmark::State& state) {
  const bool onednn = state.range(0) == 1, from_memory = state.range(3) == 1;
  const int64_t N = state.range(1), K = state.range(2);
  const int64_t copies = from_memory ? std::max<int64_t>(1, (int64_t(256) << 20) / (N * K * 4)) : 1;
  std::vector<Tensor> ws;
  for (int64_t i = 0; i < copies; ++i) ws.push_back(randn32({N, K}, 2 + static_cast<uint64_t>(i)));
  const Tensor x = randn32({1, K}, 1);
  std::vector<float> c(static_cast<std::size_t>(N));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  xg::NoGradGuard no_grad;
  int64_t i = 0;
  for (auto _ : state) {
    const Tensor& w = ws[static_cast<std::size_t>(i++ % copies)];
    if (onednn) {
      dnnl_sgemm('N', 'T', 1, N, K, 1.0f, x.data<float>(), K, w.data<float>(), K, 0.0f, c.data(), N);
      benchmark::DoNotOptimize(c.data());
    } else {
      Tensor y = xg::linear(x, w);
      benchmark::DoNotOptimize(y.raw_data());
    }
  }
  omp_set_num_threads(threads);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(N * K * 4) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
void one_row_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"lib", "N", "K", "from_memory"});
  // A 135M-parameter model's q/o (576 x 576), k/v (192 x 576), gate/up (1536 x 576), down (576 x 1536)
  for (const auto& s : std::vector<std::vector<int64_t>>{{576, 576}, {192, 576}, {1536, 576}, {576, 1536}})
    for (int64_t mem : {0, 1})
      for (int64_t lib : {0, 1}) b->Args({lib, s[0], s[1], mem});
}
BENCHMARK(BM_LinearOneRow)->Apply(one_row_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The float32 FMA peak of one and of two cores (Threads), with the widest vectors this build
// targets (-march=native): 12 independent chains of vector FMAs per thread, more than 2 FMA
// units x 4 cycles of latency keep in flight, and nothing else. No gemm kernel can pass it;
// bench/README.md quotes OpenBLAS's 2048^3 sgemm on 2 threads against the 2-thread figure.
void BM_FmaPeak(benchmark::State& state) {
#if defined(__AVX512F__)
  using V = __m512;
  constexpr int kLanes = 16;
  auto fma = [](V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); };
  auto set = [](float x) { return _mm512_set1_ps(x); };
#elif defined(__FMA__)
  using V = __m256;
  constexpr int kLanes = 8;
  auto fma = [](V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); };
  auto set = [](float x) { return _mm256_set1_ps(x); };
#endif
#if defined(__AVX512F__) || defined(__FMA__)
  constexpr int kChains = 12, kRounds = 100000;
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = set(1.0f + 1e-7f * static_cast<float>(i));
  const V b = set(0.9999999f), c = set(1e-7f);  // stays near 1: no denormals, no overflow
  for (auto _ : state) {
    for (int r = 0; r < kRounds; ++r)
      for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], b, c);
    benchmark::DoNotOptimize(acc);
  }
  set_gflops(state, 2.0 * kLanes * kChains * kRounds);
#else
  state.SkipWithError("this build targets no FMA instructions");
#endif
}
BENCHMARK(BM_FmaPeak)->Threads(1)->Threads(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

// q8_0 quantization (autograd/q8_0.hpp) of a float32 [R, C] array, as a low-precision base is
// quantized at load: xgrad's `quantize_q8_0` on 1 and 2 threads beside ggml's reference loop
// (quantize_row_q8_0_ref, written out below from its definition: one thread, roundf per value).
// GB/s counts the float32 bytes read.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/float16.hpp"
#include "autograd/q8_0.hpp"
#include "bench/bench_util.hpp"

namespace {

// ggml's reference: per block d = amax / 127 (stored as half), q = roundf(x / d).
void reference_quantize(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n; b += 32, out += 34) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = xg::float_to_half(d);
    std::memcpy(out, &dh, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[b + j] * id)));
  }
}

// x: [R, C] float32 -> R * C / 32 blocks; impl 0: the reference loop, 1: quantize_q8_0 on
// `threads` threads.
void BM_QuantizeQ8_0(benchmark::State& state) {
  const int64_t R = state.range(0), C = state.range(1), impl = state.range(2), threads = state.range(3);
  const xg::Tensor x = xg::bench::randn32({R, C}, 1);
  std::vector<uint8_t> out(static_cast<std::size_t>(R * C / 32 * 34));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(static_cast<int>(threads));
  for (auto _ : state) {
    if (impl == 0) reference_quantize(x.data<float>(), R * C, out.data());
    else benchmark::DoNotOptimize(xg::quantize_q8_0(x.data<float>(), R * C, out.data()));
    benchmark::DoNotOptimize(out.data());
  }
  omp_set_num_threads(saved);
  xg::bench::set_gbps(state, 4.0 * static_cast<double>(R * C));
}
BENCHMARK(BM_QuantizeQ8_0)
    ->Args({4096, 4096, 0, 1})
    ->Args({4096, 4096, 1, 1})
    ->Args({4096, 4096, 1, 2})
    ->ArgNames({"R", "C", "impl", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

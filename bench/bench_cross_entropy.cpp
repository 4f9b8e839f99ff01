// Fused cross-entropy (xg::losses::cross_entropy: log-softmax + NLL in one pass, mean over
// rows) of LM-head logits [B*T, 256] against int64 targets: forward, and forward + backward.
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;

// logits: [B*T, V = 256] per reference config: 512 rows (tiny) and 1024 rows (small and
// medium share this shape, so it runs once)
void ce_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "V"});
  int64_t last = 0;
  for (const auto& c : xg::bench::kRefConfigs) {
    if (c.rows() != last) b->Args({c.rows(), 256});
    last = c.rows();
  }
}

// loss = mean_r(logsumexp(x[r]) - x[r, t[r]])
void BM_CrossEntropyForward(benchmark::State& state) {
  const int64_t rows = state.range(0), V = state.range(1);
  Tensor x = xg::bench::randn32({rows, V}, 1);
  xg::Generator gen(2);
  Tensor t = xg::randint(0, V, {rows}, &gen);
  for (auto _ : state) {
    Tensor loss = xg::losses::cross_entropy(x, t);
    benchmark::DoNotOptimize(loss.raw_data());
  }
  xg::bench::set_gbps(state, 4.0 * rows * V);  // read the logits (targets and the scalar loss are negligible)
}
BENCHMARK(BM_CrossEntropyForward)->Apply(ce_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same forward, then backward: dx = (softmax(x) - onehot(t)) * g / rows
void BM_CrossEntropyForwardBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), V = state.range(1);
  Tensor x = xg::bench::randn32({rows, V}, 1).requires_grad_();
  xg::Generator gen(2);
  Tensor t = xg::randint(0, V, {rows}, &gen);
  for (auto _ : state) {
    Tensor loss = xg::losses::cross_entropy(x, t);
    loss.backward();
    benchmark::DoNotOptimize(x.grad().raw_data());
    x.zero_grad();
  }
  xg::bench::set_gbps(state, 4.0 * 3 * rows * V);  // forward: read x; backward: read x, write dx
}
BENCHMARK(BM_CrossEntropyForwardBackward)->Apply(ce_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

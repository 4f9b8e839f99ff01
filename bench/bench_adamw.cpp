// One xg::optim::AdamW step (lr 3e-4, weight decay 0.1, as in the step benchmark) over the
// parameter list of each reference config's model. GB/s counts p, g, m, v read and p, m, v
// written.
#include <vector>

#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;

// The parameter shapes of the reference decoder LM (bench/README.md) with model dim d and L
// layers, in named_parameters() order: embedding [256, d]; per layer an RMSNorm gain [d], w_q,
// w_k, w_v, w_o [d, d], an RMSNorm gain [d], gate and up [F, d], down [d, F]; the final norm
// gain [d] and the LM head [256, d] (small: 3,344,640 values, medium: 25,960,960).
std::vector<xg::Shape> decoder_param_shapes(int64_t d, int64_t L) {
  const int64_t V = 256, F = xg::bench::ffn_dim(d);
  std::vector<xg::Shape> shapes{{V, d}};
  const std::vector<xg::Shape> layer{{d}, {d, d}, {d, d}, {d, d}, {d, d}, {d}, {F, d}, {F, d}, {d, F}};
  for (int64_t l = 0; l < L; ++l) shapes.insert(shapes.end(), layer.begin(), layer.end());
  shapes.push_back({d});
  shapes.push_back({V, d});
  return shapes;
}

void adamw_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"d", "L"});
  for (const auto& c : xg::bench::kRefConfigs) b->Args({c.d, c.L});
}

// For every parameter: p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps). The gradients are set once; the
// first step (which allocates m and v) runs before the timing.
void BM_AdamWStep(benchmark::State& state) {
  const int64_t d = state.range(0), L = state.range(1);
  std::vector<Tensor> params;
  int64_t numel = 0;
  uint64_t seed = 1;
  for (const xg::Shape& s : decoder_param_shapes(d, L)) {
    Tensor p = xg::bench::randn32(s, seed++).requires_grad_();
    p.set_grad(xg::bench::randn32(s, seed++));
    numel += p.numel();
    params.push_back(p);
  }
  xg::optim::AdamWOptions opts;
  opts.lr = 3e-4;
  opts.weight_decay = 0.1;
  xg::optim::AdamW opt(params, opts);
  opt.step();
  for (auto _ : state) {
    opt.step();
    benchmark::DoNotOptimize(params[0].raw_data());
  }
  state.counters["params"] = static_cast<double>(numel);
  xg::bench::set_gbps(state, 4.0 * 7 * static_cast<double>(numel));  // read p, g, m, v; write p, m, v
}
BENCHMARK(BM_AdamWStep)->Apply(adamw_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

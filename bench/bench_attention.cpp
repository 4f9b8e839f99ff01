// Causal scaled-dot-product attention through xg::scaled_dot_product_attention (the fused
// kernel every attention module shares) at the q/k/v shapes of the three reference configs.
#include <optional>

#include "autograd/autocast.hpp"
#include "bench/bench_util.hpp"

namespace {

using xg::Tensor;
using xg::bench::randn32;

// q, k, v: [B, H, T, hs], one shape per reference config (hs = d / H), on the products
// xgrad chooses (xg::attention_products_for).
void attention_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "H", "T", "hs"});
  for (const auto& c : xg::bench::kRefConfigs) b->Args({c.B, c.H, c.T, c.hs()});
}

// The same shapes and GPT-2 small's (bench/step_bench.cpp's gpt2s), each on both kinds of
// products: tiled 0 = BLAS, 1 = the register-tiled kernels (xg::AttentionProducts), from which
// attention.cpp's rule was drawn.
void products_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "H", "T", "hs", "tiled"});
  for (int64_t tiled : {0, 1}) {
    for (const auto& c : xg::bench::kRefConfigs) b->Args({c.B, c.H, c.T, c.hs(), tiled});
    b->Args({4, 12, 512, 64, tiled});   // GPT-2 small's shape (step_bench --config gpt2s)
    b->Args({1, 12, 1024, 64, tiled});  // longer keys, for the rule's bound
    b->Args({1, 8, 2048, 64, tiled});
    b->Args({2, 8, 512, 128, tiled});   // a head of 128 (LLaMA's)
  }
}

// Forces the products a benchmark's fifth argument names for its run.
struct ProductsScope {
  explicit ProductsScope(const benchmark::State& state) {
    xg::set_attention_products(state.range(4) ? xg::AttentionProducts::Tiled : xg::AttentionProducts::Blas);
  }
  ~ProductsScope() { xg::set_attention_products(xg::AttentionProducts::Auto); }
};

// FLOPs: the two products QK^T and PV, 2 * T * T * hs each per (b, h): forward
// 4 * B * H * T^2 * hs; backward four products (dV = P^T g, dP = g V^T, dQ = dS K,
// dK = dS^T Q), 8 * B * H * T^2 * hs. NOTE: counted over the full T x T scores, as PyTorch's
// plain matmul + mask + softmax computes them (and as PaLM's model FLOPs count them); xgrad's
// kernel skips the keys a causal row cannot see, so its useful work is about half of this.
// Softmax, scaling and masking are not counted.
double attention_flops(int64_t B, int64_t H, int64_t T, int64_t hs) {
  return 4.0 * static_cast<double>(B * H * T) * static_cast<double>(T * hs);
}

// out = softmax(q k^T / sqrt(hs) + causal mask) v
void BM_AttentionForward(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1), T = state.range(2), hs = state.range(3);
  Tensor q = randn32({B, H, T, hs}, 1), k = randn32({B, H, T, hs}, 2), v = randn32({B, H, T, hs}, 3);
  for (auto _ : state) {
    Tensor y = xg::scaled_dot_product_attention(q, k, v, xg::AttnMask::causal_mask());
    benchmark::DoNotOptimize(y.raw_data());
  }
  xg::bench::set_gflops(state, attention_flops(B, H, T, hs));
}
BENCHMARK(BM_AttentionForward)->Apply(attention_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same forward, then the fused backward for dq, dk, dv (softmax backward inside).
void BM_AttentionForwardBackward(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1), T = state.range(2), hs = state.range(3);
  Tensor q = randn32({B, H, T, hs}, 1).requires_grad_(), k = randn32({B, H, T, hs}, 2).requires_grad_();
  Tensor v = randn32({B, H, T, hs}, 3).requires_grad_();
  Tensor g = randn32({B, H, T, hs}, 4);
  for (auto _ : state) {
    Tensor y = xg::scaled_dot_product_attention(q, k, v, xg::AttnMask::causal_mask());
    y.backward(g);
    benchmark::DoNotOptimize(q.grad().raw_data());
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
  }
  xg::bench::set_gflops(state, 3 * attention_flops(B, H, T, hs));  // forward 4, backward 8 (x B H T^2 hs)
}
BENCHMARK(BM_AttentionForwardBackward)->Apply(attention_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same on the products the fifth argument forces.
void BM_AttentionProductsForwardBackward(benchmark::State& state) {
  const ProductsScope products(state);
  BM_AttentionForwardBackward(state);
}
BENCHMARK(BM_AttentionProductsForwardBackward)->Apply(products_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Forward and backward in float32 (bf16 0) and under autocast (bf16 1: on a CPU with
// AVX512-BF16 the tiled products run in bf16 with float32 sums), side by side: SmolLM2-135M's
// LoRA shape (B 4, 9 heads of 64, T 512) and GPT-2 small's.
void BM_AttentionAutocastForwardBackward(benchmark::State& state) {
  const std::optional<xg::autocast> scope = state.range(4) ? std::optional<xg::autocast>(std::in_place) : std::nullopt;
  BM_AttentionForwardBackward(state);
}
BENCHMARK(BM_AttentionAutocastForwardBackward)
    ->ArgNames({"B", "H", "T", "hs", "bf16"})
    ->Args({4, 9, 512, 64, 0})
    ->Args({4, 9, 512, 64, 1})
    ->Args({4, 12, 512, 64, 0})
    ->Args({4, 12, 512, 64, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

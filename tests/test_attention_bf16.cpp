// Attention under autocast on a CPU with AVX512-BF16 (autograd/attention.cpp's UnitProductsBf16,
// detail/tiled_gemm_bf16.hpp): its products round their operands to bf16 and sum in float32, as
// PyTorch's autocast runs q k^T and P v. Values and gradients against a float64 reference of the
// same bf16-rounded q, k and v, on shapes with tails (odd head sizes and key counts), grouped
// heads, masks, causal segments, kept and recomputed weights and dropout; the float32 path
// outside autocast and without bf16 kernels; and against PyTorch 1.13's autocast attention
// (tests/fixtures/gen_bf16.py) on both bf16 product kernels.
#include <cmath>

#include "autograd/attention.hpp"
#include "autograd/autocast.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
#include "autograd/shape.hpp"
#include "autograd/softmax.hpp"
#include "tests/torch_fixture.hpp"

namespace attention_bf16_tests {

using namespace xg;

struct Case {
  int64_t B, H, Hkv, Tq, Tk, hs, hv;
  bool causal, keep;
  double dropout;
  bool keep_weights;
};

struct Result {
  std::vector<Tensor> t;  // out, dq, dk, dv
};

// Attention of float32 q, k, v (rounded to bf16 values when `round`) and its gradients; under
// autocast when `bf16`; float64 composite when `reference`.
Result run(const Case& c, bool bf16, bool reference) {
  Generator gen(21);
  const Tensor q0 = randn({c.B, c.H, c.Tq, c.hs}, kFloat32, &gen).to(kBFloat16).to(kFloat32);
  const Tensor k0 = randn({c.B, c.Hkv, c.Tk, c.hs}, kFloat32, &gen).to(kBFloat16).to(kFloat32);
  const Tensor v0 = randn({c.B, c.Hkv, c.Tk, c.hv}, kFloat32, &gen).to(kBFloat16).to(kFloat32);
  const Tensor g0 = randn({c.B, c.H, c.Tq, c.hv}, kFloat32, &gen).to(kBFloat16).to(kFloat32);
  Tensor keep;
  if (c.keep) keep = gt(rand({c.B, 1, c.Tq, c.Tk}, kFloat32, &gen), scalar_tensor(0.3));
  const Dtype dt = reference ? kFloat64 : kFloat32;
  Tensor q = q0.to(dt).requires_grad_(), k = k0.to(dt).requires_grad_(), v = v0.to(dt).requires_grad_();
  const int64_t saved = attention_kept_weights_max();
  set_attention_kept_weights_max(c.keep_weights ? INT64_MAX : 0);
  Tensor out;
  {
    autocast scope(bf16);
    Generator drops(3);
    out = scaled_dot_product_attention(q, k, v, AttnMask(keep, c.causal), c.dropout, true, 0, &drops);
  }
  backward({out}, {g0.to(dt)});
  set_attention_kept_weights_max(saved);
  return {{out, q.grad(), k.grad(), v.grad()}};
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector()) m = std::max(m, std::fabs(x));
  return m;
}

const Case kCases[] = {
    {2, 2, 2, 64, 64, 32, 32, true, false, 0, false},   // the tiny config's shape
    {2, 4, 2, 37, 37, 17, 5, true, true, 0, false},     // tails everywhere (odd head and keys), GQA, bool mask
    {1, 2, 1, 9, 40, 16, 16, true, false, 0, true},     // Tq < Tk, the weights kept for backward
    {2, 2, 2, 33, 33, 16, 16, true, false, 0.2, false}, // dropout on the weights
    {1, 3, 3, 80, 80, 64, 64, false, false, 0, false},  // a head of 64 over 80 keys, no mask
};

TEST(AttentionBf16, UnderAutocastProductsAreBf16WithFloat32Sums) {
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "this CPU has no bf16 dot products";
  if (!attention_has_bf16_tiles()) GTEST_SKIP() << "built without AVX512-BF16 (XGRAD_NATIVE off)";
  test::Bf16GemmScope on_bf16(Bf16Gemm::OneDNN);  // whether or not they beat this CPU's FMAs
  for (const Case& c : kCases) {
    SCOPED_TRACE(str_cat("B=", c.B, " H=", c.H, " Hkv=", c.Hkv, " Tq=", c.Tq, " Tk=", c.Tk, " hs=", c.hs, " hv=", c.hv,
                         " dropout=", c.dropout, " keep_weights=", c.keep_weights));
    const Result ref = run(c, false, true), f32 = run(c, false, false), bf = run(c, true, false);
    for (std::size_t i = 0; i < 4; ++i) {
      SCOPED_TRACE(str_cat("tensor ", i, " (out, dq, dk, dv)"));
      const double scale = max_abs(ref.t[i]);
      const double err32 = max_abs(f32.t[i].to(kFloat64) - ref.t[i]), err16 = max_abs(bf.t[i].to(kFloat64) - ref.t[i]);
      // float32 products: rounding of float32 sums; bf16: the weights and the score gradients
      // rounded to bf16 (2^-9 relative) before their products, as autocast's matmuls round them.
      // Measured: float32 1e-7 to 6e-7 of the largest value, bf16 1e-3 to 3e-3.
      EXPECT_LT(err32, 1e-5 * scale);
      EXPECT_LT(err16, 1e-2 * scale);
      EXPECT_GT(err16, 1e-4 * scale) << "the products did not run in bf16";
    }
  }
}

// Without bf16 kernels (bf16_gemm() Widened) or outside autocast, attention's products stay
// float32: the same bits as a float32 run.
TEST(AttentionBf16, WithoutBf16KernelsAutocastLeavesAttentionInFloat32) {
  test::Bf16GemmScope widened(Bf16Gemm::Widened);
  for (const Case& c : kCases) {
    const Result f32 = run(c, false, false), bf = run(c, true, false);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(f32.t[i].to_vector(), bf.t[i].to_vector()) << i;
  }
}

// A product's sums do not depend on how the units are split over threads.
TEST(AttentionBf16, ResultsDoNotDependOnTheThreadCount) {
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "this CPU has no bf16 dot products";
  if (!attention_has_bf16_tiles()) GTEST_SKIP() << "built without AVX512-BF16 (XGRAD_NATIVE off)";
  test::Bf16GemmScope on_bf16(Bf16Gemm::OneDNN);  // whether or not they beat this CPU's FMAs
  const Case c = {2, 4, 2, 37, 37, 17, 5, true, true, 0, false};
  Result one, two;
  {
    test::OmpThreadsScope t(1);
    one = run(c, true, false);
  }
  {
    test::OmpThreadsScope t(2);
    two = run(c, true, false);
  }
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(one.t[i].to_vector(), two.t[i].to_vector()) << i;
}


// PyTorch 1.13 under autocast, attention as transformers' Llama runs it (bf16 q k^T and P v,
// softmax in float32), from the same bf16 q, k and v, causal, 4 heads on 2 KV heads. torch
// rounds the scores, the weights, the output and each gradient to bf16; xgrad keeps the scores
// and its results in float32 and rounds only the products' operands. So the two differ by bf16
// roundings, and xgrad's error against float64 of the same inputs is no larger than torch's.
// On the widened kernels attention's products stay float32 (a closer result still).
TEST(AttentionBf16, MatchesTorchAutocastAttention) {
  const TensorMap& fx = test::fixture("bf16");
  std::vector<Bf16Gemm> kernels{Bf16Gemm::Widened};
  if (cpu_has_bf16_dot()) kernels.push_back(Bf16Gemm::OneDNN);
  for (Bf16Gemm how : kernels) {
    SCOPED_TRACE(bf16_gemm_name(how));
    test::Bf16GemmScope scope(how);
    Tensor q = fx.at("attn.q").clone().requires_grad_(), k = fx.at("attn.k").clone().requires_grad_();
    Tensor v = fx.at("attn.v").clone().requires_grad_();
    Tensor out;
    {
      autocast bf16;
      out = scaled_dot_product_attention(q, k, v, AttnMask(Tensor(), true));
    }
    backward({out}, {fx.at("attn.upstream")});
    const char* names[] = {"out", "gq", "gk", "gv"};
    const Tensor ours[] = {out, q.grad(), k.grad(), v.grad()};
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(names[i]);
      const Tensor torch = fx.at(str_cat("attn.", names[i])).to(kFloat64);
      const Tensor exact = fx.at(str_cat("attn.f64.", names[i]));
      const double scale = max_abs(exact);
      const double ours_err = max_abs(ours[i].to(kFloat64) - exact), torch_err = max_abs(torch - exact);
      EXPECT_LT(max_abs(ours[i].to(kFloat64) - torch), 2e-2 * scale);
      EXPECT_LE(ours_err, torch_err) << "xgrad " << ours_err / scale << " of the largest value, torch "
                                     << torch_err / scale;
    }
  }
}

}  // namespace attention_bf16_tests

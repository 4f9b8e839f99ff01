// Tests for autograd/attention.cpp: scaled_dot_product_attention against PyTorch's plain
// formula (matmul, masked_fill, softmax, matmul), float64 gradient checks for q, k, v and
// additive masks, grouped heads, causal masks aligned to the end, dropout, and errors.
#include "autograd/attention.hpp"

#include <cmath>
#include <limits>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
#include "autograd/shape.hpp"
#include "autograd/softmax.hpp"
#include <cstring>

#include "tests/torch_fixture.hpp"

using namespace xg;
using xg::test::kInf;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {


// Forces one kind of attention products for a scope (AttentionProducts::Auto after it).
struct ProductsScope {
  explicit ProductsScope(AttentionProducts which) { set_attention_products(which); }
  ~ProductsScope() { set_attention_products(AttentionProducts::Auto); }
};

// Makes backward recompute the weights (or keep them) for a scope.
struct KeptWeightsScope {
  explicit KeptWeightsScope(int64_t max) : saved(attention_kept_weights_max()) { set_attention_kept_weights_max(max); }
  ~KeptWeightsScope() { set_attention_kept_weights_max(saved); }
  int64_t saved;
};

// Random q [B, H, Tq, hs], k [B, Hkv, Tk, hs], v [B, Hkv, Tk, hv] that require grad, and an
// upstream gradient [B, H, Tq, hv], drawn from gen in that order.
struct Operands {
  Tensor q, k, v, g;
};
Operands random_operands(int64_t B, int64_t H, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t hs, int64_t hv,
                         Dtype dtype, Generator& gen) {
  Operands o;
  o.q = randn({B, H, Tq, hs}, dtype, &gen).requires_grad_();
  o.k = randn({B, Hkv, Tk, hs}, dtype, &gen).requires_grad_();
  o.v = randn({B, Hkv, Tk, hv}, dtype, &gen).requires_grad_();
  o.g = randn({B, H, Tq, hv}, dtype, &gen);
  return o;
}

Tensor sdpa(const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }
Tensor sdpa_mask(const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], AttnMask(x[3])); }
Tensor sdpa_causal(const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], AttnMask::causal_mask()); }
Tensor sdpa_mask_causal(const V& x) {
  return scaled_dot_product_attention(x[0], x[1], x[2], AttnMask(x[3], true));
}

// The same attention composed from xg's primitive ops (repeat_kv by repeat + reshape).
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keep, bool causal,
                 double p = 0, Generator* gen = nullptr) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), hs = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  const int64_t rep = H / Hkv;
  auto expand_kv = [&](const Tensor& t) {
    if (rep == 1) return t;
    Tensor e = expand(unsqueeze(t, 2), {B, Hkv, rep, Tk, t.size(3)});
    return reshape(e, {B, H, Tk, t.size(3)});
  };
  Tensor s = matmul(q, transpose(expand_kv(k), -2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  if (keep.defined()) s = masked_fill(s, logical_not(keep), -1e9);
  if (causal) {
    Tensor future = logical_not(tril(ones({Tq, Tk}, kBool), Tk - Tq));
    s = masked_fill(s, future, -kInf);
  }
  Tensor w = softmax(s, -1);
  if (p > 0) w = dropout(w, p, true, gen);
  return matmul(w, expand_kv(v));
}

}  // namespace

// --- values and gradients against PyTorch --------------------------------------------------

TEST(AttentionTorch, Plain) {
  expect_matches_torch("attention", "plain", sdpa);
  expect_matches_torch("attention", "scale", [](const V& x) {
    return scaled_dot_product_attention(x[0], x[1], x[2], {}, 0, false, 0.3);
  });
}

TEST(AttentionTorch, BoolMasks) {
  expect_matches_torch("attention", "bool_mask", sdpa_mask);  // incl. a fully masked row: uniform
  expect_matches_torch("attention", "bool_tril", sdpa_mask);
}

TEST(AttentionTorch, AdditiveMasks) {
  expect_matches_torch("attention", "additive_triu", sdpa_mask);
  expect_matches_torch("attention", "additive_bias", sdpa_mask);  // the bias gets a gradient
}

TEST(AttentionTorch, CausalAlignedToTheEnd) {
  expect_matches_torch("attention", "causal_tail", sdpa_causal);
  expect_matches_torch("attention", "causal_one", sdpa_causal);
  expect_matches_torch("attention", "causal_long", sdpa_causal);
  expect_matches_torch("attention", "causal_bool", sdpa_mask_causal);
}

TEST(AttentionTorch, GroupedHeads) {
  expect_matches_torch("attention", "gqa", sdpa);
  expect_matches_torch("attention", "gqa_causal", sdpa_causal);
  expect_matches_torch("attention", "mqa_mask", sdpa_mask);
  expect_matches_torch("attention", "parallel_gqa_causal", sdpa_causal);
}

// --- semantics --------------------------------------------------------------------------------

TEST(Attention, FullyMaskedRows) {
  Tensor q = randn({1, 1, 2, 4}), k = randn({1, 1, 3, 4}), v = randn({1, 1, 3, 2});
  // bool: -1e9 everywhere (masked_fill(mask == 0, -1e9)) -> uniform weights -> the mean of v
  Tensor keep = from_vector(std::vector<double>{0, 0, 0, 1, 1, 0}, {2, 3}, kBool);
  std::vector<double> out = scaled_dot_product_attention(q, k, v, AttnMask(keep)).to_vector();
  std::vector<double> vv = v.to_vector();
  EXPECT_NEAR(out[0], (vv[0] + vv[2] + vv[4]) / 3, 1e-6);
  EXPECT_NEAR(out[1], (vv[1] + vv[3] + vv[5]) / 3, 1e-6);
  // additive: a row of -inf gives NaN, as PyTorch's softmax; the other row stays finite
  Tensor add = from_vector(std::vector<double>{-kInf, -kInf, -kInf, 0, 0, -kInf}, {2, 3});
  out = scaled_dot_product_attention(q, k, v, AttnMask(add)).to_vector();
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_TRUE(std::isfinite(out[2]) && std::isfinite(out[3]));
}

TEST(Attention, CausalFirstQueryOfAFullSquareSeesOnlyKeyZero) {
  Tensor q = randn({1, 1, 3, 2}), k = randn({1, 1, 3, 2}), v = randn({1, 1, 3, 1});
  std::vector<double> out = scaled_dot_product_attention(q, k, v, AttnMask::causal_mask()).to_vector();
  EXPECT_FLOAT_EQ(static_cast<float>(out[0]), static_cast<float>(v.to_vector()[0]));
}

// Sizes that take the multithreaded forward and backward, against the primitive ops in
// float64: values and all three gradients, with GQA, a bool mask and causal blocks, on both
// kinds of products.
TEST(Attention, LargeMatchesComposite) {
  struct Case {
    int64_t B, H, Hkv, T, hs;
    bool causal, mask;
  };
  for (const auto& [c, products] :
       {std::pair{Case{4, 8, 8, 130, 32, true, false}, AttentionProducts::Tiled},
        std::pair{Case{4, 8, 8, 130, 32, true, false}, AttentionProducts::Blas},
        std::pair{Case{3, 8, 2, 100, 16, false, true}, AttentionProducts::Tiled},
        std::pair{Case{3, 8, 2, 100, 16, false, true}, AttentionProducts::Blas},
        std::pair{Case{1, 4, 1, 150, 8, true, true}, AttentionProducts::Tiled}}) {
    SCOPED_TRACE(str_cat("B=", c.B, " H=", c.H, " Hkv=", c.Hkv, " T=", c.T, " causal=", c.causal, " mask=", c.mask,
                         " tiled=", products == AttentionProducts::Tiled));
    ProductsScope scope(products);
    Generator gen(5);
    auto [q, k, v, g] = random_operands(c.B, c.H, c.Hkv, c.T, c.T, c.hs, c.hs, kFloat32, gen);
    Tensor keep = c.mask ? gt(rand({c.B, 1, c.T, c.T}, kFloat32, &gen), scalar_tensor(0.2)) : Tensor();
    Tensor out = scaled_dot_product_attention(q, k, v, AttnMask(keep, c.causal));
    backward({out}, {g});
    Tensor q64 = q.detach().to(kFloat64).requires_grad_(), k64 = k.detach().to(kFloat64).requires_grad_(),
           v64 = v.detach().to(kFloat64).requires_grad_();
    Tensor ref = composite(q64, k64, v64, keep, c.causal);
    backward({ref}, {g.to(kFloat64)});
    EXPECT_TRUE(test::tensors_close(out, ref.to(kFloat32), 1e-4, 1e-5));
    EXPECT_TRUE(test::tensors_close(q.grad(), q64.grad().to(kFloat32), 1e-4, 1e-5));
    EXPECT_TRUE(test::tensors_close(k.grad(), k64.grad().to(kFloat32), 1e-4, 1e-5));
    EXPECT_TRUE(test::tensors_close(v.grad(), v64.grad().to(kFloat32), 1e-4, 1e-5));
  }
}

namespace {

struct AttnCase {
  int64_t B, H, Hkv, Tq, Tk, hs, hv;
  bool causal, keep, additive;
  double dropout;
};

// Output and gradients of q, k, v (and an additive mask) on the given products, float64, with
// the weights kept for backward or recomputed.
std::vector<Tensor> attention_and_grads(const AttnCase& c, AttentionProducts which, bool keep_weights) {
  ProductsScope scope(which);
  KeptWeightsScope weights(keep_weights ? INT64_MAX : 0);
  Generator gen(11);
  auto [q, k, v, g] = random_operands(c.B, c.H, c.Hkv, c.Tq, c.Tk, c.hs, c.hv, kFloat64, gen);
  Tensor mask;
  if (c.keep) mask = gt(rand({c.B, 1, c.Tq, c.Tk}, kFloat64, &gen), scalar_tensor(0.3, kFloat64));
  if (c.additive) mask = randn({1, c.H, c.Tq, c.Tk}, kFloat64, &gen).requires_grad_();
  Generator drops(3);
  Tensor out = scaled_dot_product_attention(q, k, v, AttnMask(mask, c.causal), c.dropout, true, 0, &drops);
  backward({out}, {g});
  std::vector<Tensor> r = {out, q.grad(), k.grad(), v.grad()};
  if (c.additive) r.push_back(mask.grad());
  return r;
}

}  // namespace

// The register-tiled products and BLAS's, with the weights kept for backward or recomputed,
// give the same attention and gradients (float64), on shapes with vector tails (head sizes
// and key counts that are not whole vectors), grouped heads, both mask kinds, causal segments,
// a decoding step's Tq < Tk and dropout.
TEST(Attention, TiledProductsEqualBlas) {
  const std::vector<AttnCase> cases = {
      {2, 2, 2, 64, 64, 32, 32, true, false, false, 0},   // the tiny config's shape
      {2, 4, 2, 37, 37, 17, 5, true, true, false, 0},     // tails everywhere, GQA, bool mask
      {1, 6, 3, 5, 70, 8, 24, false, false, true, 0},     // additive mask with a gradient
      {1, 2, 1, 3, 40, 16, 16, true, false, false, 0},    // Tq < Tk: new queries against a cache
      {2, 2, 2, 33, 33, 16, 16, true, false, false, 0.2}, // dropout on the weights
      {1, 1, 1, 1, 1, 1, 1, false, false, false, 0},      // one key
      // decoding: up to 4 query rows per kv head take the scores as dot products with k's rows
      {2, 6, 2, 1, 77, 24, 24, true, false, false, 0},    // GQA, one token, a head of 1.5 vectors
      {1, 4, 4, 4, 50, 64, 64, true, true, false, 0},     // MHA, four tokens, bool mask
      {1, 4, 1, 1, 33, 40, 40, false, false, true, 0},    // MQA, additive mask with a gradient
  };
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(str_cat("B=", c.B, " H=", c.H, " Hkv=", c.Hkv, " Tq=", c.Tq, " Tk=", c.Tk, " hs=", c.hs,
                         " hv=", c.hv, " dropout=", c.dropout));
    const std::vector<Tensor> blas = attention_and_grads(c, AttentionProducts::Blas, false);
    for (const auto& [products, keep] : {std::pair{AttentionProducts::Tiled, false},
                                         std::pair{AttentionProducts::Tiled, true},
                                         std::pair{AttentionProducts::Blas, true}}) {
      SCOPED_TRACE(str_cat("tiled=", products == AttentionProducts::Tiled, " keep_weights=", keep));
      const std::vector<Tensor> other = attention_and_grads(c, products, keep);
      ASSERT_EQ(blas.size(), other.size());
      for (std::size_t i = 0; i < blas.size(); ++i) {
        SCOPED_TRACE(str_cat("tensor ", i, " (out, dq, dk, dv, dmask)"));
        EXPECT_TRUE(test::tensors_close(other[i], blas[i], 1e-12, 1e-12));
      }
    }
  }
  EXPECT_EQ(attention_products(), AttentionProducts::Auto);
  EXPECT_EQ(attention_kept_weights_max(), int64_t{1} << 17);
}

// By default short heads and key runs take the tiled products, long ones BLAS; a forced
// choice holds for every shape.
TEST(Attention, ProductsChosenByHeadAndKeys) {
  EXPECT_EQ(attention_products_for(32, 32, 64), AttentionProducts::Tiled);    // tiny
  EXPECT_EQ(attention_products_for(64, 64, 128), AttentionProducts::Tiled);   // small
  // medium's keys tiled; GPT-2 small's where the library was built for AVX-512
  const int64_t max_keys = attention_tiled_max_keys();
  ASSERT_TRUE(max_keys == 2048 * 64 || max_keys == 256 * 64) << max_keys;
  const auto wide = max_keys == 2048 * 64 ? AttentionProducts::Tiled : AttentionProducts::Blas;
  EXPECT_EQ(attention_products_for(64, 64, 256), AttentionProducts::Tiled);
  EXPECT_EQ(attention_products_for(64, 64, 512), wide);
  EXPECT_EQ(attention_products_for(64, 64, max_keys / 64), AttentionProducts::Tiled);  // the bound itself
  EXPECT_EQ(attention_products_for(64, 64, max_keys / 64 + 1), AttentionProducts::Blas);
  EXPECT_EQ(attention_products_for(32, 32, max_keys / 32 + 1), AttentionProducts::Blas);
  EXPECT_EQ(attention_products_for(64, 64, 4096), AttentionProducts::Blas);  // past T 2048: untested
  EXPECT_EQ(attention_products_for(128, 128, 16), AttentionProducts::Blas);   // a long head
  EXPECT_EQ(attention_products_for(16, 80, 64), AttentionProducts::Blas);     // a long value head
  {
    ProductsScope blas(AttentionProducts::Blas);
    EXPECT_EQ(attention_products_for(32, 32, 64), AttentionProducts::Blas);
  }
  ProductsScope tiled(AttentionProducts::Tiled);
  EXPECT_EQ(attention_products_for(64, 64, 512), AttentionProducts::Tiled);
}

// The packed attention reads q, k and v from one projection's output [B, T, H + 2 Hkv, hs] and
// writes [B, T, H hs]: the same values and gradient (float64) as splitting it into heads,
// attending and merging the heads, on both kinds of products, with GQA, both mask kinds,
// causal, dropout and tails.
// scaled_dot_product_attention_prefix reads the first `keys` positions of k and v buffers with
// room to spare (a KV cache's), in place: equal to the attention on the narrowed tensors, with
// NaN in every position past `keys` (any read of them would show), on both product paths, GQA,
// causal (aligned to the end) and a bool mask.
TEST(Attention, PrefixReadsTheFirstKeysInPlace) {
  for (AttentionProducts products : {AttentionProducts::Tiled, AttentionProducts::Blas}) {
    SCOPED_TRACE(products == AttentionProducts::Tiled ? "tiled" : "blas");
    ProductsScope scope(products);
    Generator gen(31);
    const int64_t B = 2, H = 4, Hkv = 2, Tq = 3, keys = 21, capacity = 32, hs = 16, hv = 8;
    Tensor q = randn({B, H, Tq, hs}, kFloat64, &gen);
    Tensor k = full({B, Hkv, capacity, hs}, std::nan(""), kFloat64);
    Tensor v = full({B, Hkv, capacity, hv}, std::nan(""), kFloat64);
    const Tensor k_in = randn({B, Hkv, keys, hs}, kFloat64, &gen), v_in = randn({B, Hkv, keys, hv}, kFloat64, &gen);
    for (int64_t r = 0; r < B * Hkv; ++r) {  // the first `keys` positions of each (b, head) row block
      std::memcpy(k.data<double>() + r * capacity * hs, k_in.data<double>() + r * keys * hs,
                  sizeof(double) * keys * hs);
      std::memcpy(v.data<double>() + r * capacity * hv, v_in.data<double>() + r * keys * hv,
                  sizeof(double) * keys * hv);
    }
    const Tensor keep = gt(rand({B, 1, Tq, keys}, kFloat64, &gen), scalar_tensor(0.2, kFloat64));
    for (const AttnMask& mask : {AttnMask::causal_mask(), AttnMask(keep), AttnMask()}) {
      const Tensor got = scaled_dot_product_attention_prefix(q, k, v, keys, mask);
      const Tensor want = scaled_dot_product_attention(q, k_in, v_in, mask);
      EXPECT_TRUE(isfinite_all(got));
      EXPECT_TRUE(test::tensors_close(got, want, 1e-14, 1e-14));
    }
  }
  const Tensor q = zeros({1, 1, 1, 4}), k = zeros({1, 1, 8, 4}), v = zeros({1, 1, 8, 4});
  EXPECT_XG_ERROR(scaled_dot_product_attention_prefix(q, k, v, 9),
                  "scaled_dot_product_attention_prefix: 9 keys asked of k and v holding 8");
  EXPECT_XG_ERROR(scaled_dot_product_attention_prefix(q, k.detach().requires_grad_(), v, 5),
                  "scaled_dot_product_attention_prefix: no gradient through part of k and v (5 of 8 positions)");
  EXPECT_EQ(scaled_dot_product_attention_prefix(q, k.detach().requires_grad_(), v, 8).shape(), (Shape{1, 1, 1, 4}));
}

TEST(Attention, PackedEqualsSplitHeads) {
  struct Case {
    int64_t B, T, H, Hkv, hs;
    bool causal, keep, additive;
    double dropout;
  };
  for (const Case& c : {Case{2, 64, 2, 2, 32, true, false, false, 0}, Case{2, 37, 4, 2, 17, true, true, false, 0},
                        Case{1, 20, 6, 3, 8, false, false, true, 0}, Case{2, 33, 2, 1, 16, true, false, false, 0.2},
                        Case{1, 130, 8, 8, 64, true, false, false, 0}}) {
    for (AttentionProducts products : {AttentionProducts::Tiled, AttentionProducts::Blas}) {
      SCOPED_TRACE(str_cat("B=", c.B, " T=", c.T, " H=", c.H, " Hkv=", c.Hkv, " hs=", c.hs, " dropout=", c.dropout,
                           " tiled=", products == AttentionProducts::Tiled));
      ProductsScope scope(products);
      Generator gen(21);
      const int64_t heads = c.H + 2 * c.Hkv;
      Tensor qkv = randn({c.B, c.T, heads, c.hs}, kFloat64, &gen).requires_grad_();
      Tensor g = randn({c.B, c.T, c.H * c.hs}, kFloat64, &gen);
      Tensor mask;
      if (c.keep) mask = gt(rand({c.B, 1, c.T, c.T}, kFloat64, &gen), scalar_tensor(0.3, kFloat64));
      if (c.additive) mask = randn({1, c.H, c.T, c.T}, kFloat64, &gen).requires_grad_();
      Generator d1(5), d2(5);
      Tensor packed = scaled_dot_product_attention_packed(qkv, c.H, c.Hkv, AttnMask(mask, c.causal), c.dropout, true,
                                                          0, &d1);
      backward({packed}, {g});
      const Tensor dqkv = qkv.grad(), dmask = c.additive ? mask.grad() : Tensor();
      qkv.zero_grad();
      if (c.additive) mask.zero_grad();
      auto heads_of = [&](int64_t h0, int64_t n) { return transpose(narrow(qkv, 2, h0, n), 1, 2); };
      Tensor split = scaled_dot_product_attention(heads_of(0, c.H), heads_of(c.H, c.Hkv), heads_of(c.H + c.Hkv, c.Hkv),
                                                  AttnMask(mask, c.causal), c.dropout, true, 0, &d2);
      split = reshape(transpose(split, 1, 2), {c.B, c.T, c.H * c.hs});
      backward({split}, {g});
      EXPECT_TRUE(test::tensors_close(packed, split, 1e-12, 1e-12));
      EXPECT_TRUE(test::tensors_close(dqkv, qkv.grad(), 1e-12, 1e-12));
      if (c.additive) {
        EXPECT_TRUE(test::tensors_close(dmask, mask.grad(), 1e-12, 1e-12));
      }
    }
  }
}

TEST(AttentionGrad, Packed) {
  EXPECT_GRADCHECK([](const V& x) { return scaled_dot_product_attention_packed(x[0], 4, 2); },
                   {randn64({2, 3, 8, 4}, 31)});
  EXPECT_GRADCHECK([](const V& x) { return scaled_dot_product_attention_packed(x[0], 2, 1, AttnMask(x[1], true)); },
                   {randn64({1, 4, 4, 3}, 32), randn64({2, 4, 4}, 33)});
}

TEST(Attention, PackedErrors) {
  EXPECT_XG_ERROR(scaled_dot_product_attention_packed(zeros({2, 3, 7, 4}), 4, 2),
                  "scaled_dot_product_attention_packed: expected qkv [B, T, n_heads + 2 n_kv_heads = 8, hs], got [2,3,7,4]");
  EXPECT_XG_ERROR(scaled_dot_product_attention_packed(zeros({2, 3, 7, 4}), 3, 2),
                  "n_heads 3 must be a positive multiple of n_kv_heads 2");
  EXPECT_XG_ERROR(scaled_dot_product_attention_packed(zeros({2, 3, 8, 4}, kInt64), 4, 2),
                  "expected a float32 or float64 qkv, got int64");
  EXPECT_XG_ERROR(scaled_dot_product_attention_packed(zeros({2, 3, 8, 4}), 4, 2, AttnMask(zeros({3, 4}, kBool))),
                  "mask [3,4] does not broadcast to [B, H, Tq, Tk] = [2,4,3,3]");
}

// Dropout draws the same numbers as xg::dropout on the weights with the same generator.
TEST(Attention, DropoutMatchesDropoutOnTheWeights) {
  Tensor q = randn64({2, 2, 5, 4}, 1), k = randn64({2, 2, 6, 4}, 2), v = randn64({2, 2, 6, 3}, 3);
  Generator g1(42), g2(42);
  Tensor a = scaled_dot_product_attention(q, k, v, {}, 0.3, true, 0, &g1);
  Tensor b = composite(q, k, v, Tensor(), false, 0.3, &g2);
  EXPECT_TRUE(test::tensors_close(a, b, 1e-12, 1e-12));
  // some weights were dropped: the result differs from eval mode
  Tensor e = scaled_dot_product_attention(q, k, v, {}, 0.3, false);
  EXPECT_FALSE(test::tensors_close(a, e, 1e-6, 1e-6));
  EXPECT_TRUE(test::tensors_close(e, composite(q, k, v, Tensor(), false), 1e-12, 1e-12));
}

// --- float64 gradient checks -------------------------------------------------------------------

TEST(AttentionGrad, Plain) {
  EXPECT_GRADCHECK(sdpa, {randn64({2, 2, 3, 4}, 1), randn64({2, 2, 5, 4}, 2), randn64({2, 2, 5, 3}, 3)});
}

TEST(AttentionGrad, BoolMaskAndCausal) {
  Tensor keep = from_vector(std::vector<double>{1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1}, {1, 1, 4, 4}, kBool);
  EXPECT_GRADCHECK(sdpa_mask, {randn64({2, 2, 4, 3}, 4), randn64({2, 2, 4, 3}, 5), randn64({2, 2, 4, 3}, 6), keep});
  EXPECT_GRADCHECK(sdpa_mask_causal,
                   {randn64({2, 2, 4, 3}, 7), randn64({2, 2, 4, 3}, 8), randn64({2, 2, 4, 3}, 9), keep});
  // Tq < Tk: the new queries of a decoding step against a longer cache
  EXPECT_GRADCHECK(sdpa_causal, {randn64({1, 2, 2, 3}, 10), randn64({1, 2, 5, 3}, 11), randn64({1, 2, 5, 2}, 12)});
}

TEST(AttentionGrad, AdditiveMaskGetsAGradient) {
  Tensor bias = randn64({1, 2, 3, 4}, 13);  // broadcast over the batch
  EXPECT_GRADCHECK(sdpa_mask,
                   {randn64({2, 2, 3, 4}, 14), randn64({2, 2, 4, 4}, 15), randn64({2, 2, 4, 2}, 16), bias});
  Tensor triu = from_vector({0, -kInf, -kInf, 0, 0, -kInf, 0, 0, 0}, {3, 3}, kFloat64);  // constant
  EXPECT_GRADCHECK(sdpa_mask, {randn64({1, 2, 3, 2}, 17), randn64({1, 2, 3, 2}, 18), randn64({1, 2, 3, 2}, 19), triu});
}

TEST(AttentionGrad, GroupedHeads) {
  EXPECT_GRADCHECK(sdpa, {randn64({2, 6, 3, 4}, 20), randn64({2, 2, 4, 4}, 21), randn64({2, 2, 4, 3}, 22)});
  EXPECT_GRADCHECK(sdpa_causal, {randn64({1, 4, 3, 2}, 23), randn64({1, 1, 3, 2}, 24), randn64({1, 1, 3, 2}, 25)});
}

// The gradient checks above keep the weights (small problems); these recompute them.
TEST(AttentionGrad, RecomputedWeights) {
  KeptWeightsScope recompute(0);
  Tensor keep = from_vector(std::vector<double>{1, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1}, {1, 1, 4, 4}, kBool);
  EXPECT_GRADCHECK(sdpa_mask_causal,
                   {randn64({2, 2, 4, 3}, 7), randn64({2, 2, 4, 3}, 8), randn64({2, 2, 4, 3}, 9), keep});
  EXPECT_GRADCHECK(sdpa_mask, {randn64({2, 2, 3, 4}, 14), randn64({2, 2, 4, 4}, 15), randn64({2, 2, 4, 2}, 16),
                               randn64({1, 2, 3, 4}, 13)});
  EXPECT_GRADCHECK(sdpa, {randn64({2, 6, 3, 4}, 20), randn64({2, 2, 4, 4}, 21), randn64({2, 2, 4, 3}, 22)});
  EXPECT_GRADCHECK([](const V& x) { return scaled_dot_product_attention_packed(x[0], 4, 2); },
                   {randn64({2, 3, 8, 4}, 31)});
  EXPECT_XG_ERROR(set_attention_kept_weights_max(-1), "set_attention_kept_weights_max: expected a count >= 0, got -1");
}

TEST(AttentionGrad, Dropout) {
  auto fn = [](const V& x) {
    Generator gen(7);  // the same draws on every call
    return scaled_dot_product_attention(x[0], x[1], x[2], AttnMask::causal_mask(), 0.4, true, 0, &gen);
  };
  EXPECT_GRADCHECK(fn, {randn64({2, 2, 4, 3}, 26), randn64({2, 2, 4, 3}, 27), randn64({2, 2, 4, 3}, 28)});
}

TEST(Attention, NoGraphWithoutGrad) {
  Tensor q = randn64({1, 1, 2, 2}, 1);
  NoGradGuard guard;
  Tensor out = scaled_dot_product_attention(q, q, q);
  EXPECT_FALSE(out.requires_grad());
}

// --- errors -----------------------------------------------------------------------------------

TEST(Attention, Errors) {
  Tensor q = zeros({2, 4, 3, 8}), k = zeros({2, 2, 5, 8}), v = zeros({2, 2, 5, 6});
  EXPECT_XG_ERROR(scaled_dot_product_attention(zeros({4, 3, 8}), k, v), "expected q [B, H, Tq, hs]");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, zeros({2, 3, 5, 8}), zeros({2, 3, 5, 6})),
                  "query heads 4 are not a multiple of kv heads 3");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, zeros({2, 2, 5, 7}), v), "q and k head sizes differ (8 vs 7)");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, k, zeros({2, 2, 4, 6})),
                  "k and v must have the same heads and length");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, zeros({3, 2, 5, 8}), zeros({3, 2, 5, 6})), "batch sizes differ");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, k.to(kFloat64), v), "dtype mismatch");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, k, v, AttnMask(zeros({3, 4}, kBool))),
                  "mask [3,4] does not broadcast to [B, H, Tq, Tk] = [2,4,3,5]");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, k, v, AttnMask(zeros({3, 5}, kInt64))),
                  "mask must be bool (true = keep) or additive of q's dtype float32, got int64");
  EXPECT_XG_ERROR(scaled_dot_product_attention(zeros({2, 4, 6, 8}), k, v, AttnMask::causal_mask()),
                  "causal mask needs at least as many keys as queries (aligned to the end), got Tq = 6 and Tk = 5");
  EXPECT_XG_ERROR(scaled_dot_product_attention(q, k, v, {}, 1.0, true), "dropout_p must be in [0, 1), got 1");
  EXPECT_XG_ERROR(scaled_dot_product_attention(zeros({2, 4, 3, 8}, kInt64), zeros({2, 2, 5, 8}, kInt64),
                                               zeros({2, 2, 5, 6}, kInt64)),
                  "expected float32 or float64 tensors, got int64");
}

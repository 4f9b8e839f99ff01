// Tests for nn/attention_*.cpp: MultiHeadAttention, GroupedQueryAttention (MQA, QK-Norm,
// RoPE) and MultiLatentAttention against plain-PyTorch classes with the same weights and
// attribute names (tests/fixtures/gen_nn_attention.py); float64 gradient checks; KV-cache
// decoding against the full causal forward; KV-cache size tables (LLaMA-7B's heads, a d_model
// 512 model with MLA); state-dict names; errors.
#include "nn/attention.hpp"

#include <cmath>
#include <cstdio>

#include "autograd/graph.hpp"
#include "autograd/shape.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using xg::test::param_names;
using xg::test::randomize64;
using xg::test::with_params;
using test::expect_module_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

// GQA's spec with nn.Linear's output bias, as the fixtures' classes have it.
GQASpec gqa_spec(int64_t n_heads, int64_t n_kv_heads) {
  GQASpec s;
  s.n_heads = n_heads;
  s.n_kv_heads = n_kv_heads;
  s.out_bias = true;
  return s;
}

MLASpec mla_spec(int64_t n_heads, int64_t head_dim, int64_t latent_dim, int64_t rope_dim) {
  MLASpec s;
  s.n_heads = n_heads;
  s.head_dim = head_dim;
  s.latent_dim = latent_dim;
  s.rope_dim = rope_dim;
  return s;
}

// The block settings an attention is built with: d_model, RoPE or not, 4096 positions.
SublayerContext attn_ctx(int64_t d_model, bool rope = false) {
  SublayerContext c;
  c.d_model = d_model;
  c.rope = rope;
  c.max_seq_len = 4096;
  return c;
}

// Runs `step(x_chunk, cache)` over x [B, T, C] in chunks of the given sizes and concatenates
// the outputs along T.
template <class Step>
Tensor decode_in_chunks(const Tensor& x, const std::vector<int64_t>& chunks, Step step) {
  KVCache cache;
  std::vector<Tensor> outs;
  int64_t t = 0;
  for (int64_t n : chunks) {
    outs.push_back(step(narrow(x, 1, t, n), cache));
    t += n;
  }
  EXPECT_EQ(t, x.size(1));
  EXPECT_EQ(cache.length, x.size(1));
  return cat(outs, int64_t{1});
}

}  // namespace

// --- values and gradients against the PyTorch classes of gen_nn_attention.py -----------------

TEST(NNAttentionTorch, MultiHeadAttention) {
  MultiHeadAttention mha(16, 4);
  expect_module_matches_torch("nn_attention", "mha_self", mha,
                              [&](const V& x) { return mha(x[0], Tensor(), AttnMask(x[1])); });
  expect_module_matches_torch("nn_attention", "mha_cross", mha,
                              [&](const V& x) { return mha(x[0], x[1], AttnMask(x[2])); });
  MultiHeadAttention nobias(12, 3, 0.0, /*bias=*/false);
  expect_module_matches_torch("nn_attention", "mha_nobias", nobias, [&](const V& x) { return nobias(x[0]); });
}

TEST(NNAttentionTorch, GroupedQueryAttention) {
  GroupedQueryAttention gqa(gqa_spec(8, 2), attn_ctx(32));
  expect_module_matches_torch("nn_attention", "gqa_8_2", gqa, [&](const V& x) { return gqa(x[0], AttnMask(x[1])); });
  GroupedQueryAttention mqa(gqa_spec(4, 1), attn_ctx(16));
  expect_module_matches_torch("nn_attention", "mqa", mqa, [&](const V& x) { return mqa(x[0]); });
}

TEST(NNAttentionTorch, QKNormAndRope) {
  GQASpec o = gqa_spec(4, 2);
  o.qkv_bias = true;
  o.qk_norm = true;
  GroupedQueryAttention qk(o, attn_ctx(16, /*rope=*/true));
  expect_module_matches_torch("nn_attention", "gqa_qknorm_rope", qk,
                              [&](const V& x) { return qk(x[0], AttnMask(x[1])); });
  SublayerContext ci = attn_ctx(16, /*rope=*/true);
  ci.rope_layout = RopeLayout::Interleaved;
  GroupedQueryAttention inter(gqa_spec(2, 2), ci);
  expect_module_matches_torch("nn_attention", "gqa_rope_interleaved", inter,
                              [&](const V& x) { return inter(x[0], AttnMask(x[1])); });
  // gen_nn_attention.py's GroupedQueryAttention_QKNorm: W_q .. W_o, no bias, an additive mask.
  GQASpec o1 = gqa_spec(4, 2);
  o1.out_bias = false;
  o1.qk_norm = true;
  GroupedQueryAttention upper(o1, attn_ctx(16), AttentionNaming::Uppercase);
  expect_module_matches_torch("nn_attention", "gqa_seed1_qknorm", upper,
                              [&](const V& x) { return upper(x[0], AttnMask(x[1])); });
}

// Heads of their own width (Qwen3-style: 4 heads x 6 on d_model 16), q/k/v biases without an
// output bias (Qwen2-style), QK-Norm and RoPE.
TEST(NNAttentionTorch, GroupedQueryAttentionWithItsOwnHeadDim) {
  GQASpec o = gqa_spec(4, 2);
  o.head_dim = 6;
  o.qkv_bias = true;
  o.out_bias = false;
  o.qk_norm = true;
  GroupedQueryAttention gqa(o, attn_ctx(16, /*rope=*/true));
  expect_module_matches_torch("nn_attention", "gqa_head_dim", gqa, [&](const V& x) { return gqa(x[0], AttnMask(x[1])); });
}

TEST(NNAttentionTorch, MultiLatentAttention) {
  MultiLatentAttention mla(mla_spec(4, 4, 8, 4), attn_ctx(16, /*rope=*/true));
  expect_module_matches_torch("nn_attention", "mla", mla, [&](const V& x) { return mla(x[0], AttnMask(x[1])); });
  MLASpec od = mla_spec(4, 4, 8, 4);
  od.decoupled_rope_key = true;
  MultiLatentAttention dec(od, attn_ctx(16, /*rope=*/true));
  expect_module_matches_torch("nn_attention", "mla_decoupled", dec,
                              [&](const V& x) { return dec(x[0], AttnMask(x[1])); });
  MLASpec oq = mla_spec(2, 6, 5, 2);
  oq.q_latent_dim = 0;
  MultiLatentAttention noq(oq, attn_ctx(12, /*rope=*/true));
  expect_module_matches_torch("nn_attention", "mla_no_q_latent", noq, [&](const V& x) { return noq(x[0]); });
  // gen_nn_attention.py's MultiHeadLatentAttention(16, 4, 6), the minimal low-rank-KV form:
  // W_q, W_kv_down, W_k_up, W_v_up, W_o; no RoPE, no q compression.
  MLASpec o1 = mla_spec(4, 4, 6, 0);
  o1.q_latent_dim = 0;
  MultiLatentAttention capitalized(o1, attn_ctx(16), LatentAttentionNaming::Capitalized);
  expect_module_matches_torch("nn_attention", "mla_seed1", capitalized,
                              [&](const V& x) { return capitalized(x[0], AttnMask(x[1])); });
}

// --- state-dict names ----------------------------------------------------------------------------

TEST(NNAttention, ParameterNamesOfEachNaming) {
  EXPECT_EQ(param_names(MultiHeadAttention(8, 2)),
            (std::vector<std::string>{"w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias", "w_v.weight", "w_v.bias",
                                      "w_o.weight", "w_o.bias"}));
  EXPECT_EQ(param_names(GroupedQueryAttention(gqa_spec(4, 2), attn_ctx(8))),
            (std::vector<std::string>{"w_q.weight", "w_k.weight", "w_v.weight", "w_o.weight", "w_o.bias"}));
  GQASpec o1 = gqa_spec(4, 2);
  o1.out_bias = false;
  o1.qk_norm = true;
  // with RoPE: its tables are non-persistent buffers, not in the state dict
  GroupedQueryAttention g1(o1, attn_ctx(8, /*rope=*/true), AttentionNaming::Uppercase);
  EXPECT_EQ(param_names(g1), (std::vector<std::string>{"W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight",
                                                 "q_norm.weight", "k_norm.weight"}));
  EXPECT_EQ(g1.state_dict().size(), 6u);
  EXPECT_EQ(param_names(MultiLatentAttention(mla_spec(2, 4, 4, 2), attn_ctx(8, /*rope=*/true))),
            (std::vector<std::string>{"kv_down_proj.weight", "kv_up_proj.weight", "q_down_proj.weight",
                                      "q_up_proj.weight", "o_proj.weight"}));
  // the shapes of a hand-written MLA with these names: kv_up_proj [H (hd + rd + hd), latent],
  // q_up_proj [H (hd + rd), latent]
  MultiLatentAttention m(mla_spec(8, 64, 128, 32), attn_ctx(512, /*rope=*/true));
  EXPECT_EQ(m.state_dict().at("kv_up_proj.weight").shape(), (Shape{8 * (64 + 32 + 64), 128}));
  EXPECT_EQ(m.state_dict().at("q_up_proj.weight").shape(), (Shape{8 * (64 + 32), 128}));
  EXPECT_EQ(m.state_dict().at("o_proj.weight").shape(), (Shape{512, 8 * 64}));
}

// --- float64 gradient checks --------------------------------------------------------------------

TEST(NNAttentionGrad, MultiHeadAttention) {
  MultiHeadAttention mha(6, 2);
  randomize64(mha, 1);
  Tensor keep = from_vector(std::vector<double>{1, 0, 1, 1, 1, 0, 1, 1, 1}, {1, 1, 3, 3}, kBool);
  EXPECT_GRADCHECK([&](const V& in) { return mha(in[0], Tensor(), AttnMask(keep)); },
                   with_params(randn64({2, 3, 6}, 2), mha));
  Tensor ctx = randn64({2, 4, 6}, 3);
  EXPECT_GRADCHECK([&](const V& in) { return mha(in[0], in[1]); }, {randn64({2, 2, 6}, 4), ctx});
}

TEST(NNAttentionGrad, GroupedQueryAttentionWithQKNormAndRope) {
  GQASpec o = gqa_spec(4, 2);
  o.qkv_bias = true;
  o.qk_norm = true;
  GroupedQueryAttention gqa(o, attn_ctx(8, /*rope=*/true));
  randomize64(gqa, 5);
  EXPECT_GRADCHECK([&](const V& in) { return gqa(in[0], AttnMask::causal_mask()); },
                   with_params(randn64({2, 3, 8}, 6), gqa));
}

// A head width of its own (Qwen3: 16 heads of 128 on hidden 1024): q is [n_heads * head_dim],
// w_o maps it back to d_model; q/k/v biases without an output bias (Qwen2).
TEST(NNAttentionGrad, GroupedQueryAttentionWithItsOwnHeadDim) {
  GQASpec o = gqa_spec(2, 1);
  o.head_dim = 4;
  o.qkv_bias = true;
  o.out_bias = false;
  o.qk_norm = true;
  GroupedQueryAttention gqa(o, attn_ctx(6, /*rope=*/true));
  EXPECT_EQ(gqa.head_dim(), 4);
  EXPECT_EQ(gqa.w_q()->weight().shape(), (Shape{8, 6}));
  EXPECT_EQ(gqa.w_k()->weight().shape(), (Shape{4, 6}));
  EXPECT_EQ(gqa.w_o()->weight().shape(), (Shape{6, 8}));
  EXPECT_TRUE(gqa.w_v()->bias().defined());
  EXPECT_FALSE(gqa.w_o()->bias().defined());
  EXPECT_EQ(gqa.kv_cache_bytes_per_token(2), 2 * 1 * 4 * 2);
  randomize64(gqa, 15);
  EXPECT_GRADCHECK([&](const V& in) { return gqa(in[0], AttnMask::causal_mask()); },
                   with_params(randn64({2, 3, 6}, 16), gqa));
  o.head_dim = 3;  // RoPE rotates pairs
  EXPECT_XG_ERROR(GroupedQueryAttention(o, attn_ctx(6, /*rope=*/true)),
                  "GroupedQueryAttention: RoPE needs an even head_dim, got 3");
}

namespace {

// The module's output, dx and its parameters' gradients for x and upstream g, with a fresh KV
// cache (separate q, k, v projections) or without one (one packed projection).
template <class Attn>
std::vector<Tensor> output_and_grads(Attn& attn, Tensor x, const Tensor& g, bool with_cache) {
  KVCache cache;
  Tensor y = attn.forward(x, AttnMask::causal_mask(), with_cache ? &cache : nullptr, 0);
  backward({y}, {g});
  std::vector<Tensor> r = {y.detach(), x.grad()};
  x.zero_grad();
  for (Tensor& p : attn.parameters()) {
    r.push_back(p.grad());
    p.zero_grad();
  }
  return r;
}

void expect_packed_equals_split(const std::vector<Tensor>& packed, const std::vector<Tensor>& split) {
  ASSERT_EQ(packed.size(), split.size());
  for (std::size_t i = 0; i < packed.size(); ++i) {
    SCOPED_TRACE(str_cat("tensor ", i, " (out, dx, then the parameters' gradients)"));
    EXPECT_TRUE(test::tensors_close(packed[i], split[i], 1e-12, 1e-12));
  }
}

}  // namespace

// Without QK-Norm, adapters or a KV cache, q, k and v run as one projection and the attention
// reads it in place (scaled_dot_product_attention_packed): float64 gradient checks, and the
// same output and gradients as the separate projections a KV cache takes.
TEST(NNAttentionGrad, GroupedQueryAttentionPackedProjection) {
  for (bool bias : {false, true}) {
    for (bool rope : {false, true}) {
      SCOPED_TRACE(str_cat("bias=", bias, " rope=", rope));
      GQASpec o = gqa_spec(4, 2);
      o.qkv_bias = bias;
      GroupedQueryAttention gqa(o, attn_ctx(8, rope));
      randomize64(gqa, 25);
      EXPECT_GRADCHECK([&](const V& in) { return gqa(in[0], AttnMask::causal_mask()); },
                       with_params(randn64({2, 3, 8}, 26), gqa));
      Tensor x = randn64({2, 5, 8}, 27).requires_grad_(), g = randn64({2, 5, 8}, 28);
      expect_packed_equals_split(output_and_grads(gqa, x, g, false), output_and_grads(gqa, x, g, true));
    }
  }
}

// The teaching MultiHeadAttention packs its self-attention the same way (not cross-attention).
TEST(NNAttentionGrad, MultiHeadAttentionPackedProjection) {
  MultiHeadAttention mha(8, 2, 0.0, true);
  randomize64(mha, 29);
  Tensor x = randn64({2, 5, 8}, 30).requires_grad_(), g = randn64({2, 5, 8}, 31);
  expect_packed_equals_split(output_and_grads(mha, x, g, false), output_and_grads(mha, x, g, true));
}

TEST(NNAttentionGrad, MultiLatentAttention) {
  for (bool decoupled : {false, true}) {
    SCOPED_TRACE(decoupled ? "decoupled rope key" : "rope key from the latent");
    MLASpec o = mla_spec(2, 2, 3, 2);
    o.decoupled_rope_key = decoupled;
    MultiLatentAttention mla(o, attn_ctx(6, /*rope=*/true));
    randomize64(mla, 7);
    EXPECT_GRADCHECK([&](const V& in) { return mla(in[0], AttnMask::causal_mask()); },
                     with_params(randn64({2, 3, 6}, 8), mla));
  }
}

// --- KV cache -------------------------------------------------------------------------------------

// Decoding token by token, or in chunks, gives the full causal forward's outputs.
TEST(NNAttentionCache, DecodingMatchesTheFullForward) {
  GQASpec og = gqa_spec(4, 2);
  og.qk_norm = true;
  MLASpec om = mla_spec(4, 4, 8, 4);
  MLASpec omd = om;
  omd.decoupled_rope_key = true;
  MLASpec om1 = mla_spec(4, 4, 6, 0);
  om1.q_latent_dim = 0;
  const SublayerContext plain = attn_ctx(16), with_rope = attn_ctx(16, /*rope=*/true);

  MultiHeadAttention mha(16, 4);
  GroupedQueryAttention gqa(og, with_rope), mqa(gqa_spec(4, 1), plain);
  MultiLatentAttention mla(om, with_rope), mla_dec(omd, with_rope),
      mla_capitalized(om1, plain, LatentAttentionNaming::Capitalized);
  struct Named {
    const char* name;
    std::function<Tensor(const Tensor&, const AttnMask&, KVCache*)> fwd;
  };
  const std::vector<Named> modules = {
      {"MHA", [&](const Tensor& x, const AttnMask& m, KVCache* c) { return mha(x, Tensor(), m, c); }},
      {"GQA", [&](const Tensor& x, const AttnMask& m, KVCache* c) { return gqa(x, m, c); }},
      {"MQA", [&](const Tensor& x, const AttnMask& m, KVCache* c) { return mqa(x, m, c); }},
      {"MLA", [&](const Tensor& x, const AttnMask& m, KVCache* c) { return mla(x, m, c); }},
      {"MLA decoupled", [&](const Tensor& x, const AttnMask& m, KVCache* c) { return mla_dec(x, m, c); }},
      {"MLA W_kv_down", [&](const Tensor& x, const AttnMask& m, KVCache* c) { return mla_capitalized(x, m, c); }},
  };
  NoGradGuard no_grad;
  Generator gen(3);
  Tensor x = randn({2, 7, 16}, kFloat32, &gen);
  for (const Named& m : modules) {
    SCOPED_TRACE(m.name);
    Tensor full = m.fwd(x, AttnMask::causal_mask(), nullptr);
    auto step = [&](const Tensor& xc, KVCache& cache) { return m.fwd(xc, AttnMask::causal_mask(), &cache); };
    EXPECT_TRUE(test::tensors_close(decode_in_chunks(x, {1, 1, 1, 1, 1, 1, 1}, step), full, 1e-5, 1e-6));
    EXPECT_TRUE(test::tensors_close(decode_in_chunks(x, {3, 1, 3}, step), full, 1e-5, 1e-6));
    EXPECT_TRUE(test::tensors_close(decode_in_chunks(x, {7}, step), full, 1e-5, 1e-6));
  }
}

// What the cache holds is what kv_cache_bytes_per_token says, per token and batch row.
TEST(NNAttentionCache, BytesHeldMatchBytesPerToken) {
  NoGradGuard no_grad;
  Tensor x = randn({2, 5, 16});
  MultiHeadAttention mha(16, 4);
  GroupedQueryAttention gqa(gqa_spec(4, 2), attn_ctx(16));
  MLASpec od = mla_spec(4, 4, 8, 4);
  od.decoupled_rope_key = true;
  MultiLatentAttention mla(mla_spec(4, 4, 8, 4), attn_ctx(16, /*rope=*/true)), dec(od, attn_ctx(16, /*rope=*/true));
  KVCache c1, c2, c3, c4;
  mha(x, Tensor(), AttnMask::causal_mask(), &c1);
  gqa(x, AttnMask::causal_mask(), &c2);
  mla(x, AttnMask::causal_mask(), &c3);
  dec(x, AttnMask::causal_mask(), &c4);
  EXPECT_EQ(c1.bytes(), 2 * 5 * mha.kv_cache_bytes_per_token(4));
  EXPECT_EQ(c2.bytes(), 2 * 5 * gqa.kv_cache_bytes_per_token(4));
  EXPECT_EQ(c3.bytes(), 2 * 5 * mla.kv_cache_bytes_per_token(4));
  EXPECT_EQ(c4.bytes(), 2 * 5 * dec.kv_cache_bytes_per_token(4));
  EXPECT_EQ(c2.bytes(), c1.bytes() / 2);            // 2 kv heads of 4
  EXPECT_EQ(c3.bytes(), 2 * 5 * 8 * 4);             // the latent alone
  EXPECT_EQ(c4.bytes(), 2 * 5 * (8 + 4) * 4);       // latent + shared rope key
}

// Decoding writes each token into the cache's buffers in place: they double when full
// (prefill 4 -> 4, then 8 at the 5th token, 16 at the 9th) and keep their storage in between,
// so a token copies only itself. Under grad mode the cache stays exactly the cached tokens
// and carries the graph: a later step's output has a gradient in an earlier step's input.
TEST(NNAttentionCache, DecodingWritesTheBuffersInPlace) {
  GroupedQueryAttention gqa(gqa_spec(4, 2), attn_ctx(16, /*rope=*/true));
  Generator gen(4);
  const Tensor x = randn({2, 10, 16}, kFloat32, &gen);
  Tensor full_out;
  {
    NoGradGuard no_grad;
    full_out = gqa(x, AttnMask::causal_mask());
    KVCache cache;
    std::vector<Tensor> parts = {gqa(narrow(x, 1, 0, 4), AttnMask::causal_mask(), &cache)};
    EXPECT_EQ(cache.k.size(2), 4);
    const void* storage = nullptr;
    for (int64_t t = 4; t < 10; ++t) {
      parts.push_back(gqa(narrow(x, 1, t, 1), AttnMask::causal_mask(), &cache));
      EXPECT_EQ(cache.length, t + 1);
      EXPECT_EQ(cache.k.size(2), t < 8 ? 8 : 16) << "token " << t;
      EXPECT_EQ(cache.v.size(2), cache.k.size(2));
      if (t == 5) storage = cache.k.raw_data();  // doubled to 8 at the 5th token
      if (t == 6 || t == 7) {
        EXPECT_EQ(cache.k.raw_data(), storage) << "token " << t << " moved the buffer";
      }
    }
    EXPECT_EQ(cache.bytes(), 2 * 2 * 2 * 10 * 4 * 4);  // k and v, batch 2, 2 kv heads, 10 tokens, hs 4, float32
    EXPECT_TRUE(test::tensors_close(cat(parts, 1), full_out, 1e-5, 1e-6));
  }
  KVCache cache;  // grad mode
  Tensor xg = x.detach().requires_grad_();
  gqa(narrow(xg, 1, 0, 4), AttnMask::causal_mask(), &cache);
  const Tensor last = gqa(narrow(xg, 1, 4, 1), AttnMask::causal_mask(), &cache);
  EXPECT_EQ(cache.k.size(2), 5);
  EXPECT_TRUE(test::tensors_close(last, narrow(full_out, 1, 4, 1), 1e-5, 1e-6));
  sum(last).backward();
  EXPECT_GT(sum(abs(narrow(xg.grad(), 1, 0, 4))).item<float>(), 0.0f) << "no gradient reached the prefill's tokens";
}

// clone() branches a cache: after a prefill and one decoded token (6 cached, room for 10),
// one copy decodes a then c and the clone decodes b, both writing at position 6 of their
// buffers; each branch equals its full forward. A plain copy would share the buffer, and b
// would overwrite a's key there before c reads it.
TEST(NNAttentionCache, CloneBranchesACache) {
  NoGradGuard no_grad;
  GroupedQueryAttention gqa(gqa_spec(4, 2), attn_ctx(16, /*rope=*/true));
  Generator gen(8);
  const Tensor prefix = randn({1, 6, 16}, kFloat32, &gen), a = randn({1, 1, 16}, kFloat32, &gen),
               b = randn({1, 1, 16}, kFloat32, &gen), c = randn({1, 1, 16}, kFloat32, &gen);
  KVCache cache;
  gqa(narrow(prefix, 1, 0, 5), AttnMask::causal_mask(), &cache);
  gqa(narrow(prefix, 1, 5, 1), AttnMask::causal_mask(), &cache);
  ASSERT_EQ(cache.k.size(2), 10);
  KVCache branch = cache.clone();
  EXPECT_EQ(branch.length, 6);
  EXPECT_NE(branch.k.raw_data(), cache.k.raw_data());
  gqa(a, AttnMask::causal_mask(), &cache);
  const Tensor b1 = gqa(b, AttnMask::causal_mask(), &branch);
  const Tensor c1 = gqa(c, AttnMask::causal_mask(), &cache);
  const Tensor full_b = narrow(gqa(cat({prefix, b}, 1), AttnMask::causal_mask()), 1, 6, 1);
  const Tensor full_c = narrow(gqa(cat({prefix, a, c}, 1), AttnMask::causal_mask()), 1, 7, 1);
  EXPECT_TRUE(test::tensors_close(b1, full_b, 1e-5, 1e-6));
  EXPECT_TRUE(test::tensors_close(c1, full_c, 1e-5, 1e-6));
}

// A step of no tokens into an empty cache is refused (no keys to attend to) and leaves a cache
// whose size reads 0 bytes (an empty buffer once divided bytes() by its zero capacity).
TEST(NNAttentionCache, NoTokensIntoAnEmptyCache) {
  NoGradGuard no_grad;
  GroupedQueryAttention gqa(gqa_spec(2, 1), attn_ctx(8));
  KVCache cache;
  EXPECT_XG_ERROR(gqa(zeros({1, 0, 8}), AttnMask::causal_mask(), &cache), "no keys");
  EXPECT_EQ(cache.length, 0);
  EXPECT_EQ(cache.bytes(), 0);
}

// A start_pos inside the cache rolls it back: re-decoding the last tokens gives the same result.
TEST(NNAttentionCache, RollBackWithStartPos) {
  NoGradGuard no_grad;
  GroupedQueryAttention gqa(gqa_spec(2, 1), attn_ctx(8, /*rope=*/true));
  Tensor x = randn({1, 6, 8});
  Tensor full = gqa(x, AttnMask::causal_mask());
  KVCache cache;
  gqa(x, AttnMask::causal_mask(), &cache);
  EXPECT_EQ(cache.length, 6);
  Tensor tail = gqa(narrow(x, 1, 4, 2), AttnMask::causal_mask(), &cache, /*start_pos=*/4);
  EXPECT_EQ(cache.length, 6);
  EXPECT_EQ(cache.k.size(2), 6);
  EXPECT_TRUE(test::tensors_close(tail, narrow(full, 1, 4, 2), 1e-5, 1e-6));
}

// --- KV-cache size tables, from module configs ------------------------------------------------

// MHA / GQA-4 / GQA-8 / MQA at LLaMA-7B's 32 query heads of 128, 4096 tokens in bf16 (2 bytes).
TEST(NNAttentionCache, LLaMA7BKVCacheTable) {
  const int64_t seq_len = 4096, bf16 = 2;
  auto mb = [&](int64_t kv_heads) {
    const int64_t bytes = gqa_spec(32, kv_heads).kv_cache_bytes_per_token(attn_ctx(32 * 128), bf16);
    return static_cast<double>(bytes * seq_len) / (1024.0 * 1024.0);
  };
  const double mha = mb(32), gqa4 = mb(4), gqa8 = mb(8), mqa = mb(1);
  // per layer: 64.0 MB (100.0%), 8.0 MB (12.5%), 16.0 MB (25.0%), 2.0 MB (3.1%), MB = 2^20 bytes
  EXPECT_EQ(mha, 64.0);
  EXPECT_EQ(gqa4, 8.0);
  EXPECT_EQ(gqa8, 16.0);
  EXPECT_EQ(mqa, 2.0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %.1f %.1f %.1f", gqa4 / mha * 100, gqa8 / mha * 100, mqa / mha * 100,
                mha / mha * 100);
  EXPECT_STREQ(buf, "12.5 25.0 3.1 100.0");
  // MHA with the same dims holds the same as GQA with n_kv_heads = n_heads
  EXPECT_EQ(MHASpec{32}.kv_cache_bytes_per_token(attn_ctx(32 * 128), bf16) * seq_len, 64 * 1024 * 1024);
}

// MHA / GQA-4 / GQA-2 / MLA at d_model 512, 8 heads of 64, a 64-dim latent, 4096 tokens in bf16.
TEST(NNAttentionCache, Dim512MHAGQAMLATable) {
  const int64_t seq_len = 4096, bf16 = 2;
  auto gqa_bytes = [&](int64_t kv) {
    return gqa_spec(8, kv).kv_cache_bytes_per_token(attn_ctx(512), bf16) * seq_len;
  };
  const MLASpec o = mla_spec(8, 64, 64, 0);  // "only the joint latent c_KV"
  const int64_t mha = gqa_bytes(8), gqa4 = gqa_bytes(4), gqa2 = gqa_bytes(2);
  const int64_t mla = o.kv_cache_bytes_per_token(attn_ctx(512), bf16) * seq_len;
  auto mb = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  // "MHA 8.0 MB (100%)", "GQA-4 4.0 MB (50%)", "GQA-2 2.0 MB (25%)", "MLA 0.5 MB (6%)"
  EXPECT_EQ(mb(mha), 8.0);
  EXPECT_EQ(mb(gqa4), 4.0);
  EXPECT_EQ(mb(gqa2), 2.0);
  EXPECT_EQ(mb(mla), 0.5);
  EXPECT_EQ(static_cast<int>(100.0 * mla / mha), 6);
  // "MHA -> GQA-4: 50%", "MHA -> MLA: 94%", "GQA-4 -> MLA: 88%" (Python's round half to even)
  EXPECT_EQ(std::nearbyint((1.0 - static_cast<double>(gqa4) / mha) * 100), 50);
  EXPECT_EQ(std::nearbyint((1.0 - static_cast<double>(mla) / mha) * 100), 94);
  EXPECT_EQ(std::nearbyint((1.0 - static_cast<double>(mla) / gqa4) * 100), 88);
  // per token in elements: MHA 2 * 4 * 16 = 128 vs MLA d_latent 16 for d_model 64, 4 heads
  EXPECT_EQ(gqa_spec(4, 4).kv_cache_bytes_per_token(attn_ctx(64), 1), 128);
  EXPECT_EQ(mla_spec(4, 16, 16, 0).kv_cache_bytes_per_token(attn_ctx(64), 1), 16);
}

// MLA with a RoPE key (d_model 512, 8 heads of 64, latent 128, rope_dim 32) against MHA, in
// elements for batch 2: MHA 1,048,576, MLA 163,840, ratio 6.4. NOTE: the usual hand-written
// form of this count, batch * 2 * model_dim * head_num * head_dim against batch * model_dim *
// (latent_dim + rope_dim), multiplies by model_dim (d_model) where it means the sequence
// length; the numbers are those of 512 tokens.
TEST(NNAttentionCache, MLAWithRopeKeyCachesLessThanMHA) {
  MLASpec o = mla_spec(8, 64, 128, 32);
  const SublayerContext ctx = attn_ctx(512, /*rope=*/true);
  o.decoupled_rope_key = true;  // the latent and the rope key are cached
  const int64_t batch = 2, tokens = 512;
  const int64_t mha = batch * tokens * MHASpec{8}.kv_cache_bytes_per_token(attn_ctx(8 * 64), 1);
  const int64_t mla = batch * tokens * o.kv_cache_bytes_per_token(ctx, 1);
  EXPECT_EQ(mha, 1048576);
  EXPECT_EQ(mla, 163840);
  EXPECT_DOUBLE_EQ(static_cast<double>(mha) / mla, 6.4);
  // with k_rope derived from the latent (decoupled_rope_key false), only the latent is cached
  o.decoupled_rope_key = false;
  EXPECT_EQ(o.kv_cache_bytes_per_token(ctx, 1), 128);
}

// --- modes and errors ------------------------------------------------------------------------------

TEST(NNAttention, DropoutOnlyInTraining) {
  MultiHeadAttention mha(8, 2, 0.5);
  Tensor x = randn({2, 4, 8});
  mha.eval();
  Tensor a = mha(x), b = mha(x);
  EXPECT_TRUE(test::tensors_close(a, b, 0, 0));
  mha.train();
  EXPECT_FALSE(test::tensors_close(mha(x), a, 1e-6, 1e-6));
}

TEST(NNAttention, Errors) {
  EXPECT_XG_ERROR(MultiHeadAttention(10, 4), "MultiHeadAttention: d_model 10 is not divisible by n_heads 4");
  EXPECT_XG_ERROR(GroupedQueryAttention(gqa_spec(8, 3), attn_ctx(16)),
                  "GroupedQueryAttention: n_heads 8 is not divisible by n_kv_heads 3");
  EXPECT_XG_ERROR(GroupedQueryAttention(gqa_spec(4, 2), attn_ctx(10)),
                  "GroupedQueryAttention: d_model 10 is not divisible by n_heads 4");
  EXPECT_XG_ERROR(MultiLatentAttention(mla_spec(4, 4, 8, 3), attn_ctx(16, /*rope=*/true)),
                  "rope_dim must be 0 or a positive even number, got 3");
  EXPECT_XG_ERROR(MultiLatentAttention(mla_spec(4, 4, 8, 4), attn_ctx(16, /*rope=*/true), LatentAttentionNaming::Capitalized),
                  "has no RoPE and no q compression");

  MultiHeadAttention mha(8, 2);
  EXPECT_XG_ERROR(mha(zeros({2, 3, 7})), "MultiHeadAttention(d_model=8, n_heads=2): expected x_query [B, T, 8], "
                                         "got [2,3,7]");
  EXPECT_XG_ERROR(mha(zeros({2, 3, 8}), zeros({3, 4, 8})), "have different batch sizes");
  KVCache cache;
  EXPECT_XG_ERROR(mha(zeros({2, 3, 8}), zeros({2, 4, 8}), {}, &cache), "a KV cache is for self-attention");
  mha(zeros({2, 3, 8}), Tensor(), AttnMask::causal_mask(), &cache);
  EXPECT_XG_ERROR(mha(zeros({2, 1, 8}), Tensor(), AttnMask::causal_mask(), &cache, 5),
                  "start_pos 5 is past the 3 cached tokens");
  EXPECT_XG_ERROR(mha(zeros({1, 1, 8}), Tensor(), AttnMask::causal_mask(), &cache),
                  "the cache holds keys [2,2,3,4] (float32) but this step makes [1,2,1,4] (float32)");
  // a mask that does not cover the cached keys names the kernel's shapes
  EXPECT_XG_ERROR(mha(zeros({2, 1, 8}), Tensor(), AttnMask(ones({1, 3}, kBool)), &cache, 3),
                  "mask [1,3] does not broadcast to [B, H, Tq, Tk] = [2,2,1,4]");

  GroupedQueryAttention gqa(gqa_spec(4, 2), attn_ctx(8));
  EXPECT_XG_ERROR(gqa(zeros({3, 8})), "GroupedQueryAttention(d_model=8, n_heads=4, n_kv_heads=2): expected x "
                                      "[B, T, 8], got [3,8]");
  MultiLatentAttention mla(mla_spec(2, 2, 4, 2), attn_ctx(8, /*rope=*/true));
  EXPECT_XG_ERROR(mla(zeros({1, 2, 6})), "expected x [B, T, 8], got [1,2,6]");
  // RoPE positions past max_seq_len are the rotary module's error
  SublayerContext small = attn_ctx(8, /*rope=*/true);
  small.max_seq_len = 4;
  MultiLatentAttention short_mla(mla_spec(2, 2, 4, 2), small);
  EXPECT_XG_ERROR(short_mla(zeros({1, 5, 8})), "max_seq_len");
}

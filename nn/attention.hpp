// The attention family on one kernel (scaled_dot_product_attention): multi-head attention
// (self and cross), grouped-query attention (MQA at one kv head; QK-Norm and RoPE as
// options), multi-head latent attention (low-rank KV with decoupled RoPE), and the per-layer
// KV cache for token-by-token decoding. Attribute names follow the usual hand-written
// PyTorch classes (a naming enum per module picks w_q or W_q, kv_down_proj or W_kv_down, ...)
// so that their state dicts load by name.
//
// Masks are xg::AttnMask: a bool tensor (true = keep, as the common
// scores.masked_fill(mask == 0, -1e9)), a float tensor added to the scores
// (torch.triu(torch.full((T, T), -inf), 1), as torch.nn.MultiheadAttention's float attn_mask),
// and/or `causal` (aligned to the end, so it stays right with a KV cache). NOTE: tutorial code
// often builds its masks as float 0/1 tensors (torch.tril(torch.ones(T, T))) for that
// masked_fill; pass them as bool here, since a float mask is additive.
#pragma once

#include <memory>

#include "autograd/attention.hpp"
#include "autograd/rope.hpp"
#include "nn/linear.hpp"
#include "nn/norm.hpp"
#include "nn/position.hpp"
#include "nn/sublayer.hpp"

namespace xg::nn {

// One layer's cache for decoding. MHA/GQA keep keys (after RoPE) and values; MLA keeps its
// latent (plus the RoPE key when that has its own projection). forward(x, mask, &cache)
// appends the new tokens and attends over everything cached. Decode under a NoGradGuard:
// with grad mode on, the cache holds the graph of every step (as a PyTorch cache would).
//
// k and v are buffers whose first L positions are the cached tokens: outside grad mode they
// keep room to spare (up to twice the tokens, doubling when full) and a step writes its tokens
// in place, so decoding a token copies only that token; under grad mode they are exactly L.
// A start_pos inside the cache is overwritten from there on by the next step.
struct KVCache {
  Tensor k, v;         // [B, Hkv, capacity >= L, hs]           (MHA, GQA)
  Tensor latent;       // [B, L, latent_dim]                    (MLA)
  Tensor k_rope;       // [B, 1, L, rope_dim], after RoPE       (MLA with decoupled_rope_key)
  int64_t length = 0;  // L: tokens cached
  void reset() { *this = KVCache(); }
  // A cache that decodes on its own. Copying a KVCache shares its buffers (a Tensor is a
  // handle), and a step on either copy writes into them: branch a cache (beam search, several
  // samples from one prompt) with clone().
  KVCache clone() const;
  int64_t bytes() const;  // memory the cached tokens take (k and v's buffers may hold up to twice)
};

// --- multi-head attention (Vaswani et al. 2017) -----------------------------------------------

// out = w_o(concat_h softmax(q_h k_h^T / sqrt(hs) + mask) v_h), q = w_q(x_query),
// k = w_k(x_context), v = w_v(x_context); self-attention when x_context is undefined.
// Parameters w_q, w_k, w_v, w_o: Linear(model_dim, model_dim, bias). Dropout on the weights.
// NOTE: hand-written MHA classes often default dropout_p to 0.1 (the original Transformer's
// rate); ours defaults to 0, as torch.nn.MultiheadAttention's dropout does.
class MultiHeadAttention : public Attention {
 public:
  MultiHeadAttention(int64_t model_dim, int64_t head_num, double dropout_p = 0.0, bool bias = true);
  // Self-attention (the Attention interface): forward(x, x) below.
  Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                 int64_t start_pos = -1) const override {
    return forward(x, Tensor(), mask, cache, start_pos);
  }
  // x_query: [B, Tq, model_dim], x_context: [B, Tk, model_dim] (cross-attention) or undefined
  // (self-attention) -> [B, Tq, model_dim]. With a cache (self-attention only), x's keys and
  // values are appended at position start_pos (-1: the cache's length; a smaller value first
  // drops the cached tokens from there on).
  Tensor forward(const Tensor& x_query, const Tensor& x_context, const AttnMask& mask = {},
                 KVCache* cache = nullptr, int64_t start_pos = -1) const;
  Tensor operator()(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                    int64_t start_pos = -1) const {
    return forward(x, Tensor(), mask, cache, start_pos);
  }
  Tensor operator()(const Tensor& x_query, const Tensor& x_context, const AttnMask& mask = {},
                    KVCache* cache = nullptr, int64_t start_pos = -1) const {
    return forward(x_query, x_context, mask, cache, start_pos);
  }
  // K and V of every head: 2 model_dim elements per token.
  static int64_t kv_cache_bytes_per_token(int64_t model_dim, int64_t bytes_per_element);
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const override {
    return kv_cache_bytes_per_token(model_dim_, bytes_per_element);
  }
  const std::shared_ptr<Linear>& w_q() const { return w_q_; }
  const std::shared_ptr<Linear>& w_k() const { return w_k_; }
  const std::shared_ptr<Linear>& w_v() const { return w_v_; }
  const std::shared_ptr<Linear>& w_o() const { return w_o_; }
  int64_t model_dim() const { return model_dim_; }
  int64_t head_num() const { return head_num_; }
  int64_t head_dim() const { return head_dim_; }
  std::string name() const override { return "MultiHeadAttention"; }
  std::string extra_repr() const override;

 private:
  int64_t model_dim_, head_num_, head_dim_;
  double dropout_p_;
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
};

// --- grouped-query attention (Ainslie et al. 2023), with QK-Norm and RoPE as options ----------

// Attribute names of the projections.
enum class AttentionNaming {
  Lowercase,  // w_q, w_k, w_v, w_o: the usual names of hand-written MHA/GQA (MultiHeadAttention's)
  Uppercase,  // W_q, W_k, W_v, W_o: the capitalised matrix names other hand-written GQA uses
};

struct GroupedQueryAttentionOptions {
  int64_t d_model = 512;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 8;  // n_heads: MHA, 1: MQA; must divide n_heads
  // Features per head; 0: d_model / n_heads. Set it to decouple the heads' width from d_model
  // (Qwen3: hidden 1024 with 16 heads of 128): q is [n_heads * head_dim], k and v
  // [n_kv_heads * head_dim], and w_o maps n_heads * head_dim back to d_model.
  int64_t head_dim = 0;
  bool bias = false;       // on w_q, w_k, w_v (LLaMA has none; Qwen2 has them)
  bool out_bias = true;    // on w_o: nn.Linear's default (LLaMA and bias-free GQA code: false)
  double dropout = 0.0;    // on the attention weights (hand-written classes often use 0.1)
  // QK-Norm (Henry et al. 2020; Dehghani et al. 2023): RMSNorm q_norm / k_norm over each
  // head's features, applied after the projection and before RoPE (as in the LLaMA-style
  // models that use it).
  bool qk_norm = false;
  double norm_eps = 1e-6;
  // RoPE on q and k of each head (positions start_pos ..).
  bool rope = false;
  RopeLayout rope_layout = RopeLayout::RotateHalf;
  int64_t max_seq_len = 4096;
  double rope_base = 10000.0;
  RopeScaling rope_scaling;  // of the frequencies (Llama 3.1's "llama3")
  AttentionNaming naming = AttentionNaming::Lowercase;
};

// Query heads h = 0 .. n_heads-1 share kv head h / (n_heads / n_kv_heads) (repeat_kv's
// order); the kernel indexes the shared heads instead of repeating them.
// NOTE: some hand-written GQA expands k, v as k[:, :, None].expand(B, S, q_per_group,
// n_kv_heads, d).reshape(B, S, n_heads, d), which pairs query head h with kv head
// h % n_kv_heads; we follow repeat_kv's order (as LLaMA and PyTorch's enable_gqa do), so
// weights from such code load but its heads pair differently.
class GroupedQueryAttention : public Attention {
 public:
  explicit GroupedQueryAttention(const GroupedQueryAttentionOptions& options);
  // x: [B, T, d_model] -> [B, T, d_model] (the Attention interface's cache and start_pos).
  Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                 int64_t start_pos = -1) const override;
  // K and V of the kv heads: 2 n_kv_heads head_dim elements per token.
  static int64_t kv_cache_bytes_per_token(const GroupedQueryAttentionOptions& o, int64_t bytes_per_element);
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const override {
    return kv_cache_bytes_per_token(options_, bytes_per_element);
  }
  const GroupedQueryAttentionOptions& options() const { return options_; }
  int64_t head_dim() const { return head_dim_; }
  const std::shared_ptr<Linear>& w_q() const { return w_q_; }
  const std::shared_ptr<Linear>& w_k() const { return w_k_; }
  const std::shared_ptr<Linear>& w_v() const { return w_v_; }
  const std::shared_ptr<Linear>& w_o() const { return w_o_; }
  const std::shared_ptr<RMSNorm>& q_norm() const { return q_norm_; }  // null without qk_norm
  const std::shared_ptr<RMSNorm>& k_norm() const { return k_norm_; }
  std::string name() const override { return "GroupedQueryAttention"; }
  std::string extra_repr() const override;

 private:
  GroupedQueryAttentionOptions options_;
  int64_t head_dim_;
  std::shared_ptr<Linear> w_q_, w_k_, w_v_, w_o_;
  std::shared_ptr<RMSNorm> q_norm_, k_norm_;
  std::shared_ptr<RotaryEmbedding> rope_;
};

// --- multi-head latent attention (DeepSeek-V2) ------------------------------------------------

enum class LatentAttentionNaming {
  // kv_down_proj, kv_up_proj (fused k_content | k_rope | v per head), q_down_proj, q_up_proj
  // (or q_proj without q compression), k_rope_proj (decoupled key), o_proj: the *_proj names
  // of DeepSeek-style hand-written MLA
  Projections,
  // W_q, W_kv_down, W_k_up, W_v_up, W_o: the minimal low-rank-KV attention of teaching code
  // (no RoPE, no q compression: needs rope_dim = 0 and q_latent_dim = 0)
  Capitalized,
};

struct MultiLatentAttentionOptions {
  int64_t model_dim = 512;
  int64_t head_num = 8;
  int64_t head_dim = 64;    // content part of q and k, and the size of v, per head
  int64_t latent_dim = 128; // c_KV: what the cache keeps per token
  int64_t rope_dim = 32;    // RoPE part of q and k per head (0: no RoPE)
  int64_t q_latent_dim = -1;  // q compression: -1 = latent_dim, 0 = none (one q_proj)
  // false (the simplified MLA of hand-written code): each head's k_rope comes out of
  //   kv_up_proj(latent) and is rotated at its position, so the cache keeps the latent alone;
  // true (DeepSeek-V2): one k_rope shared by all heads from its own projection of x
  //   (k_rope_proj), cached after RoPE beside the latent: latent_dim + rope_dim per token.
  bool decoupled_rope_key = false;
  double dropout = 0.0;  // on the attention weights (hand-written classes often use 0.1)
  int64_t max_seq_len = 4096;
  double rope_base = 10000.0;
  RopeLayout rope_layout = RopeLayout::RotateHalf;  // x * cos + rotate_half(x) * sin
  LatentAttentionNaming naming = LatentAttentionNaming::Projections;
};

// q = [q_content, rope(q_rope)] and k = [k_content, rope(k_rope)] per head (scores are the sum
// of a content and a position dot product), v from the latent; softmax scale
// 1/sqrt(head_dim + rope_dim); out = o_proj(concat of the heads' [head_dim] outputs).
class MultiLatentAttention : public Attention {
 public:
  explicit MultiLatentAttention(const MultiLatentAttentionOptions& options);
  // x: [B, T, model_dim] -> [B, T, model_dim] (the Attention interface's cache and start_pos).
  Tensor forward(const Tensor& x, const AttnMask& mask = {}, KVCache* cache = nullptr,
                 int64_t start_pos = -1) const override;
  // latent_dim (+ rope_dim with decoupled_rope_key) elements per token.
  static int64_t kv_cache_bytes_per_token(const MultiLatentAttentionOptions& o, int64_t bytes_per_element);
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const override {
    return kv_cache_bytes_per_token(options_, bytes_per_element);
  }
  const MultiLatentAttentionOptions& options() const { return options_; }
  std::string name() const override { return "MultiLatentAttention"; }
  std::string extra_repr() const override;

 private:
  // k [B, H, L, head_dim + rope_dim] and v [B, H, L, head_dim] from the latents of positions
  // 0 .. L-1 (and the cached, rotated shared k_rope when decoupled).
  std::pair<Tensor, Tensor> keys_values(const Tensor& latent, const Tensor& k_rope_shared) const;

  MultiLatentAttentionOptions options_;
  int64_t q_latent_dim_;
  std::shared_ptr<Linear> q_down_, q_up_, q_proj_;     // q_proj_ without q compression
  std::shared_ptr<Linear> kv_down_, kv_up_, k_up_, v_up_;  // kv_up_ (Projections) or k_up_, v_up_ (Capitalized)
  std::shared_ptr<Linear> k_rope_proj_, o_proj_;
  std::shared_ptr<RotaryEmbedding> rope_;
};

// --- the block's attention kinds (nn/registry.hpp) ----------------------------------------------
// The block gives d_model, the dropout on the weights, the RoPE settings and QK-Norm's eps
// (SublayerContext); each spec holds the rest, and its fields are its config.json fields.

// "mha": multi-head attention, w_q, w_k, w_v, w_o all with or without bias. With RoPE or
// QK-Norm it is built as a GroupedQueryAttention with n_kv_heads = n_heads (the same
// parameters under the same names).
struct MHASpec {
  static constexpr const char* kind = "mha";
  int64_t n_heads = 8;
  bool bias = true;
  bool qk_norm = false;
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("n_heads", s.n_heads);
    f("bias", s.bias);
    f("qk_norm", s.qk_norm);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Attention> build(const SublayerContext& ctx) const;
};

// "gqa": grouped-query attention (MQA with n_kv_heads = 1), LLaMA-2/3, Mistral, Qwen2/3.
struct GQASpec {
  static constexpr const char* kind = "gqa";
  int64_t n_heads = 8;
  int64_t n_kv_heads = 0;  // 0: n_heads
  int64_t head_dim = 0;    // 0: d_model / n_heads
  bool qkv_bias = false;   // on w_q, w_k, w_v (Qwen2: true)
  bool out_bias = false;   // on w_o
  bool qk_norm = false;    // RMSNorm of each head's q and k before RoPE (Qwen3)
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("n_heads", s.n_heads);
    f("n_kv_heads", s.n_kv_heads);
    f("head_dim", s.head_dim);
    f("qkv_bias", s.qkv_bias);
    f("out_bias", s.out_bias);
    f("qk_norm", s.qk_norm);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Attention> build(const SublayerContext& ctx) const;
};

// "mla": multi-head latent attention (DeepSeek-V2). 0 picks the default noted.
struct MLASpec {
  static constexpr const char* kind = "mla";
  int64_t n_heads = 8;
  int64_t head_dim = 0;        // 0: d_model / n_heads
  int64_t latent_dim = 0;      // 0: 4 head_dim (DeepSeek-V2: 512 for 128)
  int64_t rope_dim = 0;        // with RoPE; 0: head_dim / 2 (DeepSeek-V2: 64 for 128)
  int64_t q_latent_dim = -1;   // -1: latent_dim, 0: no q compression
  bool decoupled_rope_key = false;
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("n_heads", s.n_heads);
    f("head_dim", s.head_dim);
    f("latent_dim", s.latent_dim);
    f("rope_dim", s.rope_dim);
    f("q_latent_dim", s.q_latent_dim);
    f("decoupled_rope_key", s.decoupled_rope_key);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Attention> build(const SublayerContext& ctx) const;
};

}  // namespace xg::nn

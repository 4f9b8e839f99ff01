// What the attention kinds share: the per-layer KV cache, the steps of a forward around the
// attention kernel (input check, positions, head split and merge, the cache's in-place store)
// and the checks of the spec fields every kind has (n_heads, the head width under RoPE).
#pragma once

#include <string>
#include <utility>

#include "autograd/attention.hpp"
#include "nn/linear.hpp"
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

// --- the steps of a forward ---------------------------------------------------------------------

// [B, T, H * hs] -> [B, H, T, hs]
Tensor split_heads(const Tensor& t, int64_t H);
// [B, H, T, hs] -> [B, T, H * hs]
Tensor merge_heads(const Tensor& t);

// Throws unless x is [B, T, dim]: "<who>: expected <what> [B, T, dim], got [..]".
void check_attention_input(const Tensor& x, int64_t dim, const std::string& who, const char* what = "x");

// The position of x's first token: start_pos, or the cache's length when start_pos is -1.
// A start_pos inside the cache drops the cached tokens from there on (rolls it back).
int64_t start_position(KVCache* cache, int64_t start_pos, const std::string& who);

// Whether self-attention's q, k and v projections can run as one (linear_stacked): no KV cache,
// which keeps k and v as separate [B, Hkv, T, hs] tensors.
bool can_pack(const Linear& q, const Linear& k, const Linear& v, const KVCache* cache);

// cached ++ fresh along `dim`, or fresh on an empty cache; throws when the other dims or the
// dtype differ (a cache of another batch).
Tensor append_cached(const Tensor& cached, const Tensor& fresh, int64_t dim, const std::string& who, const char* what);

// Self-attention of q [B, H, T, hs] over the cache after storing this step's k and v
// [B, Hkv, T, hs] at position pos: the cache's filled prefix, read in place. scale 0: 1/sqrt(hs).
Tensor attend_cached(KVCache& cache, const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos,
                     const AttnMask& mask, double dropout, bool training, const std::string& who,
                     double scale = 0);
// Stores this step's k and v [B, Hkv, T, hs] at position pos; returns the cached keys and values
// [B, Hkv, pos + T, hs] (copies of the filled prefix).
std::pair<Tensor, Tensor> store_cached(KVCache& cache, const Tensor& k, const Tensor& v, int64_t pos,
                                       const std::string& who);

// `mask` narrowed to a sliding window: query i (at position q0 + i) keeps key j (at k0 + j) only
// when (q0 + i) - (k0 + j) < window, for Tq queries and Tk keys (a bool [1, 1, Tq, Tk] ANDed
// with a bool mask; an additive mask is refused). mask itself when window is 0.
AttnMask windowed_mask(const AttnMask& mask, int64_t window, int64_t Tq, int64_t Tk, int64_t q0, int64_t k0,
                       const std::string& who);

// out = dropout(softmax(softcap(q k^T * scale) + mask)) v op by op (Gemma 2's eager attention,
// which the fused kernel does not compute): q [B, H, Tq, hs], k and v [B, Hkv, Tk, hs] (grouped
// as the kernel groups them) -> [B, H, Tq, hs]. Masked scores are set to the dtype's lowest
// value, as transformers does. scale 0: 1/sqrt(hs).
Tensor softcapped_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask, double scale,
                            double softcap, double dropout, bool training);

// --- checks of the spec fields every kind has ---------------------------------------------------

// "<who>: field 'attention.n_heads' must be positive, got 0"
void check_heads(int64_t n_heads, const std::string& who);
// d_model split over n_heads: n_heads must divide it.
void check_split(const SublayerContext& ctx, int64_t n_heads, const std::string& who);
// RoPE rotates pairs: an even head width when the block uses it.
void check_rope_dim(const SublayerContext& ctx, int64_t head_dim, const std::string& who);

}  // namespace xg::nn

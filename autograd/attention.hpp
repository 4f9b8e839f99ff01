// Scaled dot-product attention: the one fused kernel every attention module shares
// (MHA, GQA/MQA, MLA), with boolean or additive masks, end-aligned causal masking for
// KV-cache decoding, grouped key/value heads indexed in place, dropout on the weights, and
// one fused backward (softmax backward included). Float32 under xg::autocast on a CPU with bf16
// dot products: the products (q k^T, P v and those of backward) run in bf16 with float32 sums,
// as torch.autocast runs them; the softmax stays float32 (autocast.hpp).
#pragma once

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace xg {

// What a query may attend to. Both parts are optional and combine.
struct AttnMask {
  // Broadcastable to [B, H, Tq, Tk]. Either
  //  - bool, true = keep (the common hand-written `scores.masked_fill(mask == 0, -1e9)`):
  //    masked scores are set to -1e9, so a fully masked row gets uniform weights, exactly as
  //    that code does; or
  //  - float of q's dtype, added to the scores (`torch.triu(torch.full((T, T), -inf), 1)`,
  //    PyTorch's float attn_mask): a row that is -inf everywhere gives NaN, as PyTorch's
  //    softmax does. An additive mask that requires grad gets one (e.g. a learned position
  //    bias).
  // NOTE: a 0/1 float mask like tutorial code's `torch.tril(torch.ones(T, T))` is additive
  // here (xgrad does not guess); pass ne(mask, 0) or a bool tensor to keep its keep/drop
  // meaning.
  Tensor mask;
  // Causal, aligned to the end: query i sees keys j <= i + (Tk - Tq). With Tq == Tk this is
  // the usual lower triangle; with a KV cache (Tk = cached + new) the new queries see the
  // whole cache and the new keys up to themselves. Needs Tk >= Tq.
  bool causal = false;

  AttnMask() = default;
  AttnMask(Tensor m, bool c = false) : mask(std::move(m)), causal(c) {}  // NOLINT: implicit on purpose
  static AttnMask causal_mask() { return AttnMask(Tensor(), true); }
};

// q: [B, H, Tq, hs], k: [B, Hkv, Tk, hs], v: [B, Hkv, Tk, hv] -> [B, H, Tq, hv]
//   out = dropout(softmax(q k^T * scale + mask)) v,   scale = 1/sqrt(hs) when 0.
// Grouped heads (GQA/MQA): H must be a multiple of Hkv; query head h uses kv head
// h / (H / Hkv), i.e. repeat_kv's order, without materialising the repeat.
// Dropout (training && dropout_p > 0) draws one uniform per weight in [B, H, Tq, Tk]
// row-major order from `gen` (the default generator when null), exactly as
// xg::dropout(weights, p, true, gen) would.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask = {},
                                    double dropout_p = 0, bool training = false, double scale = 0,
                                    Generator* gen = nullptr);

// The same attention on the output of one projection by [W_q; W_k; W_v], without splitting
// it into heads first: qkv [B, T, n_heads + 2 n_kv_heads, hs] holds each token's query heads,
// then its key heads, then its value heads -> [B, T, n_heads * hs], the heads side by side
// (the input of the output projection). Equal to
//   scaled_dot_product_attention(q, k, v, ...) with q = qkv[:, :, :H].transpose(1, 2),
//   k = qkv[:, :, H:H + Hkv].transpose(1, 2), v = qkv[:, :, H + Hkv:].transpose(1, 2),
// then out.transpose(1, 2).reshape(B, T, H * hs); its gradient is one tensor of qkv's shape.
// The mask broadcasts to [B, H, T, T] as above.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_heads, int64_t n_kv_heads,
                                           const AttnMask& mask = {}, double dropout_p = 0, bool training = false,
                                           double scale = 0, Generator* gen = nullptr);

// The same attention over the first `keys` positions of k [B, Hkv, capacity, hs] and
// v [B, Hkv, capacity, hv], read in place: a KV cache's buffers, filled up to `keys`
// (nn::KVCache), so that decoding appends a token without copying the cache. Equal to
// scaled_dot_product_attention(q, narrow(k, 2, 0, keys), narrow(v, 2, 0, keys), ...). No
// gradient reaches k or v past what a narrow would give: with keys < capacity, inputs that
// require grad are refused.
Tensor scaled_dot_product_attention_prefix(const Tensor& q, const Tensor& k, const Tensor& v, int64_t keys,
                                           const AttnMask& mask = {}, double dropout_p = 0, bool training = false,
                                           double scale = 0, Generator* gen = nullptr);

// Which kernels run attention's per-head products. Auto (the default) takes register-tiled
// kernels for heads of at most 64 while keys x head <= attention_tiled_max_keys(), BLAS
// otherwise; Blas and Tiled force one (tests, benchmarks).
// Process-wide; set it between calls, not during one.
enum class AttentionProducts { Auto, Blas, Tiled };
void set_attention_products(AttentionProducts which);
AttentionProducts attention_products();
// The products a call with these head sizes (hs of q and k, hv of v) and keys would run on
// (Blas or Tiled), under the current setting.
AttentionProducts attention_products_for(int64_t hs, int64_t hv, int64_t keys);
// Auto's bound on keys x head: 2048 x 64 when the library was built for AVX-512, 256 x 64
// otherwise (the tile then has fewer registers; autograd/attention.cpp has the figures).
int64_t attention_tiled_max_keys();
// Whether the library was built with attention's bf16 tiles (AVX512-BF16 in the build, as
// -march=native gives on such a CPU). Under autocast they run where they are built and
// bf16_gemm() is Bf16Gemm::OneDNN; a build without them keeps attention in float32.
bool attention_has_bf16_tiles();

// Backward keeps softmax's weights P [B, H, Tq, Tk] from the forward while they have at most
// this many elements (default 2^17: 512 KB in float32), and otherwise recomputes them from each
// row's max and sum (FlashAttention's O(T) memory). 0: always recompute. Process-wide.
void set_attention_kept_weights_max(int64_t elements);
int64_t attention_kept_weights_max();

}  // namespace xg

// The pieces the attention kinds share: KVCache, the cache's in-place store and the steps of a
// forward around the kernel, and the checks of the common spec fields.
#include "nn/attention_parts.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
#include "autograd/softmax.hpp"
#include "autograd/shape.hpp"

namespace xg::nn {

namespace {

// Checks that fresh tokens fit what the cache holds: every dim but `dim` (the tokens') and the
// dtype agree.
void check_fits(const Tensor& cached, const Tensor& fresh, int64_t dim, const std::string& who, const char* what) {
  bool same = cached.dim() == fresh.dim() && cached.dtype() == fresh.dtype();
  for (int64_t d = 0; same && d < fresh.dim(); ++d) same = d == dim || cached.size(d) == fresh.size(d);
  check(same, who, ": the cache holds ", what, " ", shape_str(cached.shape()), " (", dtype_name(cached.dtype()),
        ") but this step makes ", shape_str(fresh.shape()), " (", dtype_name(fresh.dtype()),
        "); reset the cache for a new batch");
}

// Stores fresh keys or values [B, Hkv, T, w] at positions [pos, pos + T) of a cache buffer
// [B, Hkv, capacity, w] whose first pos positions hold the earlier tokens, and returns the
// buffer. Outside grad mode it keeps room to spare, doubling when full, so that a decoded token
// copies only itself, not the whole cache as a cat would. Under grad mode the cache carries the
// graph of every step, so it stays exactly the cached tokens, joined by cat.
Tensor store(const Tensor& buf, const Tensor& fresh, int64_t pos, const std::string& who, const char* what) {
  if (is_grad_enabled())
    return append_cached(buf.defined() && pos < buf.size(2) ? narrow(buf, 2, 0, pos) : buf, fresh, 2, who, what);
  const int64_t T = fresh.size(2), need = pos + T;
  if (buf.defined()) check_fits(buf, fresh, 2, who, what);
  const int64_t rows = fresh.size(0) * fresh.size(1), width = fresh.size(3);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * itemsize(fresh.dtype());
  Tensor out = buf;
  if (!buf.defined() || need > buf.size(2)) {
    const int64_t capacity = buf.defined() ? std::max(need, 2 * buf.size(2)) : need;
    out = empty({fresh.size(0), fresh.size(1), capacity, width}, fresh.dtype());
    for (int64_t r = 0; buf.defined() && r < rows; ++r)
      std::memcpy(static_cast<char*>(out.raw_data()) + r * capacity * row_bytes,
                  static_cast<const char*>(buf.raw_data()) + r * buf.size(2) * row_bytes, pos * row_bytes);
  }
  const int64_t capacity = out.size(2);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(out.raw_data()) + (r * capacity + pos) * row_bytes,
                static_cast<const char*>(fresh.raw_data()) + r * T * row_bytes, T * row_bytes);
  return out;
}

}  // namespace

KVCache KVCache::clone() const {
  KVCache c;
  for (auto [from, to] : {std::pair{&k, &c.k}, {&v, &c.v}, {&latent, &c.latent}, {&k_rope, &c.k_rope}})
    if (from->defined()) *to = from->clone();
  c.length = length;
  return c;
}

int64_t KVCache::bytes() const {
  int64_t n = 0;
  for (const Tensor* t : {&k, &v})  // the cached positions of buffers that may have room to spare
    if (t->defined() && t->size(2) > 0)
      n += t->numel() / t->size(2) * length * static_cast<int64_t>(itemsize(t->dtype()));
  for (const Tensor* t : {&latent, &k_rope})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(itemsize(t->dtype()));
  return n;
}

// ---------------------------------------------------------------------------------------------
// the steps of a forward

Tensor split_heads(const Tensor& t, int64_t H) {
  const int64_t B = t.size(0), T = t.size(1);
  return transpose(reshape(t, {B, T, H, t.size(2) / H}), 1, 2);
}

Tensor merge_heads(const Tensor& t) {
  const int64_t B = t.size(0), H = t.size(1), T = t.size(2), hs = t.size(3);
  return reshape(transpose(t, 1, 2), {B, T, H * hs});
}

void check_attention_input(const Tensor& x, int64_t dim, const std::string& who, const char* what) {
  check(x.defined() && x.dim() == 3 && x.size(2) == dim, who, ": expected ", what, " [B, T, ", dim, "], got ",
        x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
}

int64_t start_position(KVCache* cache, int64_t start_pos, const std::string& who) {
  check(start_pos >= -1, who, ": start_pos must be >= 0 (or -1 for the cache's length), got ", start_pos);
  if (!cache) return std::max<int64_t>(start_pos, 0);
  if (start_pos == -1) return cache->length;
  check(start_pos <= cache->length, who, ": start_pos ", start_pos, " is past the ", cache->length,
        " cached tokens (positions must be contiguous)");
  if (start_pos < cache->length) {  // roll back to start_pos tokens
    if (start_pos == 0) {
      cache->reset();
    } else {
      // k and v keep their buffers: the next store() writes from start_pos on.
      if (cache->latent.defined()) cache->latent = narrow(cache->latent, 1, 0, start_pos);
      if (cache->k_rope.defined()) cache->k_rope = narrow(cache->k_rope, 2, 0, start_pos);
      cache->length = start_pos;
    }
  }
  return start_pos;
}

bool can_pack(const Linear& q, const Linear& k, const Linear& v, const KVCache* cache) {
  return !cache && stackable({&q, &k, &v});
}

Tensor append_cached(const Tensor& cached, const Tensor& fresh, int64_t dim, const std::string& who, const char* what) {
  if (!cached.defined()) return fresh;
  check_fits(cached, fresh, dim, who, what);
  return cat({cached, fresh}, dim);
}

Tensor attend_cached(KVCache& cache, const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos,
                     const AttnMask& mask, double dropout, bool training, const std::string& who, double scale) {
  cache.k = store(cache.k, k, pos, who, "keys");
  cache.v = store(cache.v, v, pos, who, "values");
  cache.length = pos + q.size(2);
  return scaled_dot_product_attention_prefix(q, cache.k, cache.v, cache.length, mask, dropout, training, scale);
}

std::pair<Tensor, Tensor> store_cached(KVCache& cache, const Tensor& k, const Tensor& v, int64_t pos,
                                       const std::string& who) {
  cache.k = store(cache.k, k, pos, who, "keys");
  cache.v = store(cache.v, v, pos, who, "values");
  cache.length = pos + k.size(2);
  return {narrow(cache.k, 2, 0, cache.length), narrow(cache.v, 2, 0, cache.length)};
}

AttnMask windowed_mask(const AttnMask& mask, int64_t window, int64_t Tq, int64_t Tk, int64_t q0, int64_t k0,
                       const std::string& who) {
  if (window <= 0) return mask;
  if (mask.mask.defined() && mask.mask.dtype() != kBool)
    throw Error(str_cat(who, ": a sliding window combines with a bool mask only, got an additive ",
                        dtype_name(mask.mask.dtype()), " mask"));
  Tensor keep = empty({1, 1, Tq, Tk}, kBool);  // [1, 1, Tq, Tk]
  bool* p = keep.data<bool>();
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j) p[i * Tk + j] = (q0 + i) - (k0 + j) < window;
  return AttnMask(mask.mask.defined() ? logical_and(mask.mask, keep) : keep, mask.causal);
}

// q [B, H, Tq, hs], k, v [B, Hkv, Tk, hs] -> [B, H, Tq, hs]
Tensor softcapped_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask, double scale,
                            double cap, double dropout_p, bool training) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), hs = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  check(H % Hkv == 0 && Tk >= Tq, "softcapped_attention: q ", shape_str(q.shape()), " and k ", shape_str(k.shape()),
        " (kv heads must divide the heads, keys must cover the queries)");
  // repeat_kv: kv head g serves query heads g * (H / Hkv) ..
  auto repeat_kv = [&](const Tensor& t) {
    if (Hkv == H) return t;
    const int64_t D = t.size(3);
    return reshape(expand(reshape(t, {B, Hkv, 1, Tk, D}), {B, Hkv, H / Hkv, Tk, D}), {B, H, Tk, D});
  };
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(static_cast<double>(hs));
  Tensor scores = softcap(matmul(q, transpose(repeat_kv(k), 2, 3)) * s, cap);  // [B, H, Tq, Tk]
  Tensor keep;
  if (mask.causal) {  // end-aligned: query i sees keys j <= i + (Tk - Tq)
    keep = empty({1, 1, Tq, Tk}, kBool);
    bool* p = keep.data<bool>();
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j) p[i * Tk + j] = j <= i + (Tk - Tq);
  }
  if (mask.mask.defined()) {
    if (mask.mask.dtype() == kBool)
      keep = keep.defined() ? logical_and(keep, mask.mask) : mask.mask;
    else
      scores = scores + mask.mask;
  }
  const double lowest = q.dtype() == kFloat64 ? std::numeric_limits<double>::lowest()
                                              : static_cast<double>(std::numeric_limits<float>::lowest());
  if (keep.defined()) scores = where(keep, scores, lowest);
  Tensor w = softmax(scores, -1);
  if (training && dropout_p > 0) w = dropout(w, dropout_p, true);
  return matmul(w, repeat_kv(v));
}

// ---------------------------------------------------------------------------------------------
// checks of the common spec fields

void check_heads(int64_t n_heads, const std::string& who) {
  check(n_heads > 0, who, ": field 'attention.n_heads' must be positive, got ", n_heads);
}

void check_split(const SublayerContext& ctx, int64_t n_heads, const std::string& who) {
  check(ctx.d_model % n_heads == 0, who, ": field 'attention.n_heads' (", n_heads, ") must divide d_model (",
        ctx.d_model, ")");
}

void check_rope_dim(const SublayerContext& ctx, int64_t head_dim, const std::string& who) {
  check(!ctx.rope || head_dim % 2 == 0, who, ": position = rope needs an even head dim, got ", head_dim);
}

}  // namespace xg::nn

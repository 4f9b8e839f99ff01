// MultiHeadAttention, GroupedQueryAttention, MultiLatentAttention and their KV cache.
#include "nn/attention.hpp"

#include <algorithm>
#include <cstring>

#include "autograd/graph.hpp"
#include "autograd/shape.hpp"

namespace xg::nn {

namespace {

// [B, T, H * hs] -> [B, H, T, hs]
Tensor split_heads(const Tensor& t, int64_t H) {
  const int64_t B = t.size(0), T = t.size(1);
  return transpose(reshape(t, {B, T, H, t.size(2) / H}), 1, 2);
}

// [B, H, T, hs] -> [B, T, H * hs]
Tensor merge_heads(const Tensor& t) {
  const int64_t B = t.size(0), H = t.size(1), T = t.size(2), hs = t.size(3);
  return reshape(transpose(t, 1, 2), {B, T, H * hs});
}

void check_input(const Tensor& x, int64_t dim, const std::string& who, const char* what = "x") {
  check(x.defined() && x.dim() == 3 && x.size(2) == dim, who, ": expected ", what, " [B, T, ", dim, "], got ",
        x.defined() ? shape_str(x.shape()) : std::string("an undefined tensor"));
}

// The position of x's first token: start_pos, or the cache's length when start_pos is -1.
// A start_pos inside the cache drops the cached tokens from there on (rolls it back).
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

// Whether self-attention's q, k and v projections can run as one (linear_stacked): no KV cache,
// which keeps k and v as separate [B, Hkv, T, hs] tensors.
bool can_pack(const Linear& q, const Linear& k, const Linear& v, const KVCache* cache) {
  return !cache && stackable({&q, &k, &v});
}

// Checks that fresh tokens fit what the cache holds: every dim but `dim` (the tokens') and the
// dtype agree.
void check_fits(const Tensor& cached, const Tensor& fresh, int64_t dim, const std::string& who, const char* what) {
  bool same = cached.dim() == fresh.dim() && cached.dtype() == fresh.dtype();
  for (int64_t d = 0; same && d < fresh.dim(); ++d) same = d == dim || cached.size(d) == fresh.size(d);
  check(same, who, ": the cache holds ", what, " ", shape_str(cached.shape()), " (", dtype_name(cached.dtype()),
        ") but this step makes ", shape_str(fresh.shape()), " (", dtype_name(fresh.dtype()),
        "); reset the cache for a new batch");
}

// cached ++ fresh along `dim`, or fresh on an empty cache.
Tensor append(const Tensor& cached, const Tensor& fresh, int64_t dim, const std::string& who, const char* what) {
  if (!cached.defined()) return fresh;
  check_fits(cached, fresh, dim, who, what);
  return cat({cached, fresh}, dim);
}

// Stores fresh keys or values [B, Hkv, T, w] at positions [pos, pos + T) of a cache buffer
// [B, Hkv, capacity, w] whose first pos positions hold the earlier tokens, and returns the
// buffer. Outside grad mode it keeps room to spare, doubling when full, so that a decoded token
// copies only itself, not the whole cache as a cat would. Under grad mode the cache carries the
// graph of every step, so it stays exactly the cached tokens, joined by cat.
Tensor store(const Tensor& buf, const Tensor& fresh, int64_t pos, const std::string& who, const char* what) {
  if (is_grad_enabled())
    return append(buf.defined() && pos < buf.size(2) ? narrow(buf, 2, 0, pos) : buf, fresh, 2, who, what);
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

// Self-attention of q [B, H, T, hs] over the cache after storing this step's k and v
// [B, Hkv, T, hs] at position pos: the cache's filled prefix, read in place.
Tensor attend_cached(KVCache& cache, const Tensor& q, const Tensor& k, const Tensor& v, int64_t pos,
                     const AttnMask& mask, double dropout_p, bool training, const std::string& who) {
  cache.k = store(cache.k, k, pos, who, "keys");
  cache.v = store(cache.v, v, pos, who, "values");
  cache.length = pos + q.size(2);
  return scaled_dot_product_attention_prefix(q, cache.k, cache.v, cache.length, mask, dropout_p, training);
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
// MultiHeadAttention

MultiHeadAttention::MultiHeadAttention(int64_t model_dim, int64_t head_num, double dropout_p, bool bias)
    : model_dim_(model_dim), head_num_(head_num), head_dim_(0), dropout_p_(dropout_p) {
  check(model_dim > 0 && head_num > 0, "MultiHeadAttention: model_dim and head_num must be positive, got ", model_dim,
        " and ", head_num);
  check(model_dim % head_num == 0, "MultiHeadAttention: model_dim ", model_dim, " is not divisible by head_num ",
        head_num);
  check(dropout_p >= 0 && dropout_p < 1, "MultiHeadAttention: dropout_p must be in [0, 1), got ", dropout_p);
  head_dim_ = model_dim / head_num;
  w_q_ = register_module("w_q", std::make_shared<Linear>(model_dim, model_dim, bias));
  w_k_ = register_module("w_k", std::make_shared<Linear>(model_dim, model_dim, bias));
  w_v_ = register_module("w_v", std::make_shared<Linear>(model_dim, model_dim, bias));
  w_o_ = register_module("w_o", std::make_shared<Linear>(model_dim, model_dim, bias));
}

Tensor MultiHeadAttention::forward(const Tensor& x_query, const Tensor& x_context, const AttnMask& mask,
                                   KVCache* cache, int64_t start_pos) const {
  const std::string who = str_cat("MultiHeadAttention(model_dim=", model_dim_, ", head_num=", head_num_, ")");
  check_input(x_query, model_dim_, who, "x_query");
  const bool self = !x_context.defined();
  if (!self) {
    check_input(x_context, model_dim_, who, "x_context");
    check(x_context.size(0) == x_query.size(0), who, ": x_query ", shape_str(x_query.shape()), " and x_context ",
          shape_str(x_context.shape()), " have different batch sizes");
  }
  check(self || !cache, who, ": a KV cache is for self-attention (x_context must be undefined)");
  if (self && can_pack(*w_q_, *w_k_, *w_v_, cache)) {  // one projection, read in place (as GQA's)
    const int64_t B = x_query.size(0), T = x_query.size(1);
    Tensor qkv = reshape(linear_stacked(x_query, {w_q_.get(), w_k_.get(), w_v_.get()}), {B, T, 3 * head_num_, head_dim_});
    return w_o_->forward(scaled_dot_product_attention_packed(qkv, head_num_, head_num_, mask, dropout_p_, is_training()));
  }
  const Tensor& ctx = self ? x_query : x_context;
  Tensor q = split_heads(w_q_->forward(x_query), head_num_);
  Tensor k = split_heads(w_k_->forward(ctx), head_num_);
  Tensor v = split_heads(w_v_->forward(ctx), head_num_);
  if (cache) {
    const int64_t pos = start_position(cache, start_pos, who);
    return w_o_->forward(merge_heads(attend_cached(*cache, q, k, v, pos, mask, dropout_p_, is_training(), who)));
  }
  Tensor out = scaled_dot_product_attention(q, k, v, mask, dropout_p_, is_training());
  return w_o_->forward(merge_heads(out));
}

int64_t MultiHeadAttention::kv_cache_bytes_per_token(int64_t model_dim, int64_t bytes_per_element) {
  return 2 * model_dim * bytes_per_element;
}

std::string MultiHeadAttention::extra_repr() const {
  return str_cat("model_dim=", model_dim_, ", head_num=", head_num_, ", head_dim=", head_dim_, ", dropout_p=", dropout_p_);
}

// ---------------------------------------------------------------------------------------------
// GroupedQueryAttention

GroupedQueryAttention::GroupedQueryAttention(const GroupedQueryAttentionOptions& o) : options_(o), head_dim_(0) {
  check(o.d_model > 0 && o.n_heads > 0 && o.n_kv_heads > 0,
        "GroupedQueryAttention: d_model, n_heads and n_kv_heads must be positive, got ", o.d_model, ", ", o.n_heads,
        ", ", o.n_kv_heads);
  check(o.head_dim >= 0, "GroupedQueryAttention: head_dim must be >= 0 (0 = d_model / n_heads), got ", o.head_dim);
  check(o.head_dim > 0 || o.d_model % o.n_heads == 0, "GroupedQueryAttention: d_model ", o.d_model,
        " is not divisible by n_heads ", o.n_heads, " (or set head_dim)");
  check(o.n_heads % o.n_kv_heads == 0, "GroupedQueryAttention: n_heads ", o.n_heads,
        " is not divisible by n_kv_heads ", o.n_kv_heads);
  check(o.dropout >= 0 && o.dropout < 1, "GroupedQueryAttention: dropout must be in [0, 1), got ", o.dropout);
  head_dim_ = o.head_dim > 0 ? o.head_dim : o.d_model / o.n_heads;
  check(!o.rope || head_dim_ % 2 == 0, "GroupedQueryAttention: RoPE needs an even head_dim, got ", head_dim_);
  const bool upper = o.naming == AttentionNaming::Uppercase;
  const int64_t q_dim = o.n_heads * head_dim_, kv_dim = o.n_kv_heads * head_dim_;
  w_q_ = register_module(upper ? "W_q" : "w_q", std::make_shared<Linear>(o.d_model, q_dim, o.bias));
  w_k_ = register_module(upper ? "W_k" : "w_k", std::make_shared<Linear>(o.d_model, kv_dim, o.bias));
  w_v_ = register_module(upper ? "W_v" : "w_v", std::make_shared<Linear>(o.d_model, kv_dim, o.bias));
  w_o_ = register_module(upper ? "W_o" : "w_o", std::make_shared<Linear>(q_dim, o.d_model, o.out_bias));
  if (o.qk_norm) {
    q_norm_ = register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, o.norm_eps));
    k_norm_ = register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, o.norm_eps));
  }
  if (o.rope)
    rope_ = register_module("rope", std::make_shared<RotaryEmbedding>(head_dim_, o.max_seq_len, o.rope_base,
                                                                      o.rope_layout, kFloat32, o.rope_scaling));
}

Tensor GroupedQueryAttention::forward(const Tensor& x, const AttnMask& mask, KVCache* cache,
                                      int64_t start_pos) const {
  const GroupedQueryAttentionOptions& o = options_;
  const std::string who = str_cat("GroupedQueryAttention(d_model=", o.d_model, ", n_heads=", o.n_heads,
                              ", n_kv_heads=", o.n_kv_heads, ")");
  check_input(x, o.d_model, who);
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t pos = start_position(cache, start_pos, who);
  if (!q_norm_ && can_pack(*w_q_, *w_k_, *w_v_, cache)) {
    // One projection [B, T, Hq + 2 Hkv, hs], RoPE on its query and key heads, attention read in
    // place and written as [B, T, Hq hs]: no head splits, merges or dx sums.
    Tensor qkv = reshape(linear_stacked(x, {w_q_.get(), w_k_.get(), w_v_.get()}),
                         {B, T, o.n_heads + 2 * o.n_kv_heads, head_dim_});
    if (rope_) qkv = rope_->forward_packed(qkv, pos, o.n_heads + o.n_kv_heads);
    return w_o_->forward(
        scaled_dot_product_attention_packed(qkv, o.n_heads, o.n_kv_heads, mask, o.dropout, is_training()));
  }
  // [B, T, heads * hs] -> [B, T, heads, hs] (QK-Norm over hs) -> [B, heads, T, hs] (RoPE)
  Tensor q = reshape(w_q_->forward(x), {B, T, o.n_heads, head_dim_});
  Tensor k = reshape(w_k_->forward(x), {B, T, o.n_kv_heads, head_dim_});
  Tensor v = transpose(reshape(w_v_->forward(x), {B, T, o.n_kv_heads, head_dim_}), 1, 2);
  if (q_norm_) {
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = transpose(q, 1, 2);
  k = transpose(k, 1, 2);
  if (rope_) {
    q = rope_->forward(q, pos);
    k = rope_->forward(k, pos);
  }
  if (cache)
    return w_o_->forward(merge_heads(attend_cached(*cache, q, k, v, pos, mask, o.dropout, is_training(), who)));
  Tensor out = scaled_dot_product_attention(q, k, v, mask, o.dropout, is_training());
  return w_o_->forward(merge_heads(out));
}

int64_t GroupedQueryAttention::kv_cache_bytes_per_token(const GroupedQueryAttentionOptions& o,
                                                        int64_t bytes_per_element) {
  return 2 * o.n_kv_heads * (o.head_dim > 0 ? o.head_dim : o.d_model / o.n_heads) * bytes_per_element;
}

std::string GroupedQueryAttention::extra_repr() const {
  const GroupedQueryAttentionOptions& o = options_;
  std::string s = str_cat("d_model=", o.d_model, ", n_heads=", o.n_heads, ", n_kv_heads=", o.n_kv_heads,
                      ", head_dim=", head_dim_);
  if (o.dropout > 0) s += str_cat(", dropout=", o.dropout);
  if (o.qk_norm) s += ", qk_norm=true";
  if (o.rope) s += str_cat(", rope=", rope_layout_name(o.rope_layout));
  return s;
}

// ---------------------------------------------------------------------------------------------
// MultiLatentAttention

MultiLatentAttention::MultiLatentAttention(const MultiLatentAttentionOptions& o)
    : options_(o), q_latent_dim_(o.q_latent_dim < 0 ? o.latent_dim : o.q_latent_dim) {
  const char* who = "MultiLatentAttention";
  check(o.model_dim > 0 && o.head_num > 0 && o.head_dim > 0 && o.latent_dim > 0, who,
        ": model_dim, head_num, head_dim and latent_dim must be positive, got ", o.model_dim, ", ", o.head_num, ", ",
        o.head_dim, ", ", o.latent_dim);
  check(o.rope_dim >= 0 && o.rope_dim % 2 == 0, who, ": rope_dim must be 0 or a positive even number, got ",
        o.rope_dim);
  check(o.q_latent_dim >= -1, who, ": q_latent_dim must be -1 (= latent_dim), 0 (no q compression) or positive, got ",
        o.q_latent_dim);
  check(o.dropout >= 0 && o.dropout < 1, who, ": dropout must be in [0, 1), got ", o.dropout);
  check(!o.decoupled_rope_key || o.rope_dim > 0, who, ": decoupled_rope_key needs rope_dim > 0");
  // NOTE: hand-written MLA classes often assert model_dim % head_num == 0, which nothing here
  // needs (head_dim is its own option), so we do not.
  const int64_t H = o.head_num, hd = o.head_dim, rd = o.rope_dim;
  if (o.naming == LatentAttentionNaming::Capitalized) {
    check(rd == 0 && q_latent_dim_ == 0, who,
          ": LatentAttentionNaming::Capitalized (W_q, W_kv_down, W_k_up, W_v_up, W_o) has no RoPE and ",
          "no q compression; set rope_dim = 0 and q_latent_dim = 0 (got ", rd, " and ", o.q_latent_dim, ")");
    q_proj_ = register_module("W_q", std::make_shared<Linear>(o.model_dim, H * hd, false));
    kv_down_ = register_module("W_kv_down", std::make_shared<Linear>(o.model_dim, o.latent_dim, false));
    k_up_ = register_module("W_k_up", std::make_shared<Linear>(o.latent_dim, H * hd, false));
    v_up_ = register_module("W_v_up", std::make_shared<Linear>(o.latent_dim, H * hd, false));
    o_proj_ = register_module("W_o", std::make_shared<Linear>(H * hd, o.model_dim, false));
    return;
  }
  // Registered in the order hand-written MLA with these names uses (kv_down_proj, kv_up_proj,
  // q_down_proj, q_up_proj, rope, o_proj), so that named_parameters() walks alike.
  kv_down_ = register_module("kv_down_proj", std::make_shared<Linear>(o.model_dim, o.latent_dim, false));
  const int64_t kv_rope = o.decoupled_rope_key ? 0 : rd;  // k_rope per head from the latent
  kv_up_ = register_module("kv_up_proj", std::make_shared<Linear>(o.latent_dim, H * (hd + kv_rope + hd), false));
  if (o.decoupled_rope_key)
    k_rope_proj_ = register_module("k_rope_proj", std::make_shared<Linear>(o.model_dim, rd, false));
  if (q_latent_dim_ > 0) {
    q_down_ = register_module("q_down_proj", std::make_shared<Linear>(o.model_dim, q_latent_dim_, false));
    q_up_ = register_module("q_up_proj", std::make_shared<Linear>(q_latent_dim_, H * (hd + rd), false));
  } else {
    q_proj_ = register_module("q_proj", std::make_shared<Linear>(o.model_dim, H * (hd + rd), false));
  }
  if (rd > 0)
    rope_ = register_module("rope", std::make_shared<RotaryEmbedding>(rd, o.max_seq_len, o.rope_base, o.rope_layout));
  o_proj_ = register_module("o_proj", std::make_shared<Linear>(H * hd, o.model_dim, false));
}

std::pair<Tensor, Tensor> MultiLatentAttention::keys_values(const Tensor& latent, const Tensor& k_rope_shared) const {
  const MultiLatentAttentionOptions& o = options_;
  const int64_t H = o.head_num, hd = o.head_dim, rd = o.rope_dim;
  if (!kv_up_) return {split_heads(k_up_->forward(latent), H), split_heads(v_up_->forward(latent), H)};
  Tensor kv = split_heads(kv_up_->forward(latent), H);  // [B, H, L, hd (+ rd) + hd]
  if (rd == 0) {
    auto parts = split(kv, {hd, hd}, -1);
    return {parts[0], parts[1]};
  }
  if (o.decoupled_rope_key) {
    auto parts = split(kv, {hd, hd}, -1);
    const Tensor& kc = parts[0];
    Tensor kr = expand(k_rope_shared, {kc.size(0), H, kc.size(2), rd});  // one rope key for every head
    return {cat({kc, kr}, -1), parts[1]};
  }
  auto parts = split(kv, {hd, rd, hd}, -1);  // k_content, k_rope, v_content
  return {cat({parts[0], rope_->forward(parts[1], 0)}, -1), parts[2]};  // positions 0 .. L-1
}

Tensor MultiLatentAttention::forward(const Tensor& x, const AttnMask& mask, KVCache* cache, int64_t start_pos) const {
  const MultiLatentAttentionOptions& o = options_;
  const std::string who = str_cat("MultiLatentAttention(model_dim=", o.model_dim, ", head_num=", o.head_num,
                              ", head_dim=", o.head_dim, ", latent_dim=", o.latent_dim, ", rope_dim=", o.rope_dim, ")");
  check_input(x, o.model_dim, who);
  const int64_t B = x.size(0), T = x.size(1), H = o.head_num, hd = o.head_dim, rd = o.rope_dim;
  const int64_t pos = start_position(cache, start_pos, who);
  Tensor latent = kv_down_->forward(x);  // [B, T, latent_dim]: what the cache keeps
  Tensor k_rope;                         // [B, 1, T, rd] after RoPE (decoupled key only)
  if (k_rope_proj_) k_rope = rope_->forward(reshape(k_rope_proj_->forward(x), {B, 1, T, rd}), pos);
  if (cache) {
    cache->latent = latent = append(cache->latent, latent, 1, who, "latents");
    if (k_rope.defined()) cache->k_rope = k_rope = append(cache->k_rope, k_rope, 2, who, "rope keys");
    cache->length = pos + T;
  }
  auto [k, v] = keys_values(latent, k_rope);
  Tensor q = split_heads(q_proj_ ? q_proj_->forward(x) : q_up_->forward(q_down_->forward(x)), H);  // [B, H, T, hd + rd]
  if (rd > 0) {
    auto parts = split(q, {hd, rd}, -1);
    q = cat({parts[0], rope_->forward(parts[1], pos)}, -1);
  }
  // NOTE: hand-written MLA sometimes fills masked scores with -inf (masked_fill(mask == 0,
  // -inf)) where the usual MHA/GQA code uses -1e9; a bool mask here uses -1e9, which differs
  // only in a fully masked row (uniform weights instead of NaN).
  Tensor out = scaled_dot_product_attention(q, k, v, mask, o.dropout, is_training());  // [B, H, T, hd]
  return o_proj_->forward(merge_heads(out));
}

int64_t MultiLatentAttention::kv_cache_bytes_per_token(const MultiLatentAttentionOptions& o,
                                                       int64_t bytes_per_element) {
  return (o.latent_dim + (o.decoupled_rope_key ? o.rope_dim : 0)) * bytes_per_element;
}

std::string MultiLatentAttention::extra_repr() const {
  const MultiLatentAttentionOptions& o = options_;
  std::string s = str_cat("model_dim=", o.model_dim, ", head_num=", o.head_num, ", head_dim=", o.head_dim,
                      ", latent_dim=", o.latent_dim, ", rope_dim=", o.rope_dim);
  if (q_latent_dim_ != o.latent_dim) s += str_cat(", q_latent_dim=", q_latent_dim_);
  if (o.decoupled_rope_key) s += ", decoupled_rope_key=true";
  return s;
}

// ---------------------------------------------------------------------------------------------
// specs: the block's attention kinds

namespace {

void check_heads(int64_t n_heads, const std::string& who) {
  check(n_heads > 0, who, ": field 'attention.n_heads' must be positive, got ", n_heads);
}

// The head width of d_model split over n_heads; it must divide.
void check_split(const SublayerContext& ctx, int64_t n_heads, const std::string& who) {
  check(ctx.d_model % n_heads == 0, who, ": field 'attention.n_heads' (", n_heads, ") must divide d_model (",
        ctx.d_model, ")");
}

void check_rope_dim(const SublayerContext& ctx, int64_t head_dim, const std::string& who) {
  check(!ctx.rope || head_dim % 2 == 0, who, ": position = rope needs an even head dim, got ", head_dim);
}

GroupedQueryAttentionOptions gqa_options(const SublayerContext& ctx, int64_t n_heads, int64_t n_kv_heads,
                                         int64_t head_dim, bool qkv_bias, bool out_bias, bool qk_norm) {
  GroupedQueryAttentionOptions o;
  o.d_model = ctx.d_model;
  o.n_heads = n_heads;
  o.n_kv_heads = n_kv_heads > 0 ? n_kv_heads : n_heads;
  o.head_dim = head_dim;
  o.bias = qkv_bias;
  o.out_bias = out_bias;
  o.dropout = ctx.dropout;
  o.qk_norm = qk_norm;
  o.norm_eps = ctx.norm_eps;
  o.rope = ctx.rope;
  o.rope_layout = ctx.rope_layout;
  o.max_seq_len = ctx.max_seq_len;
  o.rope_base = ctx.rope_base;
  o.rope_scaling = ctx.rope_scaling;
  return o;
}

}  // namespace

void MHASpec::validate(const SublayerContext& ctx, const std::string& who) const {
  check_heads(n_heads, who);
  check_split(ctx, n_heads, who);
  check_rope_dim(ctx, ctx.d_model / n_heads, who);
}

std::shared_ptr<Attention> MHASpec::build(const SublayerContext& ctx) const {
  if (!ctx.rope && !qk_norm) return std::make_shared<MultiHeadAttention>(ctx.d_model, n_heads, ctx.dropout, bias);
  return std::make_shared<GroupedQueryAttention>(gqa_options(ctx, n_heads, n_heads, 0, bias, bias, qk_norm));
}

void GQASpec::validate(const SublayerContext& ctx, const std::string& who) const {
  check_heads(n_heads, who);
  check(n_kv_heads >= 0, who, ": field 'attention.n_kv_heads' must be >= 0 (0 = n_heads), got ", n_kv_heads);
  check(n_kv_heads == 0 || n_heads % n_kv_heads == 0, who, ": field 'attention.n_kv_heads' (", n_kv_heads,
        ") must divide n_heads (", n_heads, ")");
  check(head_dim >= 0, who, ": field 'attention.head_dim' must be >= 0 (0 = d_model / n_heads), got ", head_dim);
  if (head_dim == 0) check_split(ctx, n_heads, who);
  check_rope_dim(ctx, head_dim > 0 ? head_dim : ctx.d_model / n_heads, who);
}

std::shared_ptr<Attention> GQASpec::build(const SublayerContext& ctx) const {
  return std::make_shared<GroupedQueryAttention>(
      gqa_options(ctx, n_heads, n_kv_heads, head_dim, qkv_bias, out_bias, qk_norm));
}

namespace {

int64_t mla_head_dim(const MLASpec& s, const SublayerContext& ctx) {
  return s.head_dim > 0 ? s.head_dim : ctx.d_model / s.n_heads;
}

}  // namespace

void MLASpec::validate(const SublayerContext& ctx, const std::string& who) const {
  check_heads(n_heads, who);
  check(head_dim >= 0, who, ": field 'attention.head_dim' must be >= 0 (0 = d_model / n_heads), got ", head_dim);
  if (head_dim == 0) check_split(ctx, n_heads, who);
  check(latent_dim >= 0, who, ": field 'attention.latent_dim' must be >= 0 (0 = 4 head_dim), got ", latent_dim);
  check(q_latent_dim >= -1, who,
        ": field 'attention.q_latent_dim' must be -1 (= latent_dim), 0 (none) or positive, got ", q_latent_dim);
  const int64_t rd = rope_dim > 0 ? rope_dim : mla_head_dim(*this, ctx) / 2;
  check(!ctx.rope || (rope_dim >= 0 && rd > 0 && rd % 2 == 0), who,
        ": field 'attention.rope_dim' must give an even RoPE part (0 = head_dim / 2), got ", rope_dim, " (-> ", rd,
        ")");
  check(ctx.rope || !decoupled_rope_key, who,
        ": field 'attention.decoupled_rope_key' needs position = rope (a decoupled key is a RoPE key)");
}

std::shared_ptr<Attention> MLASpec::build(const SublayerContext& ctx) const {
  MultiLatentAttentionOptions o;
  o.model_dim = ctx.d_model;
  o.head_num = n_heads;
  o.head_dim = mla_head_dim(*this, ctx);
  o.latent_dim = latent_dim > 0 ? latent_dim : 4 * o.head_dim;
  o.rope_dim = ctx.rope ? (rope_dim > 0 ? rope_dim : o.head_dim / 2) : 0;
  o.q_latent_dim = q_latent_dim;
  o.decoupled_rope_key = decoupled_rope_key;
  o.dropout = ctx.dropout;
  o.max_seq_len = ctx.max_seq_len;
  o.rope_base = ctx.rope_base;
  o.rope_layout = ctx.rope_layout;
  return std::make_shared<MultiLatentAttention>(o);
}

}  // namespace xg::nn

// KV-cache sizes: the per-layer arithmetic of two tables, then one layer of each attention kind
// decoding with xgrad's KVCache, counting the floats it really keeps.
#include "experiments/demos/kvcache.hpp"

#include "autograd/ops.hpp"
#include "nn/attention.hpp"

namespace xg::experiments::demos {

std::vector<CacheRow> cache_table(const CacheTableConfig& c) {
  check(c.n_heads > 0 && c.head_dim > 0 && c.seq_len > 0 && c.bytes_per_element > 0,
        "kvcache: heads, head_dim, seq_len and bytes per element must be positive");
  std::vector<CacheRow> rows;
  for (const CacheScheme& s : c.schemes) {
    CacheRow r;
    r.name = s.name;
    if (s.kind == CacheKind::MLA) {
      r.elements_per_token = s.latent_dim + s.rope_dim;  // c_KV (+ the shared RoPE key)
    } else {
      check(s.n_kv_heads > 0 && c.n_heads % s.n_kv_heads == 0, "kvcache: ", s.name, ": kv heads ", s.n_kv_heads,
            " must divide the ", c.n_heads, " query heads");
      r.n_kv_heads = s.n_kv_heads;
      r.q_per_group = c.n_heads / s.n_kv_heads;
      r.elements_per_token = 2 * s.n_kv_heads * c.head_dim;  // K and V
    }
    r.bytes_per_token = r.elements_per_token * c.bytes_per_element;
    r.bytes = r.bytes_per_token * c.seq_len;
    r.mib = static_cast<double>(r.bytes) / (1024.0 * 1024.0);
    rows.push_back(r);
  }
  for (CacheRow& r : rows) r.percent_of_first = 100.0 * static_cast<double>(r.bytes) / static_cast<double>(rows[0].bytes);
  return rows;
}

CacheTableConfig seed_section7(int64_t seq_len, int64_t bytes_per_element) {
  CacheTableConfig c{"32 query heads x 128 (LLaMA-7B), MHA / GQA / MQA", 32, 128, seq_len, bytes_per_element, {}};
  c.schemes = {{"MHA", CacheKind::MHA, 32}, {"GQA-4", CacheKind::GQA, 4}, {"GQA-8", CacheKind::GQA, 8},
               {"MQA", CacheKind::MQA, 1}};
  return c;
}

CacheTableConfig seed_section9(int64_t seq_len, int64_t bytes_per_element) {
  CacheTableConfig c{"d_model 512, 8 query heads x 64, MHA / GQA / MLA (latent 64)", 8, 64, seq_len,
                     bytes_per_element, {}};
  // NOTE: this MLA row counts the joint latent c_KV alone, as simplified MLA arithmetic
  // usually does; DeepSeek-V2's MLA also caches a decoupled RoPE key per token (the cross-check
  // below measures both).
  c.schemes = {{"MHA", CacheKind::MHA, 8}, {"GQA-4", CacheKind::GQA, 4}, {"GQA-2", CacheKind::GQA, 2},
               {"MLA", CacheKind::MLA, 0, 64, 0}};
  return c;
}

void CacheCheckConfig::validate() const {
  check(d_model > 0 && n_heads > 0 && d_model % n_heads == 0, "kvcache: --check-heads must divide --check-d-model ",
        d_model, ", got ", n_heads);
  check(latent_dim > 0 && rope_dim >= 0 && rope_dim % 2 == 0,
        "kvcache: --check-latent must be positive and --check-rope-dim even");
  check(batch > 0 && prefill > 0 && decode >= 0, "kvcache: --batch and --prefill must be positive, --decode >= 0");
}

namespace {

// Prefill then token-by-token decoding through `forward(x, mask, cache)`.
template <class Attn>
nn::KVCache decode(const Attn& attn, int64_t d_model, const CacheCheckConfig& c, Generator& gen) {
  nn::KVCache cache;
  attn.forward(randn({c.batch, c.prefill, d_model}, kFloat32, &gen), AttnMask::causal_mask(), &cache);
  for (int64_t t = 0; t < c.decode; ++t) attn.forward(randn({c.batch, 1, d_model}, kFloat32, &gen), {}, &cache);
  return cache;
}

}  // namespace

std::vector<CacheCheck> check_caches(const CacheCheckConfig& c) {
  c.validate();
  NoGradGuard no_grad;
  Generator gen(c.seed);
  const int64_t hs = c.d_model / c.n_heads, tokens = c.prefill + c.decode;
  std::vector<CacheCheck> out;
  auto record = [&](const std::string& name, const nn::KVCache& cache, int64_t per_token_elements,
                    int64_t module_bytes_per_token) {
    out.push_back({name, per_token_elements * c.batch * tokens, cache.bytes() / 4, cache.length,
                   module_bytes_per_token});
  };
  // The block settings every layer is built with; RoPE tables of 4096 positions.
  nn::SublayerContext plain_ctx;
  plain_ctx.d_model = c.d_model;
  plain_ctx.max_seq_len = 4096;
  nn::SublayerContext rope_ctx = plain_ctx;
  rope_ctx.rope = true;
  std::vector<std::pair<std::string, int64_t>> gqa = {{"MHA", c.n_heads}};
  for (int64_t kv = c.n_heads / 2; kv > 1; kv /= 2)
    if (c.n_heads % kv == 0) gqa.push_back({"GQA-" + std::to_string(kv), kv});
  if (c.n_heads > 1) gqa.push_back({"MQA", 1});
  for (const auto& [name, kv] : gqa) {
    nn::GQASpec o;
    o.n_heads = c.n_heads;
    o.n_kv_heads = kv;
    o.out_bias = true;
    nn::GroupedQueryAttention attn(o, rope_ctx);
    record(name, decode(attn, c.d_model, c, gen), 2 * kv * hs, attn.kv_cache_bytes_per_token(4));
  }
  {  // minimal MLA (W_q, W_kv_down, W_k_up, W_v_up, W_o): latent only, no RoPE, no q compression
    nn::MLASpec o;
    o.n_heads = c.n_heads;
    o.head_dim = hs;
    o.latent_dim = c.latent_dim;
    o.q_latent_dim = 0;
    nn::MultiLatentAttention attn(o, plain_ctx, nn::LatentAttentionNaming::Capitalized);
    record("MLA", decode(attn, c.d_model, c, gen), c.latent_dim, attn.kv_cache_bytes_per_token(4));
  }
  if (c.rope_dim > 0) {  // DeepSeek-V2: a shared RoPE key cached beside the latent
    nn::MLASpec o;
    o.n_heads = c.n_heads;
    o.head_dim = hs;
    o.latent_dim = c.latent_dim;
    o.rope_dim = c.rope_dim;
    o.decoupled_rope_key = true;
    nn::MultiLatentAttention attn(o, rope_ctx);
    record("MLA+RoPE key", decode(attn, c.d_model, c, gen), c.latent_dim + c.rope_dim,
           attn.kv_cache_bytes_per_token(4));
  }
  return out;
}

}  // namespace xg::experiments::demos

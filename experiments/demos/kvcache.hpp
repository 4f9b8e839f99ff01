// KV-cache sizes per layer from the formulas, for two layers (32 query heads x 128: MHA / GQA /
// MQA; d_model 512, 8 heads x 64: MHA / GQA / MLA), and a cross-check: the floats xgrad's KVCache
// really holds after a cached decode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xg::experiments::demos {

enum class CacheKind { MHA, GQA, MQA, MLA };

struct CacheScheme {
  std::string name;  // "MHA", "GQA-4", "MQA", "MLA"
  CacheKind kind;
  int64_t n_kv_heads = 0;    // MHA/GQA/MQA
  int64_t latent_dim = 0;  // MLA: c_KV per token
  int64_t rope_dim = 0;    // MLA with a decoupled RoPE key (DeepSeek-V2): cached beside c_KV
};

struct CacheTableConfig {
  std::string title;
  int64_t n_heads = 32, head_dim = 128, seq_len = 4096, bytes_per_element = 2;  // bf16
  std::vector<CacheScheme> schemes;
};

struct CacheRow {
  std::string name;
  int64_t n_kv_heads = 0, q_per_group = 0;
  int64_t elements_per_token = 0;  // cached numbers per token and layer
  int64_t bytes_per_token = 0;
  int64_t bytes = 0;               // for seq_len tokens
  double mib = 0, percent_of_first = 0;
};

// Cached numbers per token and layer: 2 (K and V) * kv_heads * head_dim for MHA/GQA/MQA (as
// GroupedQueryAttention::kv_cache_bytes_per_token), latent_dim (+ rope_dim) for MLA.
std::vector<CacheRow> cache_table(const CacheTableConfig& c);

// The two tables (section 7 and 9 in the output's CSV and JSON): 32 q heads x 128, the attention
// of LLaMA-7B, with 32 / 8 / 4 / 1 KV heads; and a small layer, d_model 512, 8 heads x 64, with
// 8 / 4 / 2 KV heads and MLA with a latent of 64. Both 4096 tokens in bf16 by default.
CacheTableConfig seed_section7(int64_t seq_len = 4096, int64_t bytes_per_element = 2);
CacheTableConfig seed_section9(int64_t seq_len = 4096, int64_t bytes_per_element = 2);

// A real cached decode: prefill `prefill` tokens, then `decode` single tokens, batch `batch`,
// float32, one layer of xgrad's GroupedQueryAttention / MultiLatentAttention.
struct CacheCheckConfig {
  int64_t d_model = 64, n_heads = 4, latent_dim = 16, rope_dim = 8;  // a latent of d_model / 4
  int64_t batch = 2, prefill = 6, decode = 3;
  uint64_t seed = 42;
  void validate() const;
};

struct CacheCheck {
  std::string name;
  int64_t expected_floats = 0;  // formula elements_per_token * batch * tokens
  int64_t cached_floats = 0;    // KVCache::bytes() / 4 after the decode
  int64_t cache_length = 0;     // KVCache::length
  int64_t module_bytes_per_token = 0;  // the module's kv_cache_bytes_per_token(4)
};

std::vector<CacheCheck> check_caches(const CacheCheckConfig& c);

}  // namespace xg::experiments::demos

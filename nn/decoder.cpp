// DecoderLM, its KV-cache generation, and its config as JSON (save_pretrained / load_pretrained).
#include "nn/decoder.hpp"

#include "io/atomic_file.hpp"
#include "io/read_file.hpp"
#include "nn/init.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <utility>
#include <variant>

#include "autograd/checkpoint.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/memory.hpp"
#include "autograd/random.hpp"
#include "autograd/shape.hpp"

namespace xg::nn {

namespace {

using json = nlohmann::ordered_json;

// Reads the fields of one JSON object into a config, each by name with its type checked.
// Every field is required unless declared optional: a config.json that leaves one out would
// load with a default and compute something else than the model it came with (xgrad writes
// them all). An unknown field is an error that lists the known ones.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {
    check(obj.is_object(), source_, ": ", prefix_.empty() ? std::string("the config") : "field '" + path("") + "'",
          " must be a JSON object, got ", obj.dump());
  }

  // One field of any type a config holds: integer, number, bool, a named enum.
  template <class T>
  void operator()(const char* key, T& dst) {
    add(key, [this, key, &dst](const json& v) { read(key, v, dst); }, true);
  }
  // A field added later (Later, nn/sublayer.hpp): read when present, not required.
  template <class T>
  void operator()(const char* key, Later<T> dst) {
    add(key, [this, key, p = &dst.value](const json& v) { read(key, v, *p); }, false);
  }
  void object(const char* key, const std::function<void(const json&)>& read, bool required = true) {
    add(key, read, required);
  }
  void skip(const char* key) { add(key, [](const json&) {}, false); }

  // Applies every field present; an unknown or a missing one is an error.
  void run() const {
    for (const auto& [key, value] : obj_.items()) {
      auto it = fields_.find(key);
      if (it == fields_.end()) {
        std::string known;
        for (const auto& [k, f] : fields_) known += (known.empty() ? "" : ", ") + k;
        throw Error(str_cat(source_, ": unknown field '", path(key), "' (known fields: ", known, ")"));
      }
      it->second.read(value);
    }
    for (const auto& [key, f] : fields_)
      check(!f.required || obj_.contains(key), source_, ": missing field '", path(key),
            "' (every field is required: a default could compute another model than the weights')");
  }

  std::string path(const std::string& key) const { return prefix_.empty() ? key : key.empty() ? prefix_ : prefix_ + "." + key; }

 private:
  void read(const char* key, const json& v, int64_t& dst) const {
    check(v.is_number_integer(), source_, ": field '", path(key), "' must be an integer, got ", v.dump());
    dst = v.get<int64_t>();
  }
  void read(const char* key, const json& v, double& dst) const {
    check(v.is_number(), source_, ": field '", path(key), "' must be a number, got ", v.dump());
    dst = v.get<double>();
  }
  void read(const char* key, const json& v, bool& dst) const {
    check(v.is_boolean(), source_, ": field '", path(key), "' must be true or false, got ", v.dump());
    dst = v.get<bool>();
  }
  template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
  void read(const char* key, const json& v, E& dst) const {
    std::string allowed;
    for (const auto& [e, n] : EnumNames<E>::values) allowed += std::string(allowed.empty() ? "" : ", ") + "\"" + n + "\"";
    if (v.is_string())
      for (const auto& [e, n] : EnumNames<E>::values)
        if (v.get<std::string>() == n) {
          dst = e;
          return;
        }
    throw Error(str_cat(source_, ": field '", path(key), "' must be one of ", allowed, ", got ", v.dump()));
  }

  struct Field {
    std::function<void(const json&)> read;
    bool required = true;
  };
  void add(const char* key, std::function<void(const json&)> f, bool required) {
    fields_[key] = Field{std::move(f), required};
  }
  const json& obj_;
  std::string source_, prefix_;
  std::map<std::string, Field> fields_;
};

// Writes one field: enums as their names.
struct FieldWriter {
  json& j;
  template <class T>
  void operator()(const char* key, const T& v) {
    if constexpr (std::is_enum_v<T>)
      j[key] = enum_name(v);
    else
      j[key] = v;
  }
  template <class T>
  void operator()(const char* key, Later<T> v) {
    (*this)(key, static_cast<const std::remove_const_t<T>&>(v.value));
  }
};

// A family's spec as {"kind": "...", <its fields>}.
template <class Variant>
json spec_to_json(const Variant& spec) {
  json j;
  std::visit(
      [&](const auto& s) {
        j["kind"] = std::decay_t<decltype(s)>::kind;
        FieldWriter w{j};
        std::decay_t<decltype(s)>::visit(s, w);
      },
      spec);
  return j;
}

// Sets `dst` to the alternative of Variant whose kind is `kind` (with its defaults); false if none.
template <class Variant, std::size_t I = 0>
bool spec_of_kind(const std::string& kind, Variant& dst) {
  if constexpr (I == std::variant_size_v<Variant>) {
    return false;
  } else {
    using Spec = std::variant_alternative_t<I, Variant>;
    if (kind == Spec::kind) {
      dst = Spec{};
      return true;
    }
    return spec_of_kind<Variant, I + 1>(kind, dst);
  }
}

template <class Variant, std::size_t... I>
std::string spec_kinds(std::index_sequence<I...>) {
  std::string s;
  ((s += std::string(s.empty() ? "" : ", ") + "\"" + std::variant_alternative_t<I, Variant>::kind + "\""), ...);
  return s;
}

template <class Variant>
void spec_from_json(const json& j, Variant& dst, const std::string& source, const std::string& prefix) {
  const std::string kinds = spec_kinds<Variant>(std::make_index_sequence<std::variant_size_v<Variant>>{});
  check(j.is_object(), source, ": field '", prefix, "' must be an object {\"kind\": ", kinds, ", ...}, got ", j.dump());
  check(j.contains("kind") && j["kind"].is_string(), source, ": field '", prefix,
        ".kind' must be one of ", kinds, ", got ", j.contains("kind") ? j["kind"].dump() : std::string("nothing"));
  check(spec_of_kind(j["kind"].get<std::string>(), dst), source, ": field '", prefix, ".kind' must be one of ",
        kinds, ", got ", j["kind"].dump());
  std::visit(
      [&](auto& s) {
        FieldReader r(j, source, prefix);
        r.skip("kind");
        std::decay_t<decltype(s)>::visit(s, r);
        r.run();
      },
      dst);
}

json block_to_json(const BlockConfig& c) {
  json j;
  FieldWriter w{j};
  BlockConfig::visit(c, w);
  if (c.rope_scaling.active()) {
    json r;
    FieldWriter rw{r};
    BlockConfig::visit_rope_scaling(c.rope_scaling, rw);
    j["rope_scaling"] = r;
  }
  j["norm"] = spec_to_json(c.norm);
  j["attention"] = spec_to_json(c.attention);
  j["ffn"] = spec_to_json(c.ffn);
  return j;
}

// A block written by xgrad before the sublayer specs (flat fields: "n_heads", "norm":
// "rmsnorm", "ffn": "swiglu", "bias", "mla_*", ...) in today's form, with that format's
// defaults for the fields it leaves out, so that older models keep loading.
bool is_flat_block(const json& b) {
  if (!b.is_object()) return false;
  for (const char* k : {"n_heads", "n_kv_heads", "d_ff", "norm_eps", "ffn_naming", "swiglu_naming", "num_experts",
                        "top_k", "moe_aux_loss_coef", "moe_expert", "qk_norm", "mla_head_dim", "mla_latent_dim",
                        "mla_rope_dim", "mla_q_latent_dim", "mla_decoupled_rope_key", "bias"})
    if (b.contains(k)) return true;
  for (const char* k : {"norm", "ffn", "attention"})
    if (b.contains(k) && b[k].is_string()) return true;
  return false;
}

// `j` ({"kind": ..., some fields}) with the fields it leaves out set to that kind's defaults.
template <class Variant>
json with_kind_defaults(json j) {
  Variant spec;
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string() || !spec_of_kind(j["kind"].get<std::string>(), spec))
    return j;  // reported when read
  const json defaults = spec_to_json(spec);
  for (const auto& [k, v] : defaults.items())
    if (!j.contains(k)) j[k] = v;
  return j;
}

json unflatten_block(const json& b) {
  auto get = [&](const char* k, json def) { return b.contains(k) ? b[k] : def; };
  // The flat format's block fields it leaves out take BlockConfig's defaults, as that format did.
  json out = block_to_json(BlockConfig{});
  for (const char* k : {"d_model", "norm_position", "position", "rope_layout", "rope_base", "max_seq_len", "dropout",
                        "naming"})
    if (b.contains(k)) out[k] = b[k];
  out["norm"] = {{"kind", get("norm", "layernorm")}, {"eps", get("norm_eps", 1e-5)}};
  const json attention = get("attention", "mha"), bias = get("bias", true);
  if (attention == "gqa")
    out["attention"] = {{"kind", "gqa"},         {"n_heads", get("n_heads", 8)}, {"n_kv_heads", get("n_kv_heads", 0)},
                        {"qkv_bias", bias},       {"out_bias", bias},             {"qk_norm", get("qk_norm", false)}};
  else if (attention == "mla")
    out["attention"] = {{"kind", "mla"},
                        {"n_heads", get("n_heads", 8)},
                        {"head_dim", get("mla_head_dim", 0)},
                        {"latent_dim", get("mla_latent_dim", 0)},
                        {"rope_dim", get("mla_rope_dim", 0)},
                        {"q_latent_dim", get("mla_q_latent_dim", -1)},
                        {"decoupled_rope_key", get("mla_decoupled_rope_key", false)}};
  else
    out["attention"] = {{"kind", attention}, {"n_heads", get("n_heads", 8)}, {"bias", bias}, {"qk_norm", get("qk_norm", false)}};
  const json ffn = get("ffn", "gelu"), d_ff = get("d_ff", 0);
  // The flat format's naming values in today's spelling ("seed" meant w_up, w_down for the MLP
  // and W_gate, W_up, W_down for SwiGLU).
  const std::map<std::string, std::string> mlp_names{{"seed", "up_down"}, {"fc", "fc"}, {"sequential", "sequential"}};
  const std::map<std::string, std::string> swiglu_names{{"seed", "upper"}, {"lowercase", "lower"}, {"llama", "llama"}};
  auto renamed = [](const std::map<std::string, std::string>& names, const json& v) -> json {
    auto it = v.is_string() ? names.find(v.get<std::string>()) : names.end();
    return it == names.end() ? v : json(it->second);
  };
  if (ffn == "swiglu")
    out["ffn"] = {{"kind", "swiglu"}, {"d_ff", d_ff}, {"bias", bias}, {"naming", renamed(swiglu_names, get("swiglu_naming", "seed"))}};
  else if (ffn == "moe")
    out["ffn"] = {{"kind", "moe"},          {"d_ff", d_ff},
                  {"num_experts", get("num_experts", 8)}, {"top_k", get("top_k", 2)},
                  {"aux_loss_coef", get("moe_aux_loss_coef", 0.01)}, {"expert", get("moe_expert", "ffn")}};
  else
    out["ffn"] = {{"kind", "mlp"}, {"activation", ffn}, {"d_ff", d_ff}, {"bias", bias}, {"naming", renamed(mlp_names, get("ffn_naming", "fc"))}};
  // Fields the flat format had no name for (GQA's head_dim, ...): today's defaults, as then.
  out["norm"] = with_kind_defaults<NormSpec>(out["norm"]);
  out["attention"] = with_kind_defaults<AttentionSpec>(out["attention"]);
  out["ffn"] = with_kind_defaults<FFNSpec>(out["ffn"]);
  return out;
}

void block_from_json(const json& given, BlockConfig& c, const std::string& source) {
  const json j = is_flat_block(given) ? unflatten_block(given) : given;
  FieldReader r(j, source, "block");
  BlockConfig::visit(c, r);
  r.object(
      "rope_scaling",
      [&](const json& v) {
        FieldReader rr(v, source, "block.rope_scaling");
        BlockConfig::visit_rope_scaling(c.rope_scaling, rr);
        rr.run();
      },
      /*required=*/false);  // written only when scaling is on
  r.object("norm", [&](const json& v) { spec_from_json(v, c.norm, source, "block.norm"); });
  r.object("attention", [&](const json& v) { spec_from_json(v, c.attention, source, "block.attention"); });
  r.object("ffn", [&](const json& v) { spec_from_json(v, c.ffn, source, "block.ffn"); });
  r.run();
}

// The bytes of everything but the blocks: embeddings, the LM head, the final norm and the
// position tables (RoPE's too: [max_seq_len, head_dim] at most d_model wide).
double outer_bytes(const LMConfig& c) {
  const double elem = static_cast<double>(itemsize(c.dtype)), d = static_cast<double>(c.block.d_model);
  const double embeddings = static_cast<double>(c.vocab_size) * d * (c.tie_embeddings ? 1 : 2);
  const double positions =
      c.block.position == PositionKind::None ? 0 : static_cast<double>(c.block.max_seq_len) * d;
  return (embeddings + positions + d) * elem;
}

// What the parameters and buffers of module `m` occupy.
double module_bytes(const Module& m) {
  double total = 0;
  for (const auto& [name, t] : m.named_parameters()) total += static_cast<double>(storage_bytes(t.dtype(), t.numel()));
  for (const auto& [name, t] : m.named_buffers()) total += static_cast<double>(storage_bytes(t.dtype(), t.numel()));
  return total;
}

// The size a parameter will have, over its size as built (StoredWeightsGuard).
thread_local double g_stored_fraction = 1.0;

// n_layers blocks of `per_block` bytes each beside the rest must fit.
void check_layers_memory(const LMConfig& c, double per_block, const std::string& who) {
  check_memory((outer_bytes(c) + static_cast<double>(c.n_layers) * per_block) * g_stored_fraction,
               str_cat(who, ": field 'n_layers' ", c.n_layers, " (", byte_size(per_block), " per block, d_model ",
                       c.block.d_model, ")"));
}


}  // namespace

// ---------------------------------------------------------------------------------------------
// LMConfig

void LMConfig::validate(const std::string& who) const {
  check(vocab_size > 0, who, ": field 'vocab_size' must be positive, got ", vocab_size);
  check(n_layers > 0, who, ": field 'n_layers' must be positive, got ", n_layers);
  check(is_floating(dtype), who, ": field 'dtype' must be float32 or float64, got ", dtype_name(dtype));
  check(std::isfinite(embed_scale) && embed_scale > 0, who, ": field 'embed_scale' must be a positive number, got ",
        embed_scale);
  check(std::isfinite(local_rope_base) && local_rope_base >= 0, who,
        ": field 'local_rope_base' must be >= 0 (0 = the block's rope_base), got ", local_rope_base);
  check(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0, who,
        ": field 'final_logit_softcap' must be >= 0 (0 = off), got ", final_logit_softcap);
  check(layer_windows.empty() || static_cast<int64_t>(layer_windows.size()) == n_layers, who,
        ": field 'layer_windows' must list one window per layer (", n_layers, "), got ", layer_windows.size());
  for (std::size_t i = 0; i < layer_windows.size(); ++i) {
    check(layer_windows[i] >= 0, who, ": field 'layer_windows' [", i, "] must be >= 0 (0 = full attention), got ",
          layer_windows[i]);
    BlockConfig bi = block;
    bi.n_layers = n_layers;
    bi.sliding_window = layer_windows[i];
    if (layer_windows[i] > 0) bi.validate(str_cat(who, ": layer ", i));
  }
  BlockConfig b = block;
  b.n_layers = n_layers;
  b.validate(who + ": block");
}

std::string LMConfig::to_json() const {
  json j;
  j["vocab_size"] = vocab_size;
  j["n_layers"] = n_layers;
  j["tie_embeddings"] = tie_embeddings;
  j["final_norm"] = final_norm;
  j["dtype"] = dtype_name(dtype);
  if (embed_scale != 1.0) j["embed_scale"] = embed_scale;
  if (final_logit_softcap != 0) j["final_logit_softcap"] = final_logit_softcap;
  if (local_rope_base != 0) j["local_rope_base"] = local_rope_base;
  if (!layer_windows.empty()) j["layer_windows"] = layer_windows;
  j["block"] = block_to_json(block);
  return j.dump(2) + "\n";
}

LMConfig LMConfig::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw Error(str_cat(source, ": not valid JSON (", e.what(), ")"));
  }
  // A config of the flat format (earlier xgrad versions) keeps that format's defaults for what
  // it leaves out, the fields added after it included.
  if (j.is_object() && j.contains("block") && is_flat_block(j["block"])) {
    const json defaults = json::parse(LMConfig{}.to_json());
    for (const auto& [k, v] : defaults.items())
      if (k != "block" && !j.contains(k)) j[k] = v;
  }
  LMConfig c;
  FieldReader r(j, source, "");
  r("vocab_size", c.vocab_size);
  r("n_layers", c.n_layers);
  r("tie_embeddings", c.tie_embeddings);
  r("final_norm", c.final_norm);
  r("dtype", c.dtype);
  r.object(
      "embed_scale",
      [&](const json& v) {
        check(v.is_number(), source, ": field 'embed_scale' must be a number, got ", v.dump());
        c.embed_scale = v.get<double>();
      },
      /*required=*/false);  // written only when not 1
  r.object(
      "final_logit_softcap",
      [&](const json& v) {
        check(v.is_number(), source, ": field 'final_logit_softcap' must be a number, got ", v.dump());
        c.final_logit_softcap = v.get<double>();
      },
      /*required=*/false);  // written only when set
  r.object(
      "local_rope_base",
      [&](const json& v) {
        check(v.is_number(), source, ": field 'local_rope_base' must be a number, got ", v.dump());
        c.local_rope_base = v.get<double>();
      },
      /*required=*/false);  // written only when set
  r.object(
      "layer_windows",
      [&](const json& v) {
        check(v.is_array(), source, ": field 'layer_windows' must be a list of integers, got ", v.dump());
        for (const json& w : v) {
          check(w.is_number_integer(), source, ": field 'layer_windows' must be a list of integers, got ", v.dump());
          c.layer_windows.push_back(w.get<int64_t>());
        }
      },
      /*required=*/false);  // written only when not empty
  r.object("block", [&](const json& b) { block_from_json(b, c.block, source); });
  r.run();
  c.block.n_layers = c.n_layers;
  c.validate(source);
  return c;
}

// ---------------------------------------------------------------------------------------------
// DecoderLM

StoredWeightsGuard::StoredWeightsGuard(Dtype stored, Dtype built) : prev_(g_stored_fraction) {
  const double bytes =
      is_blocked(stored) ? static_cast<double>(block_bytes(stored)) / static_cast<double>(block_values(stored)) : static_cast<double>(itemsize(stored));
  g_stored_fraction = bytes / static_cast<double>(itemsize(built));
}
StoredWeightsGuard::~StoredWeightsGuard() { g_stored_fraction = prev_; }

DecoderLM::DecoderLM(const LMConfig& config) : config_(config) {
  config_.block.n_layers = config_.n_layers;  // DeepNorm's N
  config_.validate("DecoderLM");
  const BlockConfig& b = config_.block;
  check_memory(outer_bytes(config_) * g_stored_fraction, str_cat("DecoderLM: the embeddings (field 'vocab_size' ", config_.vocab_size,
                                             ", d_model ", b.d_model, ") and position tables (field 'max_seq_len' ",
                                             b.max_seq_len, ")"));
  tok_embeddings_ = register_module("tok_embeddings", std::make_shared<Embedding>(config_.vocab_size, b.d_model));
  if (b.position == PositionKind::Sinusoidal) {
    sinusoidal_ = std::make_shared<SinusoidalPositionalEncoding>(b.d_model, b.max_seq_len);
    pos_ = register_module("pos", sinusoidal_);
  } else if (b.position == PositionKind::Learned) {
    learned_ = std::make_shared<LearnedPositionalEmbedding>(b.max_seq_len, b.d_model);
    pos_ = register_module("pos", learned_);
  }
  layers_ = register_module("layers", std::make_shared<ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < config_.n_layers; ++i) {
    BlockConfig bi = b;
    if (!config_.layer_windows.empty()) bi.sliding_window = config_.layer_windows[static_cast<std::size_t>(i)];
    if (bi.sliding_window > 0 && config_.local_rope_base > 0) {  // Gemma 3's local layers
      bi.rope_base = config_.local_rope_base;
      bi.rope_scaling = RopeScaling{};
    }
    layers_->push_back(std::make_shared<TransformerBlock>(bi));
    // The first block tells what all of them will take, before the others are allocated.
    if (i == 0) check_layers_memory(config_, module_bytes(*(*layers_)[0]), "DecoderLM");
  }
  if (config_.final_norm) norm_ = register_module("norm", make_sublayer(b.norm, b.context()));
  if (!config_.tie_embeddings)
    output_ = register_module("output", std::make_shared<Linear>(b.d_model, config_.vocab_size, false));
  if (config_.dtype != kFloat32) to(config_.dtype);
}

std::string DecoderLM::who() const {
  return str_cat("DecoderLM(vocab_size=", config_.vocab_size, ", n_layers=", config_.n_layers,
                 ", d_model=", config_.block.d_model, ")");
}

int64_t DecoderLM::max_seq_len() const {
  return config_.block.position == PositionKind::None ? -1 : config_.block.max_seq_len;
}

Tensor DecoderLM::forward(const Tensor& tokens, int64_t start_pos, std::vector<KVCache>* caches) const {
  return forward_with_aux(tokens, start_pos, caches).logits;
}

LMOutput DecoderLM::forward_with_aux(const Tensor& tokens, int64_t start_pos, std::vector<KVCache>* caches) const {
  return run(tokens, start_pos, caches, Tensor());
}

Tensor DecoderLM::forward_packed(const Tensor& tokens, const Tensor& position_ids) const {
  return run(tokens, 0, nullptr, position_ids).logits;
}

Tensor DecoderLM::hidden(const Tensor& tokens, const Tensor& position_ids) const {
  return run(tokens, 0, nullptr, position_ids, false).logits;
}

Tensor DecoderLM::plain_head_weight() const {
  if (config_.final_logit_softcap > 0) return Tensor();
  if (!output_) return tok_embeddings_->weight();
  return output_->plain() && !output_->bias().defined() ? output_->weight() : Tensor();
}

namespace {

// position_ids [B, T] of packed rows -> keep [B, 1, T, T] bool: query i may see key j when
// both are in the same sequence (the causal part is AttnMask's). A sequence starts at each 0;
// every other position must be the one before it + 1.
Tensor same_sequence_mask(const Tensor& position_ids, const Shape& tokens_shape, const std::string& who) {
  check(position_ids.defined() && position_ids.dtype() == kInt64 && position_ids.shape() == tokens_shape, who,
        ": expected position_ids int64 ", shape_str(tokens_shape), " (the tokens' shape), got ",
        position_ids.defined() ? str_cat(dtype_name(position_ids.dtype()), " ", shape_str(position_ids.shape()))
                               : std::string("an undefined tensor"));
  const int64_t B = tokens_shape[0], T = tokens_shape[1];
  const int64_t* p = position_ids.data<int64_t>();
  std::vector<int64_t> seq(static_cast<std::size_t>(T));
  Tensor keep = zeros({B, 1, T, T}, kBool);
  bool* k = keep.data<bool>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row = p + b * T;
    check(row[0] == 0, who, ": position_ids[", b, ", 0] is ", row[0], ", but a row starts a sequence at 0");
    for (int64_t t = 1; t < T; ++t)
      check(row[t] == 0 || row[t] == row[t - 1] + 1, who, ": position_ids[", b, ", ", t, "] is ", row[t],
            " after ", row[t - 1], " (a sequence counts up by one; 0 starts the next)");
    for (int64_t t = 0, s = -1; t < T; ++t) seq[t] = s += row[t] == 0;
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) k[(b * T + i) * T + j] = seq[i] == seq[j];
  }
  return keep;
}

}  // namespace

// tokens [B, T] -> h = tok_embeddings(tokens) (+ pos) -> blocks (causal) -> norm -> logits [B, T, V],
// logits = output(h), or h @ tok_embeddings.weight^T when tied.
LMOutput DecoderLM::run(const Tensor& tokens, int64_t start_pos, std::vector<KVCache>* caches,
                        const Tensor& position_ids, bool head) const {
  const int64_t V = config_.vocab_size;
  if (!tokens.defined() || tokens.dtype() != kInt64 || tokens.dim() != 2)
    throw Error(str_cat(who(), ": expected tokens int64 [B, T], got ",
                        tokens.defined() ? str_cat(dtype_name(tokens.dtype()), " ", shape_str(tokens.shape()))
                                         : std::string("an undefined tensor")));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  auto fail = [&](const auto&... msg) { throw Error(str_cat(who(), msg...)); };
  if (B == 0 || T == 0) fail(": expected at least one token, got tokens ", shape_str(tokens.shape()));
  const int64_t* ids = tokens.data<int64_t>();
  for (int64_t i = 0; i < B * T; ++i)
    if (ids[i] < 0 || ids[i] >= V)
      fail(": token id ", ids[i], " at [", i / T, ",", i % T, "] is out of range [0, ", V, ") (tokens ",
           shape_str(tokens.shape()), ")");
  if (caches) {
    if (caches->empty()) caches->resize(static_cast<std::size_t>(config_.n_layers));
    if (static_cast<int64_t>(caches->size()) != config_.n_layers)
      fail(": expected ", config_.n_layers, " KV caches (one per layer), got ", caches->size());
  }
  if (start_pos < -1 || (start_pos == -1 && !caches))
    fail(": start_pos must be >= 0 (or -1 with caches), got ", start_pos);
  const int64_t pos0 = start_pos == -1 ? (*caches)[0].length : start_pos;
  const int64_t L = max_seq_len();
  if (L >= 0 && pos0 + T > L)
    fail(": positions ", pos0, "..", pos0 + T - 1, " of tokens ", shape_str(tokens.shape()), " (start_pos ", pos0,
         ") exceed max_seq_len ", L);

  const bool packed = position_ids.defined();
  const AttnMask mask = packed ? AttnMask(same_sequence_mask(position_ids, tokens.shape(), who() + "::forward_packed"), true)
                               : AttnMask::causal_mask();
  Tensor h = tok_embeddings_->forward(tokens);  // [B, T, C]
  if (widen_embeddings_ && h.dtype() != kFloat32) h = h.to(kFloat32);
  if (config_.embed_scale != 1.0)  // in h's dtype, as Gemma's normalizer tensor
    h = h * (h.dtype() == kFloat32 ? static_cast<double>(static_cast<float>(config_.embed_scale)) : config_.embed_scale);
  if (sinusoidal_) h = packed ? sinusoidal_->forward_at(h, position_ids) : sinusoidal_->forward(h, pos0);
  if (learned_) h = packed ? learned_->forward_at(h, position_ids) : learned_->forward(h, pos0);
  if (config_.block.dropout > 0 && is_training()) h = dropout(h, config_.block.dropout, true);
  const bool recompute = gradient_checkpointing_ && !caches && is_training() && is_grad_enabled();
  Tensor aux;
  for (std::size_t i = 0; i < layers_->size(); ++i) {
    const std::shared_ptr<TransformerBlock>& block = (*layers_)[i];
    BlockOutput r;
    if (recompute) {
      auto run = [block, mask, pos0](const std::vector<Tensor>& in) {
        BlockOutput b = block->forward(in[0], mask, nullptr, pos0);
        return std::vector<Tensor>{b.out, b.aux_loss};
      };
      std::vector<Tensor> out = checkpoint(run, {h}, block->parameters());
      r = {out[0], out[1]};
    } else {
      r = block->forward(h, mask, caches ? &(*caches)[i] : nullptr, pos0);
    }
    h = r.out;
    if (r.aux_loss.defined()) aux = aux.defined() ? aux + r.aux_loss : r.aux_loss;
  }
  if (norm_) h = norm_->forward(h);
  if (!head) return {h, aux};
  return {logits_from_hidden(h), aux};
}

// h: [B, T, C] -> [B, T, V]: the output Linear (with its adapter) or the tied embedding, then soft-capping.
Tensor DecoderLM::logits_from_hidden(const Tensor& h) const {
  Tensor logits = output_ ? output_->forward(h) : linear(h, tok_embeddings_->weight());
  if (config_.final_logit_softcap > 0) logits = softcap(logits, config_.final_logit_softcap);
  return logits;
}

Tensor DecoderLM::generate(const Tensor& prompt, int64_t max_new_tokens, const GenerateOptions& options,
                           GenerateTimings* timings) {
  const int64_t V = config_.vocab_size;
  check(prompt.defined() && prompt.dtype() == kInt64 && prompt.dim() == 2 && prompt.size(0) > 0 && prompt.size(1) > 0,
        who(), "::generate: expected a prompt int64 [B, T0] with B, T0 >= 1, got ",
        prompt.defined() ? str_cat(dtype_name(prompt.dtype()), " ", shape_str(prompt.shape()))
                         : std::string("an undefined tensor"));
  check(max_new_tokens >= 0, who(), "::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  check(options.eos_id >= -1 && options.eos_id < V, who(), "::generate: eos_id must be -1 (none) or in [0, ", V,
        "), got ", options.eos_id);
  const int64_t B = prompt.size(0), T0 = prompt.size(1), L = max_seq_len();
  const bool slide = options.sliding_window && L >= 0;
  check(L < 0 || slide || T0 + max_new_tokens <= L, who(), "::generate: the prompt's ", T0, " tokens (prompt ",
        shape_str(prompt.shape()), ") + max_new_tokens ", max_new_tokens, " exceed max_seq_len ", L,
        " (GenerateOptions::sliding_window keeps the last max_seq_len tokens instead)");
  const SamplingOptions sampling{options.temperature, options.top_k, options.top_p, options.min_p,
                                 options.repetition_penalty};
  sampling_probs(zeros({1}), sampling);  // validates the sampling options before any work

  NoGradGuard no_grad;
  EvalModeGuard eval_mode(*this);
  Generator gen(options.seed);
  const int64_t W = T0 + max_new_tokens;  // row width of the output
  std::vector<int64_t> seq(static_cast<std::size_t>(B * W), 0);
  const int64_t* p = prompt.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T0; ++t) seq[b * W + t] = p[b * T0 + t];

  // The context the model sees is seq[start, T0 + n): all of it, or with sliding_window the
  // last L tokens; `window` runs it through fresh caches from position 0.
  int64_t start = slide && T0 > L ? T0 - L : 0;
  std::vector<KVCache> caches;
  auto window = [&](int64_t end) {
    std::vector<int64_t> w(static_cast<std::size_t>(B * (end - start)));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = start; t < end; ++t) w[b * (end - start) + (t - start)] = seq[b * W + t];
    caches.clear();
    return forward(from_vector(w, {B, end - start}), 0, &caches);
  };
  using clock = std::chrono::steady_clock;
  GenerateTimings times;
  times.prompt_tokens = B * T0;
  auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  clock::time_point t0 = clock::now();
  Tensor logits = start > 0 ? window(T0) : forward(prompt, 0, &caches);  // prefill: [B, T0 (or L), V]
  times.prefill_seconds = since(t0);
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  int64_t n = 0;  // tokens generated per row
  while (n < max_new_tokens) {
    t0 = clock::now();
    const int64_t Tl = logits.size(1);
    const Tensor last = reshape(narrow(logits, 1, Tl - 1, 1), {B, V});
    std::vector<int64_t> next(static_cast<std::size_t>(B));
    bool all_done = true;
    const int64_t pad = std::max<int64_t>(options.eos_id, 0);
    for (int64_t b = 0; b < B; ++b) {
      int64_t tok = pad;
      if (!done[b]) {
        // The penalty's context: the row's prompt and what it has drawn so far.
        std::vector<int64_t> context;
        if (sampling.repetition_penalty != 1) context.assign(seq.begin() + b * W, seq.begin() + b * W + T0 + n);
        tok = sample_token(reshape(narrow(last, 0, b, 1), {V}), sampling, gen, context);
        if (tok == options.eos_id || (options.on_token && options.on_token(b, tok))) done[b] = true;
      }
      all_done = all_done && done[b];
      next[b] = tok;
      seq[b * W + T0 + n] = tok;
    }
    ++n;
    times.sample_seconds += since(t0);
    if (all_done || n == max_new_tokens) break;
    t0 = clock::now();
    if (slide && T0 + n - start > L) {  // the new token has no position left: slide the window
      start = T0 + n - L;
      logits = window(T0 + n);
    } else {
      logits = forward(from_vector(next, {B, 1}), T0 + n - 1 - start, &caches);  // one token against the cache
    }
    times.decode_seconds += since(t0);
    ++times.decode_steps;
  }
  times.decode_tokens = B * times.decode_steps;
  if (timings != nullptr) *timings = times;
  // Rows of W tokens -> rows of T0 + n.
  std::vector<int64_t> out(static_cast<std::size_t>(B * (T0 + n)));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T0 + n; ++t) out[b * (T0 + n) + t] = seq[b * W + t];
  return from_vector(out, {B, T0 + n});
}

int64_t DecoderLM::kv_cache_bytes_per_token(int64_t bytes_per_element) const {
  int64_t total = 0;
  for (const auto& layer : *layers_) total += layer->kv_cache_bytes_per_token(bytes_per_element);
  return total;
}

std::string DecoderLM::extra_repr() const {
  return str_cat("vocab_size=", config_.vocab_size, ", n_layers=", config_.n_layers, ", d_model=",
                 config_.block.d_model, ", tie_embeddings=", config_.tie_embeddings ? "true" : "false");
}

double model_bytes(const LMConfig& config) {
  LMConfig c = config;
  c.block.n_layers = c.n_layers;
  const double elem = static_cast<double>(itemsize(c.dtype)), d = static_cast<double>(c.block.d_model);
  double per_block = 2 * d * d * elem;  // q and o projections: a block holds at least these
  if (per_block <= physical_memory_bytes() / 4) {
    BlockConfig small = c.block;
    small.max_seq_len = 1;
    NoGradGuard no_grad;
    per_block = module_bytes(TransformerBlock(small));
  }
  return outer_bytes(c) + static_cast<double>(c.n_layers) * per_block;
}

double activation_bytes(const LMConfig& config, int64_t rows, int64_t T) {
  const double tokens = static_cast<double>(rows) * static_cast<double>(T);
  const double d = static_cast<double>(config.block.d_model);
  // NOTE: the FFN's hidden width is taken as 4 d_model (the MLP default; SwiGLU's 8/3 d_model
  // has three such tensors): an estimate for refusals, not an accounting.
  const double n_heads = static_cast<double>(config.block.n_heads());
  const double per_layer = 16 * d + 3 * 4 * d + 2 * n_heads * static_cast<double>(T);
  return 4 * tokens * (static_cast<double>(config.n_layers) * per_layer + 3 * static_cast<double>(config.vocab_size));
}

// ---------------------------------------------------------------------------------------------
// save_pretrained / load_pretrained

void save_pretrained(const DecoderLM& model, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "save_pretrained: cannot create directory ", dir, " (", ec.message(), ")");
  LMConfig config = model.config();
  config.dtype = model.tok_embeddings()->weight().dtype();  // after any Module::to
  io::write_file_atomic((fs::path(dir) / "config.json").string(), config.to_json(), "save_pretrained");
  save(model, (fs::path(dir) / "model.safetensors").string());
}

std::shared_ptr<DecoderLM> load_pretrained(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  const LMConfig config = LMConfig::from_json(io::read_file(path, "load_pretrained"), path);
  std::shared_ptr<DecoderLM> model;
  try {
    init::SkipInitGuard skip;  // strict load below: every parameter is read from the file
    model = std::make_shared<DecoderLM>(config);
  } catch (const Error& e) {  // a model too large for this machine: say which file asked for it
    throw Error(str_cat(path, ": ", e.what()));
  }
  load(*model, (fs::path(dir) / "model.safetensors").string(), true);
  return model;
}

}  // namespace xg::nn

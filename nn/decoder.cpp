// DecoderLM, its KV-cache generation, and its config as JSON (save_pretrained / load_pretrained).
#include "nn/decoder.hpp"

#include "autograd/atomic_file.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
#include "autograd/shape.hpp"

namespace xg::nn {

namespace {

using json = nlohmann::ordered_json;

const char* ffn_naming_name(FFNNaming n) {
  switch (n) {
    case FFNNaming::Seed: return "seed";
    case FFNNaming::FC: return "fc";
    case FFNNaming::Sequential: return "sequential";
  }
  return "?";
}

const char* swiglu_naming_name(SwiGLUNaming n) {
  switch (n) {
    case SwiGLUNaming::Seed: return "seed";
    case SwiGLUNaming::Lowercase: return "lowercase";
    case SwiGLUNaming::LLaMA: return "llama";
  }
  return "?";
}

const char* expert_kind_name(ExpertKind k) { return k == ExpertKind::FFN ? "ffn" : "swiglu"; }
const char* float_dtype_name(Dtype d) { return dtype_name(d); }

// Reads the fields of one JSON object into a config, each by name with its type checked.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {
    check(obj.is_object(), source_, ": ", prefix_.empty() ? std::string("the config") : "field '" + path("") + "'",
          " must be a JSON object, got ", obj.dump());
  }

  void integer(const char* key, int64_t& dst) {
    add(key, [this, key, &dst](const json& v) {
      check(v.is_number_integer(), source_, ": field '", path(key), "' must be an integer, got ", v.dump());
      dst = v.get<int64_t>();
    });
  }
  void number(const char* key, double& dst) {
    add(key, [this, key, &dst](const json& v) {
      check(v.is_number(), source_, ": field '", path(key), "' must be a number, got ", v.dump());
      dst = v.get<double>();
    });
  }
  void boolean(const char* key, bool& dst) {
    add(key, [this, key, &dst](const json& v) {
      check(v.is_boolean(), source_, ": field '", path(key), "' must be true or false, got ", v.dump());
      dst = v.get<bool>();
    });
  }
  // An enum written as its name: one of `values`.
  template <class E>
  void name(const char* key, E& dst, std::initializer_list<E> values, const char* (*to_name)(E)) {
    std::vector<E> all(values);
    add(key, [this, key, &dst, all, to_name](const json& v) {
      std::string allowed;
      for (E e : all) allowed += std::string(allowed.empty() ? "" : ", ") + "\"" + to_name(e) + "\"";
      check(v.is_string(), source_, ": field '", path(key), "' must be one of ", allowed, ", got ", v.dump());
      const std::string s = v.get<std::string>();
      for (E e : all)
        if (s == to_name(e)) {
          dst = e;
          return;
        }
      throw Error(str_cat(source_, ": field '", path(key), "' must be one of ", allowed, ", got ", v.dump()));
    });
  }
  void object(const char* key, const std::function<void(const json&)>& read) { add(key, read); }

  // Applies every field present; an unknown one is an error.
  void run() const {
    for (const auto& [key, value] : obj_.items()) {
      auto it = fields_.find(key);
      if (it == fields_.end()) {
        std::string known;
        for (const auto& [k, f] : fields_) known += (known.empty() ? "" : ", ") + k;
        throw Error(str_cat(source_, ": unknown field '", path(key), "' (known fields: ", known, ")"));
      }
      it->second(value);
    }
  }

  std::string path(const std::string& key) const { return prefix_.empty() ? key : key.empty() ? prefix_ : prefix_ + "." + key; }

 private:
  void add(const char* key, std::function<void(const json&)> f) { fields_[key] = std::move(f); }
  const json& obj_;
  std::string source_, prefix_;
  std::map<std::string, std::function<void(const json&)>> fields_;
};

json block_to_json(const BlockConfig& c) {
  json j;
  j["d_model"] = c.d_model;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["d_ff"] = c.d_ff;
  j["norm_position"] = norm_position_name(c.norm_position);
  j["norm"] = norm_kind_name(c.norm);
  j["norm_eps"] = c.norm_eps;
  j["ffn"] = ffn_kind_name(c.ffn);
  j["ffn_naming"] = ffn_naming_name(c.ffn_naming);
  j["swiglu_naming"] = swiglu_naming_name(c.swiglu_naming);
  j["num_experts"] = c.num_experts;
  j["top_k"] = c.top_k;
  j["moe_aux_loss_coef"] = c.moe_aux_loss_coef;
  j["moe_expert"] = expert_kind_name(c.moe_expert);
  j["attention"] = attention_kind_name(c.attention);
  j["qk_norm"] = c.qk_norm;
  j["mla_head_dim"] = c.mla_head_dim;
  j["mla_latent_dim"] = c.mla_latent_dim;
  j["mla_rope_dim"] = c.mla_rope_dim;
  j["mla_q_latent_dim"] = c.mla_q_latent_dim;
  j["mla_decoupled_rope_key"] = c.mla_decoupled_rope_key;
  j["position"] = position_kind_name(c.position);
  j["rope_layout"] = rope_layout_name(c.rope_layout);
  j["rope_base"] = c.rope_base;
  j["max_seq_len"] = c.max_seq_len;
  j["dropout"] = c.dropout;
  j["bias"] = c.bias;
  j["naming"] = block_naming_name(c.naming);
  return j;
}

void block_from_json(const json& j, BlockConfig& c, const std::string& source) {
  FieldReader r(j, source, "block");
  r.integer("d_model", c.d_model);
  r.integer("n_heads", c.n_heads);
  r.integer("n_kv_heads", c.n_kv_heads);
  r.integer("d_ff", c.d_ff);
  r.name("norm_position", c.norm_position, {NormPosition::Post, NormPosition::Pre, NormPosition::DeepNorm},
         norm_position_name);
  r.name("norm", c.norm, {NormKind::LayerNorm, NormKind::RMSNorm}, norm_kind_name);
  r.number("norm_eps", c.norm_eps);
  r.name("ffn", c.ffn, {FFNKind::ReLU, FFNKind::GELU, FFNKind::SwiGLU, FFNKind::MoE}, ffn_kind_name);
  r.name("ffn_naming", c.ffn_naming, {FFNNaming::Seed, FFNNaming::FC, FFNNaming::Sequential}, ffn_naming_name);
  r.name("swiglu_naming", c.swiglu_naming, {SwiGLUNaming::Seed, SwiGLUNaming::Lowercase, SwiGLUNaming::LLaMA},
         swiglu_naming_name);
  r.integer("num_experts", c.num_experts);
  r.integer("top_k", c.top_k);
  r.number("moe_aux_loss_coef", c.moe_aux_loss_coef);
  r.name("moe_expert", c.moe_expert, {ExpertKind::FFN, ExpertKind::SwiGLU}, expert_kind_name);
  r.name("attention", c.attention, {AttentionKind::MHA, AttentionKind::GQA, AttentionKind::MLA}, attention_kind_name);
  r.boolean("qk_norm", c.qk_norm);
  r.integer("mla_head_dim", c.mla_head_dim);
  r.integer("mla_latent_dim", c.mla_latent_dim);
  r.integer("mla_rope_dim", c.mla_rope_dim);
  r.integer("mla_q_latent_dim", c.mla_q_latent_dim);
  r.boolean("mla_decoupled_rope_key", c.mla_decoupled_rope_key);
  r.name("position", c.position,
         {PositionKind::Sinusoidal, PositionKind::Learned, PositionKind::RoPE, PositionKind::None},
         position_kind_name);
  r.name("rope_layout", c.rope_layout, {RopeLayout::Interleaved, RopeLayout::RotateHalf}, rope_layout_name);
  r.number("rope_base", c.rope_base);
  r.integer("max_seq_len", c.max_seq_len);
  r.number("dropout", c.dropout);
  r.boolean("bias", c.bias);
  r.name("naming", c.naming, {BlockNaming::Teaching, BlockNaming::LLaMA}, block_naming_name);
  r.run();
}

// Puts this module and every module below it in eval mode, and restores each one's own mode
// when it goes out of scope (parents first, so that a child's mode wins over its parent's).
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& root) {
    modes_.emplace_back(&root, root.is_training());
    for (auto& [name, m] : root.named_modules()) modes_.emplace_back(m.get(), m->is_training());
    root.eval();
  }
  ~EvalModeGuard() {
    for (auto& [m, training] : modes_) m->train(training);
  }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  std::vector<std::pair<Module*, bool>> modes_;
};

std::string read_text_file(const std::string& path, const char* who) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), who, ": cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// LMConfig

void LMConfig::validate(const std::string& who) const {
  check(vocab_size > 0, who, ": field 'vocab_size' must be positive, got ", vocab_size);
  check(n_layers > 0, who, ": field 'n_layers' must be positive, got ", n_layers);
  check(is_floating(dtype), who, ": field 'dtype' must be float32 or float64, got ", dtype_name(dtype));
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
  LMConfig c;
  FieldReader r(j, source, "");
  r.integer("vocab_size", c.vocab_size);
  r.integer("n_layers", c.n_layers);
  r.boolean("tie_embeddings", c.tie_embeddings);
  r.boolean("final_norm", c.final_norm);
  r.name("dtype", c.dtype, {kFloat32, kFloat64}, float_dtype_name);
  r.object("block", [&](const json& b) { block_from_json(b, c.block, source); });
  r.run();
  c.block.n_layers = c.n_layers;
  c.validate(source);
  return c;
}

// ---------------------------------------------------------------------------------------------
// DecoderLM

DecoderLM::DecoderLM(const LMConfig& config) : config_(config) {
  config_.block.n_layers = config_.n_layers;  // DeepNorm's N
  config_.validate("DecoderLM");
  const BlockConfig& b = config_.block;
  tok_embeddings_ = register_module("tok_embeddings", std::make_shared<Embedding>(config_.vocab_size, b.d_model));
  if (b.position == PositionKind::Sinusoidal) {
    sinusoidal_ = std::make_shared<SinusoidalPositionalEncoding>(b.d_model, b.max_seq_len);
    pos_ = register_module("pos", sinusoidal_);
  } else if (b.position == PositionKind::Learned) {
    learned_ = std::make_shared<LearnedPositionalEmbedding>(b.max_seq_len, b.d_model);
    pos_ = register_module("pos", learned_);
  }
  layers_ = register_module("layers", std::make_shared<ModuleList<TransformerBlock>>());
  for (int64_t i = 0; i < config_.n_layers; ++i) layers_->push_back(std::make_shared<TransformerBlock>(b));
  if (config_.final_norm) norm_ = register_module("norm", make_norm(b.norm, b.d_model, b.norm_eps));
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

// tokens [B, T] -> h = tok_embeddings(tokens) (+ pos) -> blocks (causal) -> norm -> logits [B, T, V],
// logits = output(h), or h @ tok_embeddings.weight^T when tied.
LMOutput DecoderLM::forward_with_aux(const Tensor& tokens, int64_t start_pos, std::vector<KVCache>* caches) const {
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

  Tensor h = tok_embeddings_->forward(tokens);  // [B, T, C]
  if (sinusoidal_) h = sinusoidal_->forward(h, pos0);
  if (learned_) h = learned_->forward(h, pos0);
  if (config_.block.dropout > 0 && is_training()) h = dropout(h, config_.block.dropout, true);
  const AttnMask mask = AttnMask::causal_mask();
  Tensor aux;
  for (std::size_t i = 0; i < layers_->size(); ++i) {
    BlockOutput r = (*layers_)[i]->forward(h, mask, caches ? &(*caches)[i] : nullptr, pos0);
    h = r.out;
    if (r.aux_loss.defined()) aux = aux.defined() ? aux + r.aux_loss : r.aux_loss;
  }
  if (norm_) h = apply_norm(*norm_, h);
  Tensor logits = output_ ? output_->forward(h) : linear(h, tok_embeddings_->weight());
  return {logits, aux};
}

Tensor DecoderLM::generate(const Tensor& prompt, int64_t max_new_tokens, const GenerateOptions& options) {
  const int64_t V = config_.vocab_size;
  check(prompt.defined() && prompt.dtype() == kInt64 && prompt.dim() == 2 && prompt.size(0) > 0 && prompt.size(1) > 0,
        who(), "::generate: expected a prompt int64 [B, T0] with B, T0 >= 1, got ",
        prompt.defined() ? str_cat(dtype_name(prompt.dtype()), " ", shape_str(prompt.shape()))
                         : std::string("an undefined tensor"));
  check(max_new_tokens >= 0, who(), "::generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  check(options.eos_id >= -1 && options.eos_id < V, who(), "::generate: eos_id must be -1 (none) or in [0, ", V,
        "), got ", options.eos_id);
  const int64_t B = prompt.size(0), T0 = prompt.size(1), L = max_seq_len();
  check(L < 0 || T0 + max_new_tokens <= L, who(), "::generate: the prompt's ", T0, " tokens (prompt ",
        shape_str(prompt.shape()), ") + max_new_tokens ", max_new_tokens, " exceed max_seq_len ", L);
  const SamplingOptions sampling{options.temperature, options.top_k, options.top_p};
  sampling_probs(zeros({1}), sampling);  // validates the sampling options before any work

  NoGradGuard no_grad;
  EvalModeGuard eval_mode(*this);
  Generator gen(options.seed);
  const int64_t W = T0 + max_new_tokens;  // row width of the output
  std::vector<int64_t> seq(static_cast<std::size_t>(B * W), 0);
  const int64_t* p = prompt.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T0; ++t) seq[b * W + t] = p[b * T0 + t];

  std::vector<KVCache> caches;
  Tensor logits = forward(prompt, 0, &caches);  // prefill: [B, T0, V]
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  int64_t n = 0;  // tokens generated per row
  while (n < max_new_tokens) {
    const int64_t Tl = logits.size(1);
    const Tensor last = reshape(narrow(logits, 1, Tl - 1, 1), {B, V});
    std::vector<int64_t> next(static_cast<std::size_t>(B));
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      int64_t tok = options.eos_id;
      if (!done[b]) tok = sample_token(reshape(narrow(last, 0, b, 1), {V}), sampling, gen);
      if (tok == options.eos_id) done[b] = true;
      all_done = all_done && done[b];
      next[b] = tok;
      seq[b * W + T0 + n] = tok;
    }
    ++n;
    if (all_done || n == max_new_tokens) break;
    logits = forward(from_vector(next, {B, 1}), T0 + n - 1, &caches);  // one token against the cache
  }
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

// ---------------------------------------------------------------------------------------------
// save_pretrained / load_pretrained

void save_pretrained(const DecoderLM& model, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "save_pretrained: cannot create directory ", dir, " (", ec.message(), ")");
  LMConfig config = model.config();
  config.dtype = model.tok_embeddings()->weight().dtype();  // after any Module::to
  write_file_atomic((fs::path(dir) / "config.json").string(), config.to_json(), "save_pretrained");
  save(model, (fs::path(dir) / "model.safetensors").string());
}

std::shared_ptr<DecoderLM> load_pretrained(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  const LMConfig config = LMConfig::from_json(read_text_file(path, "load_pretrained"), path);
  auto model = std::make_shared<DecoderLM>(config);
  load(*model, (fs::path(dir) / "model.safetensors").string(), true);
  return model;
}

}  // namespace xg::nn

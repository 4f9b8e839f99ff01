// DecoderLM: a decoder-only language model (token embedding, optional position table,
// TransformerBlocks, final norm, LM head tied or not) with KV-cache generation, and its
// config as JSON beside the weights (save_pretrained / load_pretrained).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/block.hpp"
#include "nn/position.hpp"
#include "nn/sampling.hpp"

namespace xg::nn {

// The parameter dtypes a config may name.
template <>
struct EnumNames<Dtype> {
  static constexpr std::array<std::pair<Dtype, const char*>, 2> values{
      {{Dtype::Float32, "float32"}, {Dtype::Float64, "float64"}}};
};

struct LMConfig {
  int64_t vocab_size = 32000;
  int64_t n_layers = 2;
  BlockConfig block;  // every layer's; its n_layers is set to this n_layers
  bool tie_embeddings = false;  // logits = h @ tok_embeddings.weight^T (no "output" Linear)
  bool final_norm = true;       // "norm" before the LM head (of block.norm's kind and eps)
  Dtype dtype = kFloat32;       // of the parameters
  // The token embeddings are multiplied by this before the first block (Gemma: sqrt(d_model),
  // rounded to the activations' dtype as its normalizer is). In config.json only when not 1.
  double embed_scale = 1.0;
  // > 0: logits = cap * tanh(logits / cap) (Gemma 2's final_logit_softcapping). In config.json
  // only when set.
  double final_logit_softcap = 0;
  // Per layer, the block's sliding_window for that layer (0: full attention), overriding the
  // block's: Gemma 2 alternates local and global layers. Empty: every layer as the block. In
  // config.json only when not empty.
  std::vector<int64_t> layer_windows;
  // > 0: the RoPE base of the layers with a window, whose RoPE is then unscaled (Gemma 3's
  // rope_local_base_freq); 0: as the block. In config.json only when set.
  double local_rope_base = 0;

  // {"vocab_size": .., "n_layers": .., "tie_embeddings": .., "final_norm": .., "dtype": "float32",
  //  "block": {"d_model": .., "norm_position": "pre", ..., "norm": {"kind": "rmsnorm", "eps": ..},
  //            "attention": {"kind": "gqa", "n_heads": .., ...}, "ffn": {"kind": "swiglu", ...}}}:
  //  every field, enums as their names, each sublayer as its kind and that kind's fields.
  std::string to_json() const;
  // Every field to_json writes is required (block.rope_scaling only when scaling is on,
  // embed_scale only when not 1). A missing
  // or unknown field, a value of the wrong type or an invalid value is an xg::Error naming
  // `source` (e.g. the file) and the field. A block in the flat form of earlier xgrad versions
  // ("n_heads", "norm": "rmsnorm", ...) is read as well, with that format's defaults.
  static LMConfig from_json(const std::string& text, const std::string& source = "LMConfig JSON");
  void validate(const std::string& who = "LMConfig") const;
};

struct LMOutput {
  Tensor logits;    // [B, T, vocab_size]
  Tensor aux_loss;  // 0-d: the blocks' MoE load-balancing losses summed; undefined without MoE
};

struct GenerateOptions {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
  double min_p = 0.0;        // 0 = off (nn/sampling.hpp)
  double repetition_penalty = 1.0;  // 1 = off; over the row's prompt and generated tokens
  uint64_t seed = 0;         // of the generator the draws come from
  int64_t eos_id = -1;       // >= 0: a row stops at this token (then padded with it); generation
                             // ends early once every row has stopped
  // A prompt + max_new_tokens longer than max_seq_len is an error up front unless this is on:
  // then each token is drawn from the last max_seq_len tokens (nanoGPT's idx[:, -block_size:]):
  // once the window is full it slides, and the KV caches are rebuilt from the window's tokens
  // at positions 0.. (one full forward per token from then on).
  bool sliding_window = false;
  // Called with each token a row draws, as it is drawn (rows in order within a step): for
  // streaming, and for stopping criteria such as stop strings. Returning true ends the row
  // there, as eos does: no more tokens are drawn for it and the rest of its row is eos_id
  // (0 without an eos_id).
  std::function<bool(int64_t row, int64_t token)> on_token;
};

// Where generate's time went (wall clock), split as llama.cpp's timings are: the prefill (one
// forward of the whole [B, T0] prompt, to its logits), the decode steps (each a forward of one
// token per row against the KV caches) and the sampling between them.
struct GenerateTimings {
  int64_t prompt_tokens = 0;  // B * T0
  double prefill_seconds = 0;
  int64_t decode_steps = 0;   // one-token forwards: n - 1 for n generated tokens per row
  int64_t decode_tokens = 0;  // B * decode_steps
  double decode_seconds = 0;
  double sample_seconds = 0;
};

// Children named as in a PyTorch LLaMA-style model: "tok_embeddings" (Embedding), "pos" (the
// sinusoidal or learned position module, only for those kinds), "layers" (ModuleList of
// TransformerBlock), "norm" (final, unless final_norm is off) and "output" (the LM head,
// Linear without bias, absent when tied).
class DecoderLM : public Module {
 public:
  // A config whose model cannot fit in this machine's memory (autograd/memory.hpp) is an
  // xg::Error naming the field and the bytes, before its blocks are allocated.
  explicit DecoderLM(const LMConfig& config);

  // tokens: int64 [B, T] -> logits [B, T, vocab_size], always causal. Token t sits at position
  // start_pos + t. With caches (one KVCache per layer; an empty vector is filled), the new
  // tokens attend to the cached ones and are appended to them; start_pos = -1 means "after the
  // cached tokens", a start_pos inside the cache rolls it back to there.
  Tensor forward(const Tensor& tokens, int64_t start_pos = 0, std::vector<KVCache>* caches = nullptr) const;
  Tensor operator()(const Tensor& tokens, int64_t start_pos = 0, std::vector<KVCache>* caches = nullptr) const {
    return forward(tokens, start_pos, caches);
  }
  // The same, with the blocks' MoE auxiliary losses summed (add it to the training loss).
  LMOutput forward_with_aux(const Tensor& tokens, int64_t start_pos = 0,
                            std::vector<KVCache>* caches = nullptr) const;

  // Packed rows (padding-free training, as Hugging Face's DataCollatorWithFlattening and TRL's
  // packing): each row of tokens [B, T] holds several sequences back to back, and
  // position_ids [B, T] (int64) count 0, 1, 2, ... from each sequence's first token, so a 0
  // starts a new sequence. A token attends to the earlier tokens of its own sequence only, and
  // sits at position position_ids[b, t]: the logits of a sequence are those it gets alone in
  // a row. Sinusoidal and learned positions read their table at position_ids; RoPE's scores
  // depend on positions only through their differences, so a sequence's positions continue
  // from its offset in the row (equal in exact arithmetic, and T must fit max_seq_len).
  // Training only: no KV caches.
  Tensor forward_packed(const Tensor& tokens, const Tensor& position_ids) const;

  // What the head reads: the final hidden states [B, T, C] (after the final norm) of forward,
  // or of forward_packed when position_ids is defined. With plain_head_weight() W defined the
  // logits are exactly hidden @ W^T, so a loss can take h and W (losses::linear_cross_entropy)
  // and never hold the whole [B, T, vocab] logits.
  Tensor hidden(const Tensor& tokens, const Tensor& position_ids = Tensor()) const;
  // The head on those hidden states: hidden [B, T, C] -> logits [B, T, vocab_size], so that
  // logits_from_hidden(hidden(x)) is forward(x), and a second head (PPO's value head) can read
  // the same trunk pass.
  Tensor logits_from_hidden(const Tensor& hidden) const;
  // The head's [vocab, C] matrix (the output Linear's, or the tied embedding's) when the head
  // is that matrix alone: no bias, no active adapter, no final soft-capping. Else undefined.
  Tensor plain_head_weight() const;

  // prompt: int64 [B, T0] -> [B, T0 + n], n <= max_new_tokens (fewer only when every row hit
  // eos_id). Prefills the prompt through per-layer KV caches once, then feeds one token at a
  // time (MLA caches its latent). Runs without recording a graph and with dropout off; the
  // module's train/eval modes are restored afterwards. Rows draw in order from one generator.
  // timings (optional) receives where the time went.
  Tensor generate(const Tensor& prompt, int64_t max_new_tokens, const GenerateOptions& options = {},
                  GenerateTimings* timings = nullptr);

  // Activation checkpointing (Hugging Face's model.gradient_checkpointing_enable()): while on,
  // a forward in training mode with grad enabled and without KV caches keeps only each block's
  // input and recomputes the block in backward (xg::checkpoint over the block's parameters), so
  // that the activations of one block at a time are alive instead of all of them. Same
  // gradients, dropout included; about one more forward per step. Not part of config.json.
  void set_gradient_checkpointing(bool on = true) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }
  // While on, the token embeddings' rows are widened to float32 as they are looked up: the
  // model's weights are stored in low precision (store_weights_in, nn/weight_dtype.hpp) while its
  // activations, norms and adapters run in float32.
  void set_widen_embeddings(bool on = true) { widen_embeddings_ = on; }
  bool widen_embeddings() const { return widen_embeddings_; }

  const LMConfig& config() const { return config_; }
  // The longest sequence the positions allow (-1: no limit, for PositionKind::None without MLA RoPE).
  int64_t max_seq_len() const;
  // KV-cache bytes per token summed over the layers.
  int64_t kv_cache_bytes_per_token(int64_t bytes_per_element) const;

  const std::shared_ptr<Embedding>& tok_embeddings() const { return tok_embeddings_; }
  const std::shared_ptr<Module>& pos() const { return pos_; }  // null for RoPE / None
  const std::shared_ptr<ModuleList<TransformerBlock>>& layers() const { return layers_; }
  const std::shared_ptr<Norm>& norm() const { return norm_; }        // null without final_norm
  const std::shared_ptr<Linear>& output() const { return output_; }  // null when tied
  std::string name() const override { return "DecoderLM"; }
  std::string extra_repr() const override;

 private:
  std::string who() const;
  // forward_with_aux, and forward_packed when position_ids is defined.
  // With head false, stops at the final hidden states (returned as .logits).
  LMOutput run(const Tensor& tokens, int64_t start_pos, std::vector<KVCache>* caches, const Tensor& position_ids,
               bool head = true) const;

  LMConfig config_;
  std::shared_ptr<Embedding> tok_embeddings_;
  std::shared_ptr<Module> pos_;
  std::shared_ptr<SinusoidalPositionalEncoding> sinusoidal_;
  std::shared_ptr<LearnedPositionalEmbedding> learned_;
  std::shared_ptr<ModuleList<TransformerBlock>> layers_;
  std::shared_ptr<Norm> norm_;
  std::shared_ptr<Linear> output_;
  bool gradient_checkpointing_ = false;
  bool widen_embeddings_ = false;
};

// While alive on this thread, a DecoderLM being built checks its memory as if its parameters
// were `stored` instead of `built` (the dtype it is built in): a loader that stores the matrices
// in bf16 or q8_0 builds the model without init (its float32 storage never touched, so never
// resident), then gives each matrix its low-precision storage before reading it.
class StoredWeightsGuard {
 public:
  StoredWeightsGuard(Dtype stored, Dtype built);
  ~StoredWeightsGuard();
  StoredWeightsGuard(const StoredWeightsGuard&) = delete;
  StoredWeightsGuard& operator=(const StoredWeightsGuard&) = delete;

 private:
  double prev_;
};

// The bytes of the parameters and buffers of a DecoderLM of `config`, estimated without building
// it: the embeddings, LM head and position tables from their sizes, plus n_layers times one block
// built at max_seq_len 1 and measured (not built when d_model alone makes it too large: then its
// q and o projections stand for it). For refusing a setting before it reaches the allocator.
double model_bytes(const LMConfig& config);

// Training activations (float32) of `rows` sequences of `T` tokens, llm.c's count: per layer
// about 16 d_model-wide, 3 (4 d_model)-wide and 2 [H, T, T] attention values per token kept for backward,
// and the logits three times (forward, softmax, gradient). A lower bound, for refusals.
double activation_bytes(const LMConfig& config, int64_t rows, int64_t T);

// Writes <dir>/config.json (LMConfig::to_json, dtype = the parameters') and
// <dir>/model.safetensors (nn::save: the state dict under PyTorch's names); creates dir.
void save_pretrained(const DecoderLM& model, const std::string& dir);
// Builds the model from <dir>/config.json and loads <dir>/model.safetensors into it (strict).
std::shared_ptr<DecoderLM> load_pretrained(const std::string& dir);

}  // namespace xg::nn

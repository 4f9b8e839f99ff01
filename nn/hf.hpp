// Hugging Face model folders: config.json of LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma 1/2/3 and GPT2LMHeadModel mapped
// to and from LMConfig, weights read tensor by tensor from model.safetensors or a sharded
// model.safetensors.index.json (F32, F16, BF16, widened to float32), and written back the way
// the Hub lays them out; load_model for a model of any source.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/model_source.hpp"
#include "io/safetensors.hpp"
#include "nn/decoder.hpp"
#include "nn/weight_dtype.hpp"

namespace xg::nn {

enum class HFArchitecture { Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma2, Gemma3, Phi3, GPT2 };
const char* hf_architecture_name(HFArchitecture a);  // "LlamaForCausalLM", ...
const char* hf_model_type(HFArchitecture a);         // "llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2"
// The naming scheme (nn/naming.hpp) of the architecture's checkpoints: "hf_gpt2" for GPT-2,
// "hf_gemma2" for Gemma 2 and 3, "hf_phi3" for Phi-3, "hf_llama" for the others.
const char* hf_naming_scheme(HFArchitecture a);

// What a Hugging Face config.json says: the model (as an LMConfig: Pre-Norm RMSNorm, SwiGLU,
// GQA with rotate-half RoPE, the LLaMA block naming, a final norm, float32 parameters; Gemma:
// RMSNorm with a unit offset, GeGLU and embeddings times sqrt(d_model); GPT-2: LayerNorm, GELU
// MLP and attention with biases, learned positions) and the keys that do not change its math
// but belong in the folder.
struct HFConfig {
  HFArchitecture architecture = HFArchitecture::Llama;
  LMConfig lm;
  std::string torch_dtype = "float32";  // "float32", "bfloat16" or "float16": how the weights are stored
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // empty: none
  bool eos_is_list = false;            // config.json gave a list (Llama 3.1: [128001, 128008, 128009])

  // Reads config.json's text. An architecture, activation, rope_scaling type or option xgrad
  // does not compute exactly (mlp_bias, an active sliding window, attention_dropout, a
  // quantization_config, partial_rotary_factor ...) is an xg::Error naming `source`, the key
  // and its value; keys that do not change the forward (initializer_range, use_cache ...)
  // are ignored. Keys left out take the defaults of the architecture's transformers class.
  static HFConfig from_json(const std::string& text, const std::string& source = "config.json");
  // config.json as transformers writes it (architectures, model_type, torch_dtype, ...).
  std::string to_json() const;
  // The HF config of an xgrad model: its architecture inferred (LayerNorm with learned
  // positions: GPT-2; RMSNorm with a unit offset: Gemma; QK-Norm: Qwen3; q/k/v biases
  // without an output bias: Qwen2; else Llama). A model HF's classes cannot express (another
  // norm, FFN or attention kind, Post-Norm, no final norm, ...) is an error naming the field.
  static HFConfig from_lm(const LMConfig& lm);
  // lm's attention heads and MLP width, asked of its specs (nn/sublayer.hpp): a GQA-shaped
  // attention and a gated silu MLP without bias (Gemma: gated GELU; GPT-2: a two-layer MLP), as
  // from_json and from_lm make them; another kind is an xg::Error naming it.
  GQAShape attention() const;
  DenseFFNShape mlp() const;
};

// Builds the model of <folder>/config.json and reads its weights tensor by tensor straight
// into the parameters (peak memory: the float32 model plus a block of the tensor being read;
// the model is built without its random init, nn::init::SkipInitGuard, since every weight is read).
// Names are the hf_llama scheme's; rotary_emb.inv_freq buffers are skipped. A tensor the
// model does not have, a missing one (lm_head.weight may be absent when tied; present, it
// must equal the embeddings), a wrong shape or dtype, a shard the index names but the folder
// lacks, or a malformed file is an xg::Error naming the file and the tensor. If `config` is
// given it receives the folder's HFConfig. The string form opens the folder (io::ModelSource)
// first; a source of another format is an error naming it.
// options.weights: the dtype the matrices are stored in (nn/weight_dtype.hpp; auto: the folder's
// torch_dtype, bf16 for a bf16 folder), allocated so before any is read.
std::shared_ptr<DecoderLM> load_hf(const io::ModelSource& source, HFConfig* config = nullptr,
                                   const LoadOptions& options = {});
std::shared_ptr<DecoderLM> load_hf(const std::string& folder, HFConfig* config = nullptr,
                                   const LoadOptions& options = {});

struct SaveHFOptions {
  io::StoredFloat dtype = io::StoredFloat::Native;  // Native: F32 (torch_dtype float32); BFloat16: BF16
  // Shards of at most this many bytes of tensor data (a larger tensor gets a shard of its own)
  // with a model.safetensors.index.json, as the Hub's 5 GB default; one model.safetensors below.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  // An HF folder to take the tokenizer files from (tokenizer.json, tokenizer_config.json,
  // special_tokens_map.json, generation_config.json, those present) and, from its config.json,
  // the architecture and bos/eos ids (when it describes the same model). Empty: none.
  std::string source;
  std::optional<HFConfig> config;  // written instead of the inferred one (its lm must be the model's)
};

// Writes <folder>/config.json, the weights under HF's names ({"format": "pt"} metadata) and the
// tokenizer files. Everything is written into a temporary folder beside <folder> and renamed
// into place, so an error leaves <folder> as it was (and no half-written folder).
void save_hf(const DecoderLM& model, const std::string& folder, const SaveHFOptions& options = {});

// The model of any source: a Hugging Face folder (load_hf), an xgrad folder (load_pretrained) or
// a GGUF file (load_gguf_model); the string form opens the path first (io::ModelSource). The
// matrices are stored as options.weights says (float32 unless asked).
std::shared_ptr<DecoderLM> load_model(const io::ModelSource& source, const LoadOptions& options = {});
std::shared_ptr<DecoderLM> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace xg::nn

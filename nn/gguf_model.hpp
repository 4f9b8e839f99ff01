// A DecoderLM as a GGUF model of llama.cpp's `llama`, `qwen2`, `qwen3`, `phi3`, `gpt2`, `gemma`,
// `gemma2` or `gemma3` architecture: the architecture's metadata ({arch}.embedding_length, ...), llama.cpp's tensor names
// (token_embd, blk.N.attn_q, ...) and its RoPE layouts, written from a model and read back
// into one. The tokenizer's metadata is text/gguf_vocab.hpp's; the container io/gguf.hpp's.
#pragma once

#include <memory>
#include <string>

#include "io/gguf.hpp"
#include "nn/decoder.hpp"
#include "nn/naming.hpp"
#include "nn/weight_dtype.hpp"

namespace xg::nn {

struct GgufExportOptions {
  // The type of the 2-D weights (F32, F16, BF16, Q8_0 or Q4_0; a Q8_0 or Q4_0 weight whose rows
  // are not a multiple of 32 stays F32). Norm weights and biases are F32, as llama.cpp's converter keeps
  // every 1-D tensor.
  io::GgmlType dtype = io::GgmlType::F32;
  std::string name = "xgrad model";  // general.name
  // llama.cpp's architecture to write; empty: gguf_architecture's inference. "phi3" writes a
  // Llama-shaped model (no biases) with Phi-3's fused attn_qkv and ffn_up (gate, up).
  std::string architecture;
};

// llama.cpp's architecture for a model (HFConfig::from_lm's inference): "gpt2" (LayerNorm,
// learned positions), "gemma" / "gemma2" / "gemma3" (unit-offset RMSNorm, GeGLU; gemma2's sandwich
// norms, soft-capping and windows on the even layers; gemma3's QK-Norm, local layers of its own
// pattern and RoPE base, linear scaling on the global ones), "qwen3" with QK-Norm, "qwen2" with q/k/v biases
// and no output bias, else "llama" (Mistral without a window is `llama` there too); `requested`
// "phi3" turns a Llama-shaped model without biases into llama.cpp's phi3 (a window on every
// layer allowed). A model llama.cpp cannot run as it computes (a RoPE on part of a head, qwen3
// with biases, exact GELU where llama.cpp's is tanh's, Gemma 2's or 3's query_pre_attn_scalar other
// than the head width, Gemma 3's score cap, a window llama.cpp's architecture lacks) is an error
// naming it.
std::string gguf_architecture(const LMConfig& config, const std::string& requested = "");

// llama.cpp's tensor names for `arch` as a naming scheme over xgrad's names (gpt2 and phi3 pack
// q, k, v into attn_qkv; phi3 packs gate and up into ffn_up; gpt2's position_embd). `llama` stores
// the q/k rows in the interleaved RoPE layout (convert_hf_to_gguf.py's LlamaModel.permute undoes
// Hugging Face's rotate-half permutation; llama.cpp rotates adjacent pairs, LLAMA_ROPE_TYPE_NORM);
// the others keep Hugging Face's rotate-half rows (LLAMA_ROPE_TYPE_NEOX, no permute). Gemma's
// norm weights are stored plus one (the converter adds GemmaRMSNorm's unit offset); the
// exporter and loader add and subtract it.
// Modules in the other layout are permuted on the way out and back on the way in.
NamingScheme gguf_naming(const std::string& arch);

// The model's GGUF metadata (general.*, {arch}.*) and tensors, ready for save_gguf; the
// tokenizer's metadata (text::gguf_tokenizer_metadata) is appended by the caller.
io::GgufMetadata gguf_model_metadata(const DecoderLM& model, const GgufExportOptions& options = {});
std::vector<io::GgufTensorData> gguf_model_tensors(const DecoderLM& model, const GgufExportOptions& options = {});

// Builds the model a GGUF file describes and reads its tensors into it: the matrices stored as
// options.weights says (float32 unless asked; auto: each as the file stores it, a block type in
// its blocks (Q8_0 as q8_0, Q4_K as q4_k ...) and BF16 as bfloat16: io::auto_dtype), everything
// else float32. Architectures llama, qwen2, qwen3 (built in the
// file's RoPE layout, so no rows are permuted) and phi3, gpt2, gemma, gemma2, gemma3 (their keys read as
// the transformers config.json they come from: the model load_hf builds). An unsupported architecture, key value or tensor type, a tensor the
// model does not have or one it lacks is an xg::Error naming the file and the key or tensor.
std::shared_ptr<DecoderLM> load_gguf_model(io::GgufReader& file, const LoadOptions& options = {});

}  // namespace xg::nn

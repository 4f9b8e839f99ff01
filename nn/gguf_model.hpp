// A DecoderLM as a GGUF model of llama.cpp's `llama`, `qwen2` or `qwen3` architecture: the
// architecture's metadata ({arch}.embedding_length, ...), llama.cpp's tensor names
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
  // The type of the 2-D weights (F32, F16, BF16 or Q8_0; a Q8_0 weight whose rows are not a
  // multiple of 32 stays F32). Norm weights and biases are F32, as llama.cpp's converter keeps
  // every 1-D tensor.
  io::GgmlType dtype = io::GgmlType::F32;
  std::string name = "xgrad model";  // general.name
};

// llama.cpp's architecture for a model: "qwen3" with QK-Norm, "qwen2" with q/k/v biases and no
// output bias, else "llama" (HFConfig::from_lm's inference; Mistral is `llama` there too). A
// model llama.cpp cannot run (not Pre-Norm RMSNorm + SwiGLU + GQA/MHA with RoPE and a final
// norm, a RoPE on part of a head, qwen3 with biases) is an error naming the field.
std::string gguf_architecture(const LMConfig& config);

// llama.cpp's tensor names for `arch` as a naming scheme over xgrad's names. `llama` stores
// the q/k rows in the interleaved RoPE layout (convert_hf_to_gguf.py's LlamaModel.permute undoes
// Hugging Face's rotate-half permutation; llama.cpp rotates adjacent pairs, LLAMA_ROPE_TYPE_NORM);
// `qwen2` and `qwen3` keep Hugging Face's rotate-half rows (LLAMA_ROPE_TYPE_NEOX, no permute).
// Modules in the other layout are permuted on the way out and back on the way in.
NamingScheme gguf_naming(const std::string& arch);

// The model's GGUF metadata (general.*, {arch}.*) and tensors, ready for save_gguf; the
// tokenizer's metadata (text::gguf_tokenizer_metadata) is appended by the caller.
io::GgufMetadata gguf_model_metadata(const DecoderLM& model, const GgufExportOptions& options = {});
std::vector<io::GgufTensorData> gguf_model_tensors(const DecoderLM& model, const GgufExportOptions& options = {});

// Builds the model a GGUF file describes and reads its tensors into it: the matrices stored as
// options.weights says (float32 unless asked; auto: each as the file stores it, Q8_0 as q8_0 and
// BF16 as bfloat16), everything else float32. Architectures llama, qwen2, qwen3; the model is built in the file's RoPE layout, so
// no rows are permuted. An unsupported architecture, key value or tensor type, a tensor the
// model does not have or one it lacks is an xg::Error naming the file and the key or tensor.
std::shared_ptr<DecoderLM> load_gguf_model(io::GgufReader& file, const LoadOptions& options = {});

}  // namespace xg::nn

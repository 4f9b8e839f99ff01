// What xgrad writes for llama.cpp: a model as a GGUF file with its base's tokenizer metadata,
// and LoRA adapters as a GGUF adapter (llama.cpp's convert_lora_to_gguf.py layout, loaded by
// src/llama-adapter.cpp next to the base model).
#pragma once

#include <string>

#include "io/gguf.hpp"
#include "io/model_source.hpp"
#include "nn/decoder.hpp"
#include "nn/gguf_model.hpp"

namespace xg::finetune {

// The tokenizer.* metadata of a base: copied from it when it is a GGUF file, else made from the
// folder's tokenizer (text::gguf_tokenizer_metadata), padded to n_vocab.
io::GgufMetadata base_tokenizer_metadata(const io::ModelSource& base, int64_t n_vocab);

// Writes `model` (without LoRA adapters: merge them or leave them out first) as a GGUF model
// with the tokenizer of `base` (an HF or xgrad folder, or a GGUF file). A Phi-3 base (HF
// Phi3ForCausalLM or a phi3 GGUF) with a sliding window is written as llama.cpp's phi3 (without
// one as `llama`, as its adapters are) unless options.architecture says otherwise.
void save_gguf_model(const nn::DecoderLM& model, const io::ModelSource& base, const std::string& path,
                     const nn::GgufExportOptions& options = {});

// Writes the LoRA adapters of `model` as a GGUF adapter: general.type "adapter", adapter.type
// "lora", adapter.lora.alpha = scaling * r (llama.cpp scales by alpha / r, so rsLoRA's
// alpha / sqrt r carries over), and per adapted Linear W the tensors "<W's GGUF name>.lora_a"
// (A, [r, in], ne {in, r}) and ".lora_b" (B, [out, r], ne {r, out}). B's rows of a q/k
// projection are permuted as W's are for the architecture's RoPE layout (convert_lora_to_gguf.py
// runs the base converter's modify_tensors on B). An adapter on a module llama.cpp has no
// tensor for is an error naming it: the parts of gpt2's and phi3's fused attn_qkv / ffn_up.
// `architecture` is llama.cpp's architecture of the model file the adapter goes with
// (gguf_export_architecture); empty: gguf_architecture's choice from the model alone, which
// cannot tell a windowed Phi-3 (llama.cpp's phi3) from a windowed Llama (which it refuses).
void save_gguf_adapter(const nn::DecoderLM& model, const std::string& path, io::GgmlType dtype = io::GgmlType::F32,
                       const std::string& name = "xgrad LoRA adapter", const std::string& architecture = "");

// The architecture save_gguf_model writes `model` as when it came from `base`: "phi3" for a
// Phi-3 base with a sliding window (its model alone looks like a windowed Llama), else empty
// (gguf_architecture's choice).
std::string gguf_export_architecture(const nn::DecoderLM& model, const io::ModelSource& base);

}  // namespace xg::finetune

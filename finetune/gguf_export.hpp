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
// tensor for is an error naming it: the parts of gpt2's and phi3's fused attn_qkv / ffn_up, and
// any adapter of a windowed Phi-3 (written as phi3, which gguf_architecture cannot tell from
// the model alone: it refuses the window under `llama`).
void save_gguf_adapter(const nn::DecoderLM& model, const std::string& path, io::GgmlType dtype = io::GgmlType::F32,
                       const std::string& name = "xgrad LoRA adapter");

}  // namespace xg::finetune

// A tokenizer as GGUF's tokenizer.* metadata (llama.cpp's gguf-py/gguf/constants.py Keys.Tokenizer,
// read by src/llama-vocab.cpp), and back: byte-level BPE (Hugging Face's GPT-2 / Llama-3 / Qwen
// tokenizer.json, and xgrad's byte tokenizer) as tokenizer.ggml.model "gpt2", SentencePiece-style
// BPE (Llama 2, Mistral, TinyLlama) as "llama".
#pragma once

#include <memory>
#include <string>

#include "io/gguf.hpp"
#include "text/tokenizer.hpp"

namespace xg::text {

// llama.cpp's token types (llama.h's enum llama_token_type values, as GGUF stores them).
enum class GgufTokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// The tokenizer.* metadata of a model folder's tokenizer: an HF folder's tokenizer.json (with
// tokenizer_config.json's special tokens, add_bos_token and chat_template), or an xgrad folder's
// byte tokenizer (its 256 byte tokens in GPT-2's byte-level alphabet, then <bos>, <eos>, <pad>
// as control tokens, no merges). tokenizer.ggml.pre names llama.cpp's pre-tokenizer for the
// tokenizer.json's split regex ("llama-bpe" for Llama-3's, "qwen2" for Qwen's, "gpt-2" for
// GPT-2's). The token list is padded to n_vocab with "[PAD<id>]" tokens of type unused, as
// convert_hf_to_gguf.py pads. A SentencePiece-style tokenizer.json (no pre-tokenizer, byte
// fallback, the "▁" normalizer) becomes model "llama": tokens, scores (minus the rank of the
// merge that makes a piece), token types (unknown, control, byte, normal), add_space_prefix.
// A tokenizer llama.cpp would split differently (another regex or normalizer) is an xg::Error
// naming the file and the component.
io::GgufMetadata gguf_tokenizer_metadata(const io::ModelSource& source, int64_t n_vocab);

// The tokenizer of a GGUF file: xgrad's byte tokenizer when the vocabulary is exactly the one
// gguf_tokenizer_metadata writes for it, else a byte-level BPE tokenizer built from
// tokenizer.ggml.tokens / token_type / merges with the split regex tokenizer.ggml.pre names
// (llama-bpe, llama3, qwen2, gpt-2), bos/eos/pad ids and add_bos_token / add_eos_token; a "llama"
// vocabulary as SentencePiece BPE (merges: every split of a piece, ranked by its score, as
// llama.cpp's llm_tokenizer_spm merges; byte fallback). Any other tokenizer.ggml.model or pre is
// an xg::Error naming the file, the key and the value.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const io::GgufReader& file);

}  // namespace xg::text

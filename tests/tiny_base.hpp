// Test helper: a randomly initialised tiny byte-level LLaMA-style model saved as xg-train
// saves one (config.json + model.safetensors), the base the xg-finetune tests start from.
#pragma once

#include <filesystem>

#include "autograd/random.hpp"
#include "nn/decoder.hpp"

namespace xg::test {

// Writes <d>/base (d_model 32, 2 layers, 2 heads, 1 KV head, up to 64 positions) and returns it.
inline std::filesystem::path tiny_base(const std::filesystem::path& d) {
  nn::LMConfig c;
  c.vocab_size = 259;
  c.n_layers = 2;
  c.block = nn::BlockConfig::llama(32, 2, 1);
  c.block.max_seq_len = 64;
  manual_seed(3);
  nn::DecoderLM model(c);
  nn::save_pretrained(model, (d / "base").string());
  return d / "base";
}

}  // namespace xg::test

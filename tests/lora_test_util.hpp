// Helpers the LoRA and PEFT tests share: a LoRAConfig in one call, a tiny LLaMA-style model,
// token batches, adapters with a nonzero B, and bitwise tensor equality.
#pragma once

#include <cstring>
#include <string>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/random.hpp"
#include "finetune/lora.hpp"
#include "nn/decoder.hpp"

namespace xg::test {

inline finetune::LoRAConfig lora_cfg(int64_t r, double alpha, const std::string& targets = "q,v", bool rslora = false,
                                     double dropout = 0) {
  finetune::LoRAConfig c;
  c.r = r;
  c.alpha = alpha;
  c.targets = targets;
  c.use_rslora = rslora;
  c.dropout = dropout;
  return c;
}

// w_q, w_k, w_v, w_o (GQA, 1 kv head), W_gate, W_up, W_down (SwiGLU, d_ff 16), output; vocab 11.
inline nn::LMConfig tiny_llama(int64_t n_layers = 2, int64_t d_model = 8) {
  nn::LMConfig c;
  c.vocab_size = 11;
  c.n_layers = n_layers;
  c.block = nn::BlockConfig::llama(d_model, 2, 1);
  nn::SwiGLUSpec ffn;
  ffn.d_ff = 16;
  c.block.ffn = ffn;
  c.block.max_seq_len = 16;
  return c;
}

// int64 [2, 5] token ids for tiny_llama.
inline Tensor tiny_tokens(uint64_t seed) {
  Generator g(seed);
  return randint(0, 11, {2, 5}, &g);
}

// Gives every adapter of `model` a nonzero B (as after some training steps).
inline void randomize_b(const nn::Module& model, uint64_t seed) {
  Generator g(seed);
  NoGradGuard ng;
  for (auto& [path, a] : finetune::lora_adapters(model)) {
    Tensor B = a->B();
    B.copy_(randn(B.shape(), B.dtype(), &g) * 0.3);
  }
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<std::size_t>(a.numel()) * itemsize(a.dtype())) == 0;
}

}  // namespace xg::test

// Test helpers for the losses that read an LM head's hidden states and matrix instead of its
// logits (losses::linear_cross_entropy, losses::linear_token_logprobs): a small decoder LM, and
// its parameters' gradients taken and compared.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/decoder.hpp"

namespace xg::test {

// A 2-layer LLaMA-style LM: vocabulary 37, d 16, 4 heads, 2 KV heads, up to 32 positions.
inline nn::LMConfig small_head_lm(bool tie_embeddings) {
  nn::LMConfig c;
  c.vocab_size = 37;
  c.n_layers = 2;
  c.block = nn::BlockConfig::llama(16, 4, 2);
  c.block.max_seq_len = 32;
  c.tie_embeddings = tie_embeddings;
  return c;
}

// Every parameter's gradient, in parameters() order.
inline std::vector<std::vector<double>> parameter_grads(const nn::Module& model) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model.parameters()) out.push_back(p.grad().to_vector());
  return out;
}

// Each parameter's gradient is `expected`'s within 1e-6 + 1e-4 relative (float32 sums in
// another order).
inline void expect_parameter_grads_near(const nn::Module& model, const std::vector<std::vector<double>>& expected) {
  const std::vector<std::vector<double>> got = parameter_grads(model);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), expected[k].size()) << k;
    for (std::size_t i = 0; i < got[k].size(); ++i)
      EXPECT_NEAR(got[k][i], expected[k][i], 1e-6 + 1e-4 * std::abs(expected[k][i])) << "parameter " << k << ", " << i;
  }
}

}  // namespace xg::test

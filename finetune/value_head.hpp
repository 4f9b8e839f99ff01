// PPO's value head: a Linear(hidden -> 1) reading the policy's final hidden states, as TRL's
// AutoModelForCausalLMWithValueHead (v_head.summary), and its file beside the adapter.
#pragma once

#include <string>

#include "autograd/random.hpp"
#include "nn/linear.hpp"
#include "nn/module.hpp"

namespace xg::finetune {

// What xg-finetune --objective ppo writes into --out beside the adapter (or model/).
constexpr const char* kValueHeadFile = "value_head.safetensors";

// Registered as "summary", so its parameters are summary.weight [1, C] and summary.bias [1]:
// TRL's names are those under the prefix "v_head." (named_trainable, the file).
class ValueHead : public nn::Module {
 public:
  // Weight N(0, 0.02) drawn from `gen`, bias 0: TRL's value model's score head (initializer_range
  // 0.02), so the values start near 0 and the value loss's first gradients into a shared trunk
  // are small (nn.Linear's +-1/sqrt(C) init started them several times larger; finetune/README.md).
  ValueHead(int64_t hidden_size, Generator& gen, Dtype dtype = kFloat32);
  // hidden: [B, T, C] -> values [B, T]: the value of each prefix, read where the LM head reads
  // the next token's logits.
  Tensor forward(const Tensor& hidden) const;
  // The parameters under TRL's names ("v_head.summary.weight", "v_head.summary.bias").
  nn::NamedTensors named_trainable() const;
  // Writes <dir>/value_head.safetensors (atomically) under those names.
  void save(const std::string& dir) const;
  // Reads a file save wrote into this head's parameters; an error names the file and tensor.
  void load(const std::string& path);
  std::string name() const override { return "ValueHead"; }

 private:
  int64_t hidden_size_;
  std::shared_ptr<nn::Linear> summary_;
};

}  // namespace xg::finetune

// ValueHead: PPO's Linear(hidden -> 1) on the policy's final hidden states, saved as
// value_head.safetensors under TRL's v_head.summary names.
#include "finetune/value_head.hpp"

#include <cmath>

#include "autograd/error.hpp"
#include "io/safetensors.hpp"
#include "nn/init.hpp"

namespace xg::finetune {

namespace {
constexpr const char* kValueHeadPrefix = "v_head.";
}

ValueHead::ValueHead(int64_t hidden_size, Generator& gen, Dtype dtype) : hidden_size_(hidden_size) {
  check(hidden_size >= 1, "ValueHead: hidden_size must be positive, got ", hidden_size);
  {
    nn::init::SkipInitGuard skip;  // drawn below from `gen`, not from the default generator
    summary_ = register_module("summary", std::make_shared<nn::Linear>(hidden_size, 1, true, dtype));
  }
  Tensor w = summary_->weight(), b = summary_->bias();
  nn::init::normal_(w, 0.0, 0.02, &gen);
  nn::init::zeros_(b);
}

// hidden [B, T, C] -> [B, T, 1] -> [B, T]
Tensor ValueHead::forward(const Tensor& hidden) const {
  check(hidden.dim() == 3 && hidden.shape()[2] == hidden_size_, "ValueHead: expected hidden states [B, T, ",
        hidden_size_, "], got ", shape_str(hidden.shape()));
  return summary_->forward(hidden).reshape({hidden.shape()[0], hidden.shape()[1]});
}

nn::NamedTensors ValueHead::named_trainable() const {
  nn::NamedTensors out;
  for (const auto& [name, p] : named_parameters()) out.emplace_back(kValueHeadPrefix + name, p);
  return out;
}

void ValueHead::save(const std::string& dir) const {
  TensorMap t;
  for (const auto& [name, p] : named_trainable()) t.emplace(name, p);
  io::save_safetensors(dir + "/" + kValueHeadFile, t);
}

void ValueHead::load(const std::string& path) {
  const TensorMap t = io::load_safetensors(path);
  for (const auto& [name, p] : named_trainable()) {
    auto it = t.find(name);
    check(it != t.end(), path, ": no tensor '", name, "' (a value head file holds v_head.summary.weight and .bias)");
    check(it->second.shape() == p.shape(), path, ": '", name, "' is ", shape_str(it->second.shape()),
          ", the value head of this model needs ", shape_str(p.shape()));
    p.copy_(it->second.to(p.dtype()));
  }
}

}  // namespace xg::finetune

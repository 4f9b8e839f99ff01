// Feed-forward layers: the two-layer FFN (ReLU / GELU), SwiGLU (LLaMA) and a top-k Mixture
// of Experts with the Switch Transformer load-balancing loss.
#pragma once

#include <memory>

#include "nn/linear.hpp"

namespace xg::nn {

enum class Activation { ReLU, GELU /* erf form, PyTorch's default */, GELUTanh };
Tensor activation(const Tensor& x, Activation act);
const char* activation_name(Activation act);  // "relu", "gelu", "gelu_tanh"

// A module mapping [..., d_model] to [..., d_model] token by token: FFN, SwiGLU (and so an
// MoE expert or a block's FFN of any kind).
class FeedForward : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  virtual int64_t d_model() const = 0;
  virtual int64_t d_ff() const = 0;
};

// Attribute names of the two projections, so that each seed's state dict loads by name.
enum class FFNNaming {
  Seed,        // w_up, w_down: the second seed's FFN (section 3.1)
  FC,          // fc1, fc2: the first seed's FeedForward_Old
  Sequential,  // "0", "2": nn.Sequential(Linear, act, Linear), the second seed's MoE experts
};

// out = down(dropout(act(up(x)))), up: d_model -> d_ff, down: d_ff -> d_model.
// d_ff = 0 means 4 * d_model (the first seed's `d_ff or 4 * d_model`).
class FFN : public FeedForward {
 public:
  FFN(int64_t d_model, int64_t d_ff, Activation act = Activation::ReLU, double dropout = 0.0, bool bias = true,
      FFNNaming naming = FFNNaming::Seed);
  Tensor forward(const Tensor& x) const override;
  const std::shared_ptr<Linear>& up() const { return up_; }
  const std::shared_ptr<Linear>& down() const { return down_; }
  int64_t d_model() const override { return d_model_; }
  int64_t d_ff() const override { return d_ff_; }
  Activation act() const { return act_; }
  std::string name() const override { return "FFN"; }
  std::string extra_repr() const override;

 private:
  int64_t d_model_, d_ff_;
  Activation act_;
  double dropout_;
  std::shared_ptr<Linear> up_, down_;
};

// Attribute names of SwiGLU's three projections.
enum class SwiGLUNaming {
  Seed,       // W_gate, W_up, W_down: the first seed's FeedForward_SwiGLU (section 2)
  Lowercase,  // w_gate, w_up, w_down: the second seed's SwiGLUFNN (section 3.2, there with bias)
  LLaMA,      // w1 (gate), w2 (down), w3 (up): Meta's LLaMA checkpoints
};

// out = down(silu(gate(x)) * up(x)), gate/up: d_model -> d_ff, down: d_ff -> d_model.
// d_ff = 0 means default_d_ff(d_model).
class SwiGLU : public FeedForward {
 public:
  SwiGLU(int64_t d_model, int64_t d_ff = 0, bool bias = false, SwiGLUNaming naming = SwiGLUNaming::Seed);
  Tensor forward(const Tensor& x) const override;
  // The first seed's rule: int(8/3 * d_model) rounded up to a multiple of `multiple_of`, and
  // at least d_model (512 -> 1536, 4096 -> 11008 as in LLaMA-7B).
  static int64_t default_d_ff(int64_t d_model, int64_t multiple_of = 256);
  const std::shared_ptr<Linear>& gate() const { return gate_; }
  const std::shared_ptr<Linear>& up() const { return up_; }
  const std::shared_ptr<Linear>& down() const { return down_; }
  int64_t d_model() const override { return d_model_; }
  int64_t d_ff() const override { return d_ff_; }
  std::string name() const override { return "SwiGLU"; }
  std::string extra_repr() const override;

 private:
  int64_t d_model_, d_ff_;
  std::shared_ptr<Linear> gate_, up_, down_;
};

enum class ExpertKind {
  FFN,     // the second seed's expert: nn.Sequential(Linear(d, d_ff), act, Linear(d_ff, d)), with bias
  SwiGLU,  // SwiGLU without bias (Mixtral-style experts)
};

struct MoEOptions {
  int64_t d_model = 0;
  int64_t d_ff = 0;  // 0: 4 * d_model for FFN experts (the seed), SwiGLU::default_d_ff for SwiGLU
  int64_t num_experts = 8;
  int64_t top_k = 2;
  ExpertKind expert = ExpertKind::FFN;
  Activation activation = Activation::ReLU;  // of FFN experts
  double aux_loss_coef = 0.01;               // the Switch Transformer's alpha
};

struct MoEOutput {
  Tensor out;       // [..., d_model]
  Tensor aux_loss;  // 0-d: aux_loss_coef * load-balancing loss (add it to the training loss)
};

// Sparse mixture of experts (the second seed's MoE, section 3.3): a bias-free Linear
// "router" scores the experts, each token goes to its top_k experts, weighted by a softmax
// over those k scores; the experts live in the ModuleList "experts".
class MoE : public Module {
 public:
  explicit MoE(const MoEOptions& opts);
  MoEOutput forward(const Tensor& x) const;
  MoEOutput operator()(const Tensor& x) const { return forward(x); }
  const std::shared_ptr<Linear>& router() const { return router_; }
  const std::shared_ptr<ModuleList<FeedForward>>& experts() const { return experts_; }
  const MoEOptions& options() const { return opts_; }
  std::string name() const override { return "MoE"; }
  std::string extra_repr() const override;

 private:
  MoEOptions opts_;
  std::shared_ptr<Linear> router_;
  std::shared_ptr<ModuleList<FeedForward>> experts_;
};

}  // namespace xg::nn

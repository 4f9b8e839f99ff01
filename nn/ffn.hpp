// Feed-forward layers: the two-layer FFN (ReLU / GELU), SwiGLU (LLaMA) and a top-k Mixture
// of Experts with the Switch Transformer load-balancing loss, each with its block spec.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "nn/linear.hpp"
#include "nn/sublayer.hpp"

namespace xg::nn {

enum class Activation { ReLU, GELU /* erf form, PyTorch's default */, GELUTanh };
Tensor activation(const Tensor& x, Activation act);
const char* activation_name(Activation act);  // "relu", "gelu", "gelu_tanh"

// Attribute names of the two projections, so that state dicts of the usual hand-written
// PyTorch FFNs load by name.
enum class FFNNaming {
  UpDown,      // w_up, w_down: the names hand-written FFN classes commonly use
  FC,          // fc1, fc2: the classic teaching Transformer's FeedForward, fc2(relu(fc1(x)))
  Sequential,  // "0", "2": nn.Sequential(Linear, act, Linear), as MoE experts are usually written
};

// Attribute names of SwiGLU's three projections.
enum class SwiGLUNaming {
  Capitalized,  // W_gate, W_up, W_down: the formula's matrix names, common in hand-written code
  Lowercase,    // w_gate, w_up, w_down (such code often keeps nn.Linear's bias: pass bias = true)
  LLaMA,        // w1 (gate), w2 (down), w3 (up): Meta's LLaMA checkpoints
};

enum class ExpertKind {
  FFN,     // nn.Sequential(Linear(d, d_ff), act, Linear(d_ff, d)) with bias, the usual hand-written expert
  SwiGLU,  // SwiGLU without bias (Mixtral-style experts)
};

template <>
struct EnumNames<Activation> {
  static constexpr std::array<std::pair<Activation, const char*>, 3> values{
      {{Activation::ReLU, "relu"}, {Activation::GELU, "gelu"}, {Activation::GELUTanh, "gelu_tanh"}}};
};
template <>
struct EnumNames<FFNNaming> {
  static constexpr std::array<std::pair<FFNNaming, const char*>, 3> values{
      {{FFNNaming::UpDown, "up_down"}, {FFNNaming::FC, "fc"}, {FFNNaming::Sequential, "sequential"}}};
};
template <>
struct EnumNames<SwiGLUNaming> {
  static constexpr std::array<std::pair<SwiGLUNaming, const char*>, 3> values{
      {{SwiGLUNaming::Capitalized, "upper"}, {SwiGLUNaming::Lowercase, "lower"}, {SwiGLUNaming::LLaMA, "llama"}}};
};
template <>
struct EnumNames<ExpertKind> {
  static constexpr std::array<std::pair<ExpertKind, const char*>, 2> values{
      {{ExpertKind::FFN, "ffn"}, {ExpertKind::SwiGLU, "swiglu"}}};
};

// The block's FFN kinds (nn/registry.hpp): each spec's fields are its config.json fields, and
// d_ff = 0 picks the kind's default. The block gives d_model (SublayerContext); its dropout is
// applied by the block to the FFN's output, not inside the FFN.

// --- the two-layer FFN -----------------------------------------------------------------------------

// "mlp": down(act(up(x))), the original Transformer's FFN (ReLU) and GPT-2's (GELU).
struct MLPSpec {
  static constexpr const char* kind = "mlp";
  Activation activation = Activation::GELU;
  int64_t d_ff = 0;  // 0: 4 d_model
  bool bias = true;
  FFNNaming naming = FFNNaming::FC;  // fc1, fc2
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("activation", s.activation);
    f("d_ff", s.d_ff);
    f("bias", s.bias);
    f("naming", s.naming);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<FeedForward> build(const SublayerContext& ctx) const;
  std::optional<DenseFFNShape> dense_shape(const SublayerContext& ctx) const;
};

// out = down(dropout(act(up(x)))), up: d_model -> d_ff, down: d_ff -> d_model.
// d_ff = 0 means 4 * d_model (the original Transformer's ratio, Vaswani et al. 2017).
class FFN : public FeedForward {
 public:
  // As hand-written FeedForward(d_model, d_ff, dropout) classes take it, for use outside a
  // block (MoE's experts); the dropout is between the two layers.
  FFN(int64_t d_model, int64_t d_ff, Activation activation = Activation::ReLU, double dropout = 0.0, bool bias = true,
      FFNNaming naming = FFNNaming::UpDown);
  // The block's: d_model from ctx, no dropout inside.
  FFN(const MLPSpec& spec, const SublayerContext& ctx);
  Tensor forward(const Tensor& x) const override;  // x: [..., d_model] -> [..., d_model]
  const std::shared_ptr<Linear>& up() const { return up_; }
  const std::shared_ptr<Linear>& down() const { return down_; }
  int64_t d_model() const override { return d_model_; }
  int64_t d_ff() const override { return d_ff_; }
  Activation activation() const { return activation_; }
  std::string name() const override { return "FFN"; }
  std::string extra_repr() const override;

 private:
  int64_t d_model_, d_ff_;
  Activation activation_;
  double dropout_;
  std::shared_ptr<Linear> up_, down_;
};

// --- SwiGLU ----------------------------------------------------------------------------------------

// "swiglu": down(silu(gate(x)) * up(x)) (Shazeer 2020; LLaMA).
struct SwiGLUSpec {
  static constexpr const char* kind = "swiglu";
  int64_t d_ff = 0;  // 0: SwiGLU::default_d_ff(d_model)
  bool bias = false;
  SwiGLUNaming naming = SwiGLUNaming::Capitalized;  // W_gate, W_up, W_down
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("d_ff", s.d_ff);
    f("bias", s.bias);
    f("naming", s.naming);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<FeedForward> build(const SublayerContext& ctx) const;
  std::optional<DenseFFNShape> dense_shape(const SublayerContext& ctx) const;
};

// out = down(silu(gate(x)) * up(x)), gate/up: d_model -> d_ff, down: d_ff -> d_model.
// d_ff = 0 means default_d_ff(d_model).
class SwiGLU : public FeedForward {
 public:
  // As hand-written SwiGLU(d_model, d_ff) classes take it, for use outside a block.
  SwiGLU(int64_t d_model, int64_t d_ff = 0, bool bias = false, SwiGLUNaming naming = SwiGLUNaming::Capitalized);
  // The block's: d_model from ctx.
  SwiGLU(const SwiGLUSpec& spec, const SublayerContext& ctx);
  Tensor forward(const Tensor& x) const override;
  // LLaMA's rule: int(8/3 * d_model) (two thirds of a two-matrix FFN's 4 d_model, so that the
  // three matrices hold as many parameters; Shazeer 2020) rounded up to a multiple of
  // `multiple_of`, and at least d_model (512 -> 1536, 4096 -> 11008 as in LLaMA-7B).
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

// --- GeGLU ---------------------------------------------------------------------------------------

// "geglu": down(act(gate(x)) * up(x)) with a GELU (Shazeer 2020; Gemma's MLP uses GELU's tanh form).
struct GeGLUSpec {
  static constexpr const char* kind = "geglu";
  int64_t d_ff = 0;  // 0: SwiGLU::default_d_ff(d_model)
  Activation activation = Activation::GELUTanh;  // gelu or gelu_tanh
  bool bias = false;
  SwiGLUNaming naming = SwiGLUNaming::Capitalized;  // W_gate, W_up, W_down
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("d_ff", s.d_ff);
    f("activation", s.activation);
    f("bias", s.bias);
    f("naming", s.naming);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<FeedForward> build(const SublayerContext& ctx) const;
  std::optional<DenseFFNShape> dense_shape(const SublayerContext& ctx) const;
};

// out = down(gelu(gate(x)) * up(x)), gate/up: d_model -> d_ff, down: d_ff -> d_model; the
// projections named as SwiGLU's.
class GeGLU : public FeedForward {
 public:
  GeGLU(const GeGLUSpec& spec, const SublayerContext& ctx);
  Tensor forward(const Tensor& x) const override;  // x: [..., d_model] -> [..., d_model]
  const std::shared_ptr<Linear>& gate() const { return gate_; }
  const std::shared_ptr<Linear>& up() const { return up_; }
  const std::shared_ptr<Linear>& down() const { return down_; }
  int64_t d_model() const override { return d_model_; }
  int64_t d_ff() const override { return d_ff_; }
  Activation activation() const { return activation_; }
  std::string name() const override { return "GeGLU"; }
  std::string extra_repr() const override;

 private:
  int64_t d_model_, d_ff_;
  Activation activation_;
  std::shared_ptr<Linear> gate_, up_, down_;
};

// --- mixture of experts ----------------------------------------------------------------------------

// "moe": top-k routed experts with the Switch Transformer's load-balancing loss.
struct MoESpec {
  static constexpr const char* kind = "moe";
  int64_t d_ff = 0;  // 0: 4 d_model for FFN experts, SwiGLU::default_d_ff for SwiGLU ones
  int64_t num_experts = 8;
  int64_t top_k = 2;
  double aux_loss_coef = 0.01;               // the Switch Transformer's alpha
  ExpertKind expert = ExpertKind::FFN;       // ReLU experts with bias, named "0" and "2"
  Activation activation = Activation::ReLU;  // of FFN experts
  SwiGLUNaming swiglu_naming = SwiGLUNaming::Capitalized;  // of SwiGLU experts: W_gate, W_up, W_down (LLaMA: w1, w3, w2 as Mixtral's)
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("d_ff", s.d_ff);
    f("num_experts", s.num_experts);
    f("top_k", s.top_k);
    f("aux_loss_coef", s.aux_loss_coef);
    f("expert", s.expert);
    f("activation", s.activation);
    f("swiglu_naming", s.swiglu_naming);
  }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<FeedForward> build(const SublayerContext& ctx) const;
  // Routed, not one dense FFN.
  std::optional<DenseFFNShape> dense_shape(const SublayerContext&) const { return std::nullopt; }
};

// out [..., d_model] and aux_loss (0-d): aux_loss_coef * load-balancing loss (add it to the
// training loss).
using MoEOutput = FFNOutput;

// Sparse mixture of experts (top-k gating, Shazeer et al. 2017; as in Mixtral): a bias-free
// Linear "router" scores the experts, each token goes to its top_k experts, weighted by a
// softmax over those k scores; the experts live in the ModuleList "experts".
class MoE : public FeedForward {
 public:
  // d_model from ctx.
  MoE(const MoESpec& spec, const SublayerContext& ctx);
  // x: [..., d_model] -> the output and the auxiliary loss; forward(x) is the output alone.
  MoEOutput forward_with_aux(const Tensor& x) const override;
  Tensor forward(const Tensor& x) const override { return forward_with_aux(x).out; }
  int64_t d_model() const override { return d_model_; }
  int64_t d_ff() const override { return d_ff_; }  // the experts' (the default resolved)
  const std::shared_ptr<Linear>& router() const { return router_; }
  const std::shared_ptr<ModuleList<FeedForward>>& experts() const { return experts_; }
  const MoESpec& spec() const { return spec_; }  // as given (0 for the defaults)
  std::string name() const override { return "MoE"; }
  std::string extra_repr() const override;

 private:
  MoESpec spec_;
  int64_t d_model_, d_ff_;
  std::shared_ptr<Linear> router_;
  std::shared_ptr<ModuleList<FeedForward>> experts_;
};

}  // namespace xg::nn

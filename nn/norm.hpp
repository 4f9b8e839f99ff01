// LayerNorm and RMSNorm modules over the last dim (torch.nn.LayerNorm; LLaMA's RMSNorm),
// on the fused ops of autograd/norm.hpp, and their block specs.
#pragma once

#include <memory>

#include "nn/sublayer.hpp"

namespace xg::nn {

// The block's norm kinds (nn/registry.hpp): each spec's fields are its config.json fields; the
// block gives the width (SublayerContext::d_model).
struct LayerNormSpec {
  static constexpr const char* kind = "layernorm";
  double eps = 1e-5;
  template <class Self, class F>
  static void visit(Self& s, F&& f) { f("eps", s.eps); }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Norm> build(const SublayerContext& ctx) const;
};

struct RMSNormSpec {
  static constexpr const char* kind = "rmsnorm";
  double eps = 1e-6;
  template <class Self, class F>
  static void visit(Self& s, F&& f) { f("eps", s.eps); }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Norm> build(const SublayerContext& ctx) const;
};

// "rmsnorm_unit_offset": y = x / sqrt(mean(x^2) + eps) * (1 + weight), weight starting at zeros
// (Gemma's GemmaRMSNorm; its checkpoints store the offset-free weight).
struct UnitOffsetRMSNormSpec {
  static constexpr const char* kind = "rmsnorm_unit_offset";
  double eps = 1e-6;
  template <class Self, class F>
  static void visit(Self& s, F&& f) { f("eps", s.eps); }
  void validate(const SublayerContext& ctx, const std::string& who) const;
  std::shared_ptr<Norm> build(const SublayerContext& ctx) const;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased var), as
// torch.nn.LayerNorm(dim, eps, elementwise_affine). Parameters "weight" (ones) and "bias"
// (zeros), absent without elementwise_affine.
// NOTE: hand-written LayerNorm classes sometimes start beta at ones (the same
// nn.Parameter(torch.ones(d)) as gamma); that is a slip, PyTorch starts the bias at zeros,
// and so do we.
class LayerNorm : public Norm {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(const LayerNormSpec& spec, const SublayerContext& ctx);  // the block's: over d_model
  Tensor forward(const Tensor& x) const override;  // [..., dim] -> [..., dim]
  Tensor weight() const { return weight_; }  // undefined without elementwise_affine
  Tensor bias() const { return bias_; }      // undefined without elementwise_affine
  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }
  std::string name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
  double eps_;
  Tensor weight_, bias_;
};

// y = x / sqrt(mean(x^2) + eps) * weight over the last dim (Zhang & Sennrich 2019; LLaMA's
// RMSNorm), statistics accumulated in double. Parameter "weight" (ones).
// NOTE: tutorial code commonly calls the parameter `gamma` (self.gamma =
// nn.Parameter(torch.ones(d))); we use LLaMA's (and torch.nn.RMSNorm's) name "weight", and
// the "gamma" naming scheme (nn/naming.hpp) loads such state dicts. The default eps is
// LLaMA's 1e-6; some hand-written RMSNorms default to 1e-8 (pass it explicitly to reproduce
// them). With unit_offset the scale is (1 + weight) and weight starts at zeros (Gemma).
class RMSNorm : public Norm {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, bool unit_offset = false);
  RMSNorm(const RMSNormSpec& spec, const SublayerContext& ctx);  // the block's: over d_model
  RMSNorm(const UnitOffsetRMSNormSpec& spec, const SublayerContext& ctx);
  Tensor forward(const Tensor& x) const override;  // [..., dim] -> [..., dim]
  Tensor weight() const { return weight_; }
  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }
  bool unit_offset() const { return unit_offset_; }
  std::string name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
  double eps_;
  bool unit_offset_;
  Tensor weight_;
};

// A norm by kind, for code that picks one without a block spec (the Pre/Post-Norm study).
enum class NormKind { LayerNorm, RMSNorm };
const char* norm_kind_name(NormKind k);  // "layernorm", "rmsnorm"
std::shared_ptr<Norm> make_norm(NormKind kind, int64_t dim, double eps);

}  // namespace xg::nn

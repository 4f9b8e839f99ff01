// LayerNorm and RMSNorm, and their specs.
#include "nn/norm.hpp"

#include <cmath>

#include "autograd/norm.hpp"

namespace xg::nn {

namespace {

// "LayerNorm(dim=8): expected input [..., 8], got [2,3,7]"
void check_last_dim(const char* module, int64_t dim, const Tensor& x) {
  check(x.defined(), module, "(dim=", dim, "): the input is an undefined tensor");
  check(x.dim() >= 1 && x.size(-1) == dim, module, "(dim=", dim, "): expected input [..., ", dim, "], got ",
        shape_str(x.shape()));
}

void check_options(const char* module, int64_t dim, double eps) {
  check(dim > 0, module, ": dim must be positive, got ", dim);
  check(std::isfinite(eps) && eps >= 0, module, "(dim=", dim, "): eps must be a finite number >= 0, got ", eps);
}

}  // namespace

LayerNorm::LayerNorm(int64_t dim, double eps, bool elementwise_affine) : dim_(dim), eps_(eps) {
  check_options("LayerNorm", dim, eps);
  if (elementwise_affine) {
    weight_ = register_parameter("weight", ones({dim}));
    bias_ = register_parameter("bias", zeros({dim}));
  }
}

LayerNorm::LayerNorm(const LayerNormSpec& spec, const SublayerContext& ctx) : LayerNorm(ctx.d_model, spec.eps) {}

Tensor LayerNorm::forward(const Tensor& x) const {
  check_last_dim("LayerNorm", dim_, x);
  return layer_norm(x, weight_, bias_, eps_);
}

std::string LayerNorm::extra_repr() const {
  return str_cat("dim=", dim_, ", eps=", eps_, ", elementwise_affine=", weight_.defined() ? "true" : "false");
}

RMSNorm::RMSNorm(int64_t dim, double eps, bool unit_offset) : dim_(dim), eps_(eps), unit_offset_(unit_offset) {
  check_options("RMSNorm", dim, eps);
  weight_ = register_parameter("weight", unit_offset ? zeros({dim}) : ones({dim}));
}

RMSNorm::RMSNorm(const RMSNormSpec& spec, const SublayerContext& ctx) : RMSNorm(ctx.d_model, spec.eps) {}
RMSNorm::RMSNorm(const UnitOffsetRMSNormSpec& spec, const SublayerContext& ctx) : RMSNorm(ctx.d_model, spec.eps, true) {}

// x: [..., dim] -> [..., dim]. The unit offset is added in the weight's dtype, as Gemma's
// 1.0 + weight.float() does in float32.
Tensor RMSNorm::forward(const Tensor& x) const {
  check_last_dim("RMSNorm", dim_, x);
  return rms_norm(x, unit_offset_ ? weight_ + 1.0 : weight_, eps_);
}

std::string RMSNorm::extra_repr() const {
  return str_cat("dim=", dim_, ", eps=", eps_, unit_offset_ ? ", unit_offset=true" : "");
}

const char* norm_kind_name(NormKind k) { return k == NormKind::LayerNorm ? LayerNormSpec::kind : RMSNormSpec::kind; }

std::shared_ptr<Norm> make_norm(NormKind kind, int64_t dim, double eps) {
  if (kind == NormKind::LayerNorm) return std::make_shared<LayerNorm>(dim, eps);
  return std::make_shared<RMSNorm>(dim, eps);
}

// ---------------------------------------------------------------------------------------------
// specs

void LayerNormSpec::validate(const SublayerContext&, const std::string& who) const {
  check(eps > 0, who, ": field 'norm.eps' must be positive, got ", eps);
}
std::shared_ptr<Norm> LayerNormSpec::build(const SublayerContext& ctx) const {
  return std::make_shared<LayerNorm>(*this, ctx);
}

void RMSNormSpec::validate(const SublayerContext&, const std::string& who) const {
  check(eps > 0, who, ": field 'norm.eps' must be positive, got ", eps);
}
std::shared_ptr<Norm> RMSNormSpec::build(const SublayerContext& ctx) const {
  return std::make_shared<RMSNorm>(*this, ctx);
}

void UnitOffsetRMSNormSpec::validate(const SublayerContext&, const std::string& who) const {
  check(eps > 0, who, ": field 'norm.eps' must be positive, got ", eps);
}
std::shared_ptr<Norm> UnitOffsetRMSNormSpec::build(const SublayerContext& ctx) const {
  return std::make_shared<RMSNorm>(*this, ctx);
}

}  // namespace xg::nn

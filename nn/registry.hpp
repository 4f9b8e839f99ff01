// The sublayer kinds a TransformerBlock can hold, one variant per family, and the factories
// that build a sublayer from its spec. Registering a kind is including its header and adding
// its spec to its family's variant here (nn/README.md, "Adding a sublayer kind").
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "nn/attention_gqa.hpp"
#include "nn/attention_mha.hpp"
#include "nn/attention_mla.hpp"
#include "nn/ffn.hpp"
#include "nn/norm.hpp"

namespace xg::nn {

using NormSpec = std::variant<LayerNormSpec, RMSNormSpec, UnitOffsetRMSNormSpec>;
using AttentionSpec = std::variant<MHASpec, GQASpec, MLASpec>;
using FFNSpec = std::variant<MLPSpec, SwiGLUSpec, MoESpec, GeGLUSpec>;

// The kind's name in config files ("rmsnorm", "gqa", "swiglu", ...).
template <class Spec>
const char* spec_kind(const Spec& spec) {
  return std::visit([](const auto& s) { return std::decay_t<decltype(s)>::kind; }, spec);
}

// Checks the spec's own fields against the block's settings; throws xg::Error naming `who`
// and the field ("TransformerBlock: field 'attention.n_kv_heads' (3) must divide n_heads (8)").
template <class Spec>
void validate_spec(const Spec& spec, const SublayerContext& ctx, const std::string& who) {
  std::visit([&](const auto& s) { s.validate(ctx, who); }, spec);
}

// The family's module, built from the spec and the block's settings.
inline std::shared_ptr<Norm> make_sublayer(const NormSpec& spec, const SublayerContext& ctx) {
  return std::visit([&](const auto& s) { return s.build(ctx); }, spec);
}
inline std::shared_ptr<Attention> make_sublayer(const AttentionSpec& spec, const SublayerContext& ctx) {
  return std::visit([&](const auto& s) { return s.build(ctx); }, spec);
}
inline std::shared_ptr<FeedForward> make_sublayer(const FFNSpec& spec, const SublayerContext& ctx) {
  return std::visit([&](const auto& s) { return s.build(ctx); }, spec);
}

// The eps of a norm spec (every norm kind has one).
inline double norm_eps(const NormSpec& spec) {
  return std::visit([](const auto& s) { return s.eps; }, spec);
}

// The attention's heads as grouped-query attention lays them out, or nullopt for a kind laid
// out otherwise (sublayer.hpp, GQAShape). Needs a validated spec.
inline std::optional<GQAShape> gqa_shape(const AttentionSpec& spec, const SublayerContext& ctx) {
  return std::visit([&](const auto& s) { return s.gqa_shape(ctx); }, spec);
}

// The FFN as one dense FFN, or nullopt for a routed one (sublayer.hpp, DenseFFNShape).
inline std::optional<DenseFFNShape> dense_shape(const FFNSpec& spec, const SublayerContext& ctx) {
  return std::visit([&](const auto& s) { return s.dense_shape(ctx); }, spec);
}

}  // namespace xg::nn

// FFN, SwiGLU and MoE, and their specs.
#include "nn/ffn.hpp"

#include <algorithm>

#include "autograd/elementwise.hpp"
#include "autograd/index.hpp"
#include "autograd/random.hpp"
#include "autograd/reduce.hpp"
#include "autograd/shape.hpp"
#include "autograd/softmax.hpp"
#include "autograd/swiglu.hpp"

namespace xg::nn {

Tensor activation(const Tensor& x, Activation act) {
  switch (act) {
    case Activation::ReLU: return relu(x);
    case Activation::GELU: return gelu(x, GeluApprox::None);
    case Activation::GELUTanh: return gelu(x, GeluApprox::Tanh);
  }
  throw Error("activation: unknown activation");
}

const char* activation_name(Activation act) { return enum_name(act); }

namespace {

// "FFN(d_model=8, d_ff=32): expected input [..., 8], got [2,3,7]"
void check_input(const Tensor& x, int64_t d_model, const std::string& who) {
  check(x.defined(), who, ": input is undefined");
  check(x.dim() >= 1 && x.size(-1) == d_model, who, ": expected input [..., ", d_model, "], got ",
        shape_str(x.shape()));
}

// The three projections' names of a gated FFN (SwiGLU, GeGLU).
struct GatedNames {
  const char *gate, *up, *down;
};
GatedNames gated_names(SwiGLUNaming naming) {
  switch (naming) {
    case SwiGLUNaming::LLaMA: return {"w1", "w3", "w2"};
    case SwiGLUNaming::Lowercase: return {"w_gate", "w_up", "w_down"};
    case SwiGLUNaming::Capitalized: break;
  }
  return {"W_gate", "W_up", "W_down"};
}

}  // namespace

// ---------------------------------------------------------------------------------------
// FFN

FFN::FFN(int64_t d_model, int64_t d_ff, Activation activation, double dropout, bool bias, FFNNaming naming)
    : d_model_(d_model), d_ff_(d_ff == 0 ? 4 * d_model : d_ff), activation_(activation), dropout_(dropout) {
  check(d_model > 0 && d_ff_ > 0, "FFN: d_model and d_ff must be positive, got ", d_model, " and ", d_ff);
  check(dropout >= 0 && dropout <= 1, "FFN: dropout must be in [0, 1], got ", dropout);
  const char* up_name = naming == FFNNaming::UpDown ? "w_up" : naming == FFNNaming::FC ? "fc1" : "0";
  const char* down_name = naming == FFNNaming::UpDown ? "w_down" : naming == FFNNaming::FC ? "fc2" : "2";
  up_ = register_module(up_name, std::make_shared<Linear>(d_model_, d_ff_, bias));
  down_ = register_module(down_name, std::make_shared<Linear>(d_ff_, d_model_, bias));
}

FFN::FFN(const MLPSpec& spec, const SublayerContext& ctx)
    : FFN(ctx.d_model, spec.d_ff, spec.activation, 0.0, spec.bias, spec.naming) {}

// x: [..., d_model] -> [..., d_model]
// NOTE: hand-written FFNs named w_up/w_down are sometimes coded as relu(w_down(w_up(x))):
// no activation between the projections (so the two Linears collapse into one) and a ReLU on
// the output. That is a slip; this is the standard down(act(up(x))) of the original
// Transformer (Vaswani et al. 2017) and of PyTorch's nn.TransformerEncoderLayer.
Tensor FFN::forward(const Tensor& x) const {
  check_input(x, d_model_, str_cat("FFN(d_model=", d_model_, ", d_ff=", d_ff_, ")"));
  Tensor h = nn::activation((*up_)(x), activation_);
  if (dropout_ > 0) h = xg::dropout(h, dropout_, is_training());
  return (*down_)(h);
}

std::string FFN::extra_repr() const {
  return str_cat("d_model=", d_model_, ", d_ff=", d_ff_, ", activation=", activation_name(activation_), ", dropout=", dropout_,
             ", bias=", up_->bias().defined() ? "true" : "false");
}

// ---------------------------------------------------------------------------------------
// SwiGLU

// NOTE: computed in double precision as the Python int(8 / 3 * d_model) of common SwiGLU code,
// which LLaMA writes int(2 * 4 * d / 3); both round up to the same multiple of 256.
int64_t SwiGLU::default_d_ff(int64_t d_model, int64_t multiple_of) {
  check(d_model > 0 && multiple_of > 0, "SwiGLU::default_d_ff: d_model and multiple_of must be positive, got ",
        d_model, " and ", multiple_of);
  int64_t d_ff = static_cast<int64_t>(8.0 / 3.0 * static_cast<double>(d_model));
  d_ff = (d_ff + multiple_of - 1) / multiple_of * multiple_of;
  return std::max(d_ff, d_model);
}

SwiGLU::SwiGLU(int64_t d_model, int64_t d_ff, bool bias, SwiGLUNaming naming)
    : d_model_(d_model), d_ff_(d_ff) {
  check(d_model > 0 && d_ff >= 0, "SwiGLU: d_model must be positive and d_ff non-negative (0 = default), got ",
        d_model, " and ", d_ff);
  if (d_ff_ == 0) d_ff_ = default_d_ff(d_model);
  // Registered gate, up, down, the order SwiGLU classes are usually written in, so that
  // named_parameters() walks in the same order as theirs.
  const GatedNames n = gated_names(naming);
  gate_ = register_module(n.gate, std::make_shared<Linear>(d_model_, d_ff_, bias));
  up_ = register_module(n.up, std::make_shared<Linear>(d_model_, d_ff_, bias));
  down_ = register_module(n.down, std::make_shared<Linear>(d_ff_, d_model_, bias));
}

SwiGLU::SwiGLU(const SwiGLUSpec& spec, const SublayerContext& ctx) : SwiGLU(ctx.d_model, spec.d_ff, spec.bias, spec.naming) {}

// x: [..., d_model] -> [..., d_model]
Tensor SwiGLU::forward(const Tensor& x) const {
  check_input(x, d_model_, str_cat("SwiGLU(d_model=", d_model_, ", d_ff=", d_ff_, ")"));
  return (*down_)(swiglu((*gate_)(x), (*up_)(x)));  // one fused silu(gate) * up
}

std::string SwiGLU::extra_repr() const {
  return str_cat("d_model=", d_model_, ", d_ff=", d_ff_, ", bias=", gate_->bias().defined() ? "true" : "false");
}

// ---------------------------------------------------------------------------------------
// GeGLU

GeGLU::GeGLU(const GeGLUSpec& spec, const SublayerContext& ctx)
    : d_model_(ctx.d_model), d_ff_(spec.d_ff > 0 ? spec.d_ff : SwiGLU::default_d_ff(ctx.d_model)),
      activation_(spec.activation) {
  check(d_model_ > 0, "GeGLU: d_model must be positive, got ", d_model_);
  const GatedNames n = gated_names(spec.naming);
  gate_ = register_module(n.gate, std::make_shared<Linear>(d_model_, d_ff_, spec.bias));
  up_ = register_module(n.up, std::make_shared<Linear>(d_model_, d_ff_, spec.bias));
  down_ = register_module(n.down, std::make_shared<Linear>(d_ff_, d_model_, spec.bias));
}

// x: [..., d_model] -> [..., d_model]
Tensor GeGLU::forward(const Tensor& x) const {
  check_input(x, d_model_, str_cat("GeGLU(d_model=", d_model_, ", d_ff=", d_ff_, ")"));
  return (*down_)(nn::activation((*gate_)(x), activation_) * (*up_)(x));
}

std::string GeGLU::extra_repr() const {
  return str_cat("d_model=", d_model_, ", d_ff=", d_ff_, ", activation=", activation_name(activation_),
                 ", bias=", gate_->bias().defined() ? "true" : "false");
}

// ---------------------------------------------------------------------------------------
// MoE

MoE::MoE(const MoESpec& spec, const SublayerContext& ctx) : spec_(spec), d_model_(ctx.d_model), d_ff_(spec.d_ff) {
  const int64_t d = d_model_;
  check(d > 0, "MoE: d_model must be positive, got ", d);
  check(spec.d_ff >= 0, "MoE: d_ff must be non-negative (0 = default), got ", spec.d_ff);
  check(spec.num_experts > 0, "MoE: num_experts must be positive, got ", spec.num_experts);
  check(spec.top_k > 0, "MoE: top_k must be positive, got ", spec.top_k);
  check(spec.top_k <= spec.num_experts, "MoE: top_k ", spec.top_k, " exceeds num_experts ", spec.num_experts);
  if (d_ff_ == 0) d_ff_ = spec.expert == ExpertKind::FFN ? 4 * d : SwiGLU::default_d_ff(d);
  router_ = register_module("router", std::make_shared<Linear>(d, spec.num_experts, false));
  experts_ = register_module("experts", std::make_shared<ModuleList<FeedForward>>());
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    if (spec.expert == ExpertKind::FFN)
      experts_->push_back(std::make_shared<FFN>(d, d_ff_, spec.activation, 0.0, true, FFNNaming::Sequential));
    else
      experts_->push_back(std::make_shared<SwiGLU>(d, d_ff_, false, spec.swiglu_naming));
  }
}

// x: [..., C] -> out [..., C]; with T tokens, E experts, k = top_k:
//   logits = router(x) [T, E];  (s, idx) = topk(logits, k);  w = softmax(s) [T, k]
//   out_t = sum_j w[t, j] * expert_{idx[t, j]}(x_t)
// Tokens are grouped by expert (index_select), each expert runs once on its tokens, and the
// weighted outputs are added back in place of their tokens (index_add).
// NOTE: as the usual hand-written MoE does (softmax(topk(logits).values)), the weights are a
// softmax over the k selected logits. That equals Mixtral's softmax over all experts
// renormalised over the top k; Switch/GShard/DeepSeek weight by the un-renormalised full
// softmax instead. With top_k = 1 every weight is 1 here, so the router learns only from the
// aux loss.
//
// Load-balancing loss (Switch Transformer, Fedus et al. 2021, eq. 4; top-k assignments counted):
//   aux_loss = aux_loss_coef * E * sum_i f_i * P_i
//   f_i = (number of the T*k token->expert assignments that go to expert i) / (T*k)
//   P_i = (1/T) sum_t softmax(logits_t)_i     (softmax over all E experts)
// It is aux_loss_coef when routing is uniform and grows as it concentrates. f is piecewise
// constant (no gradient): the gradient reaches the router through P.
// NOTE: Hugging Face's Mixtral loss divides the counts by T instead of T*k (its value is k
// times this one).
MoEOutput MoE::forward_with_aux(const Tensor& x) const {
  const int64_t C = d_model_, E = spec_.num_experts, K = spec_.top_k;
  check_input(x, C, str_cat("MoE(d_model=", C, ", num_experts=", E, ", top_k=", K, ")"));
  const Tensor xf = reshape(x, {-1, C});  // [T, C]
  const int64_t T = xf.size(0);
  const Tensor logits = (*router_)(xf);  // [T, E]
  const TopK top = topk(logits, K, -1);  // [T, k]
  const Tensor weights = reshape(softmax(top.values, -1), {T * K});

  // Group the T*k assignments by expert (a counting sort, keeping token order within an
  // expert, as a loop over experts with torch.where(indices == i) does).
  const int64_t* idx = top.indices.data<int64_t>();
  std::vector<int64_t> start(static_cast<std::size_t>(E + 1), 0);
  for (int64_t a = 0; a < T * K; ++a) ++start[static_cast<std::size_t>(idx[a] + 1)];
  for (int64_t e = 0; e < E; ++e) start[static_cast<std::size_t>(e + 1)] += start[static_cast<std::size_t>(e)];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  std::vector<int64_t> token(static_cast<std::size_t>(T * K)), slot(static_cast<std::size_t>(T * K));
  for (int64_t a = 0; a < T * K; ++a) {
    const auto pos = static_cast<std::size_t>(fill[static_cast<std::size_t>(idx[a])]++);
    token[pos] = a / K;
    slot[pos] = a;
  }

  Tensor out = zeros({T, C}, x.dtype());
  std::vector<Tensor> pieces;
  for (int64_t e = 0; e < E; ++e) {
    const auto b = start[static_cast<std::size_t>(e)], n = start[static_cast<std::size_t>(e + 1)] - b;
    if (n == 0) continue;
    const Tensor tok = from_vector(std::vector<int64_t>(token.begin() + b, token.begin() + b + n), {n});
    pieces.push_back((*(*experts_)[static_cast<std::size_t>(e)])(index_select(xf, 0, tok)));  // [n, C]
  }
  if (!pieces.empty()) {
    const Tensor w = index_select(weights, 0, from_vector(slot, {T * K}));  // [T*k], expert-major
    const Tensor src = xg::cat(pieces, int64_t{0}) * unsqueeze(w, -1);      // [T*k, C]
    out = index_add(out, 0, from_vector(token, {T * K}), src);
  }

  std::vector<double> frac(static_cast<std::size_t>(E));
  for (int64_t e = 0; e < E; ++e)
    frac[static_cast<std::size_t>(e)] =
        static_cast<double>(start[static_cast<std::size_t>(e + 1)] - start[static_cast<std::size_t>(e)]) /
        static_cast<double>(T * K);
  const Tensor P = mean(softmax(logits, -1), {0});  // [E]
  const Tensor aux = sum(from_vector(frac, {E}, x.dtype()) * P) * (spec_.aux_loss_coef * static_cast<double>(E));
  return {reshape(out, x.shape()), aux};
}

std::string MoE::extra_repr() const {
  return str_cat("d_model=", d_model_, ", d_ff=", d_ff_, ", num_experts=", spec_.num_experts,
             ", top_k=", spec_.top_k, ", expert=", spec_.expert == ExpertKind::FFN ? "ffn" : "swiglu",
             ", aux_loss_coef=", spec_.aux_loss_coef);
}

// ---------------------------------------------------------------------------------------
// specs

void MLPSpec::validate(const SublayerContext&, const std::string& who) const {
  check(d_ff >= 0, who, ": field 'ffn.d_ff' must be >= 0 (0 = 4 d_model), got ", d_ff);
}
std::shared_ptr<FeedForward> MLPSpec::build(const SublayerContext& ctx) const {
  return std::make_shared<FFN>(*this, ctx);
}
std::optional<DenseFFNShape> MLPSpec::dense_shape(const SublayerContext& ctx) const {
  return DenseFFNShape{d_ff > 0 ? d_ff : 4 * ctx.d_model, false, activation_name(activation), bias};
}

void SwiGLUSpec::validate(const SublayerContext&, const std::string& who) const {
  check(d_ff >= 0, who, ": field 'ffn.d_ff' must be >= 0 (0 = SwiGLU's default), got ", d_ff);
}
std::shared_ptr<FeedForward> SwiGLUSpec::build(const SublayerContext& ctx) const {
  return std::make_shared<SwiGLU>(*this, ctx);
}
std::optional<DenseFFNShape> SwiGLUSpec::dense_shape(const SublayerContext& ctx) const {
  return DenseFFNShape{d_ff > 0 ? d_ff : SwiGLU::default_d_ff(ctx.d_model), true, "silu", bias};
}

void GeGLUSpec::validate(const SublayerContext&, const std::string& who) const {
  check(d_ff >= 0, who, ": field 'ffn.d_ff' must be >= 0 (0 = SwiGLU's default), got ", d_ff);
  check(activation != Activation::ReLU, who, ": field 'ffn.activation' must be \"gelu\" or \"gelu_tanh\", got \"relu\"");
}
std::shared_ptr<FeedForward> GeGLUSpec::build(const SublayerContext& ctx) const {
  return std::make_shared<GeGLU>(*this, ctx);
}
std::optional<DenseFFNShape> GeGLUSpec::dense_shape(const SublayerContext& ctx) const {
  return DenseFFNShape{d_ff > 0 ? d_ff : SwiGLU::default_d_ff(ctx.d_model), true, activation_name(activation), bias};
}

void MoESpec::validate(const SublayerContext&, const std::string& who) const {
  check(d_ff >= 0, who, ": field 'ffn.d_ff' must be >= 0 (0 = the expert kind's default), got ", d_ff);
  check(num_experts > 0, who, ": field 'ffn.num_experts' must be positive, got ", num_experts);
  check(top_k > 0 && top_k <= num_experts, who, ": field 'ffn.top_k' must be in [1, num_experts = ", num_experts,
        "], got ", top_k);
  check(aux_loss_coef >= 0, who, ": field 'ffn.aux_loss_coef' must be >= 0, got ", aux_loss_coef);
}
std::shared_ptr<FeedForward> MoESpec::build(const SublayerContext& ctx) const {
  return std::make_shared<MoE>(*this, ctx);
}

}  // namespace xg::nn

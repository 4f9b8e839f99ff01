// Admin's Post-LN decoder: the forward with per-sublayer residual scales and their profiling.
#include "experiments/admin.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "nn/position.hpp"

namespace xg::experiments {

namespace {
nn::LMConfig admin_config(nn::LMConfig c) {
  c.block.norm_position = nn::NormPosition::Post;
  c.final_norm = false;
  return c;
}
double variance(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}
}  // namespace

AdminLM::AdminLM(const nn::LMConfig& config) : lm_(std::make_shared<nn::DecoderLM>(admin_config(config))) {
  check(config.block.position == nn::PositionKind::Learned || config.block.position == nn::PositionKind::None,
        "AdminLM: supports learned or no positions, got ", nn::position_kind_name(config.block.position));
  const int64_t C = config.block.d_model;
  for (int64_t i = 0; i < 2 * config.n_layers; ++i) {
    Tensor w = ones({C});
    w.requires_grad_();
    omega_.push_back(w);
  }
}

Tensor AdminLM::run(const Tensor& tokens, std::vector<double>* vars) const {
  Tensor h = lm_->tok_embeddings()->forward(tokens);  // [B, T, C]
  if (auto learned = std::dynamic_pointer_cast<nn::LearnedPositionalEmbedding>(lm_->pos())) h = learned->forward(h, 0);
  if (vars) vars->push_back(variance(h));
  const AttnMask mask = AttnMask::causal_mask();
  std::size_t k = 0;
  auto sub = [&](const nn::Norm& norm, const Tensor& x, const Tensor& f) {
    if (vars) {
      vars->push_back(variance(f));
      ++k;
      return norm.forward(x + f);  // the profiling pass is Post-LN
    }
    return norm.forward(x * omega_[k++] + f);
  };
  for (std::size_t i = 0; i < lm_->layers()->size(); ++i) {
    const nn::TransformerBlock& b = *(*lm_->layers())[i];
    h = sub(*b.norm1(), h, b.attention()->forward(h, mask, nullptr, 0));
    h = sub(*b.norm2(), h, b.ffn()->forward(h));
  }
  return lm_->output() ? lm_->output()->forward(h) : linear(h, lm_->tok_embeddings()->weight());
}

std::vector<double> AdminLM::profile(const Tensor& tokens) {
  std::vector<double> vars;
  {
    NoGradGuard no_grad;
    run(tokens, &vars);
  }
  double acc = 0;
  for (std::size_t i = 0; i < omega_.size(); ++i) {
    acc += vars[i];  // Var x_0 + Var f_1 + ... + Var f_{i}: the sum over j < i+1
    NoGradGuard no_grad;
    omega_[i].fill_(std::sqrt(acc));
  }
  return vars;
}

Tensor AdminLM::forward(const Tensor& tokens) const { return run(tokens, nullptr); }

std::vector<Tensor> AdminLM::parameters() const {
  std::vector<Tensor> ps = lm_->parameters();
  ps.insert(ps.end(), omega_.begin(), omega_.end());
  return ps;
}

}  // namespace xg::experiments

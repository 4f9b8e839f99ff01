// Linear, Embedding and Dropout modules (torch.nn's, with its parameter names and init).
#pragma once

#include "autograd/random.hpp"
#include "nn/module.hpp"

namespace xg::nn {

// A term added to a Linear's output: y = x W^T + b + delta(x). LoRA (finetune/lora.hpp)
// implements it; an adapter registers its own parameters as children of the Linear it is
// attached to, so they appear under the Linear's dotted name. It computes the whole output,
// so that it can be one op whose graph keeps y alone, not x W^T + b and delta beside it.
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual bool active() const = 0;  // false: the Linear's forward is x W^T + b (disabled, merged)
  // x: [..., in], weight: [out, in], bias: [out] or undefined -> x W^T + b + delta(x), [..., out]
  virtual Tensor forward(const Tensor& x, const Tensor& weight, const Tensor& bias) const = 0;
};

// y = x W^T + b, weight [out, in]. Init as nn.Linear: kaiming_uniform(a = sqrt 5) for the
// weight (= U(+-1/sqrt(in))), U(+-1/sqrt(in)) for the bias.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Dtype dtype = kFloat32);
  Tensor forward(const Tensor& x) const override;  // x: [..., in] -> [..., out]
  Tensor weight() const { return weight_; }
  Tensor bias() const { return bias_; }  // undefined without bias
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;

  // The adapter added to forward's output (null: none, forward is the plain x W^T + b).
  const std::shared_ptr<LinearAdapter>& adapter() const { return adapter_; }
  void set_adapter(std::shared_ptr<LinearAdapter> adapter) { adapter_ = std::move(adapter); }
  // forward is the plain x W^T + b: no adapter, or one that is not active.
  bool plain() const { return !adapter_ || !adapter_->active(); }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
  std::shared_ptr<LinearAdapter> adapter_;
};

// Whether `layers` (plain Linears with the same in_features, all with a bias or none) can run
// side by side into one output (linear_stacked).
bool stackable(const std::vector<const Linear*>& layers);

// x [..., in] -> [..., sum of out_features]: x [W_1; W_2; ...]^T + [b_1; b_2; ...], the
// outputs of `layers` side by side in one tensor (xg::linear_cat: each layer's product writes
// its columns, and backward reads them in place, so no weight or gradient is copied).
// Needs stackable(layers).
// NOTE: a LoRA adapter computes its Linear's whole output, so an adapted layer is not stackable.
Tensor linear_stacked(const Tensor& x, const std::vector<const Linear*>& layers);

// Rows of a [num_embeddings, dim] table, init N(0, 1) as nn.Embedding.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1, Dtype dtype = kFloat32);
  Tensor forward(const Tensor& ids) const override;  // int64 [...] -> [..., dim]
  Tensor weight() const { return weight_; }
  std::string name() const override { return "Embedding"; }
  std::string extra_repr() const override;

 private:
  int64_t num_, dim_, padding_idx_;
  Tensor weight_;
};

// Zeroes with probability p in training mode (scaling the rest by 1/(1-p)); identity in eval.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const override;
  double p() const { return p_; }
  std::string name() const override { return "Dropout"; }
  std::string extra_repr() const override;

 private:
  double p_;
};

}  // namespace xg::nn

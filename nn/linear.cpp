// Linear, Embedding, Dropout.
#include "nn/linear.hpp"

#include <cmath>
#include <cstring>

#include "autograd/elementwise.hpp"
#include "autograd/index.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
#include "nn/init.hpp"

namespace xg::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Dtype dtype)
    : in_(in_features), out_(out_features) {
  check(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
        in_features, " and ", out_features);
  Tensor w = empty({out_features, in_features}, dtype);
  init::kaiming_uniform_(w, std::sqrt(5.0));
  weight_ = register_parameter("weight", w);
  if (bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    Tensor b = empty({out_features}, dtype);
    init::uniform_(b, -bound, bound);
    bias_ = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  check(x.dim() >= 1 && x.size(-1) == in_, "Linear(in_features=", in_, "): expected input [..., ", in_, "], got ",
        shape_str(x.shape()));
  if (adapter_ && adapter_->active()) return adapter_->forward(x, weight_, bias_);
  return linear(x, weight_, bias_);
}

bool stackable(const std::vector<const Linear*>& layers) {
  if (layers.empty()) return false;
  const Linear& first = *layers.front();
  for (const Linear* l : layers)
    if (!l->plain() || l->in_features() != first.in_features() || l->bias().defined() != first.bias().defined() ||
        l->weight().dtype() != first.weight().dtype() ||
        is_blocked(l->weight().dtype()))  // q8_0, q4_0: one product each
      return false;
  return true;
}

Tensor linear_stacked(const Tensor& x, const std::vector<const Linear*>& layers) {
  check(stackable(layers), "linear_stacked: the layers must be plain Linears (no active adapter) with the same ",
        "in_features, all with a bias or none");
  const int64_t in = layers.front()->in_features();
  check(x.dim() >= 1 && x.size(-1) == in, "Linear(in_features=", in, "): expected input [..., ", in, "], got ",
        shape_str(x.shape()));
  std::vector<Tensor> weights, biases;
  for (const Linear* l : layers) {
    weights.push_back(l->weight());
    if (l->bias().defined()) biases.push_back(l->bias());
  }
  return linear_cat(x, weights, biases);
}

std::string Linear::extra_repr() const {
  return str_cat("in_features=", in_, ", out_features=", out_, ", bias=", bias_.defined() ? "true" : "false");
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, Dtype dtype)
    : num_(num_embeddings), dim_(embedding_dim), padding_idx_(padding_idx) {
  check(num_embeddings > 0 && embedding_dim > 0, "Embedding: sizes must be positive, got ", num_embeddings, " and ",
        embedding_dim);
  check(padding_idx < num_embeddings, "Embedding: padding_idx ", padding_idx, " must be below num_embeddings ",
        num_embeddings);
  Tensor w = empty({num_embeddings, embedding_dim}, dtype);
  init::normal_(w);
  if (padding_idx >= 0) {
    // nn.Embedding zeroes the padding row at init.
    Tensor row = zeros({embedding_dim}, dtype);
    std::memcpy(static_cast<char*>(w.raw_data()) + padding_idx * embedding_dim * itemsize(dtype), row.raw_data(),
                static_cast<std::size_t>(embedding_dim) * itemsize(dtype));
  }
  weight_ = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& ids) const {
  check(ids.dtype() == kInt64, "Embedding: ids must be int64, got ", dtype_name(ids.dtype()));
  return embedding(weight_, ids, padding_idx_);
}

std::string Embedding::extra_repr() const {
  return str_cat(num_, ", ", dim_, padding_idx_ >= 0 ? str_cat(", padding_idx=", padding_idx_) : "");
}

Dropout::Dropout(double p) : p_(p) {
  check(p >= 0 && p <= 1, "Dropout: probability must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p_, is_training()); }

std::string Dropout::extra_repr() const { return str_cat("p=", p_); }

}  // namespace xg::nn

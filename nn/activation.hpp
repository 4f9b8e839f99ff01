// Activation functions as modules (torch.nn.ReLU, GELU, SiLU, Tanh, Sigmoid), so that they
// take a place in an nn::Sequential; they hold no parameters.
#pragma once

#include "autograd/elementwise.hpp"
#include "nn/module.hpp"

namespace xg::nn {

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

// The erf form by default (PyTorch's); GeluApprox::Tanh for the tanh approximation.
class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::None) : approximate_(approximate) {}
  Tensor forward(const Tensor& x) const override { return gelu(x, approximate_); }
  std::string name() const override { return "GELU"; }
  std::string extra_repr() const override { return approximate_ == GeluApprox::Tanh ? "approximate=tanh" : ""; }

 private:
  GeluApprox approximate_;
};

class SiLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return silu(x); }
  std::string name() const override { return "SiLU"; }
};

class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return tanh(x); }
  std::string name() const override { return "Tanh"; }
};

class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return sigmoid(x); }
  std::string name() const override { return "Sigmoid"; }
};

}  // namespace xg::nn

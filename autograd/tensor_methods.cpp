// Tensor's PyTorch-style methods: each forwards to the free function of the same name.
#include "autograd/ops.hpp"

namespace xg {

Tensor Tensor::reshape(const Shape& s) const { return xg::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return xg::view(*this, s); }
Tensor Tensor::flatten(int64_t start, int64_t end) const { return xg::flatten(*this, start, end); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return xg::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  check(dim() <= 2, "t: expects a tensor with <= 2 dims, got ", shape_str(shape()), "; use transpose");
  return dim() < 2 ? *this : xg::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return xg::permute(*this, dims); }
Tensor Tensor::unsqueeze(int64_t d) const { return xg::unsqueeze(*this, d); }
Tensor Tensor::squeeze() const { return xg::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return xg::squeeze(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return xg::expand(*this, s); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t len) const { return xg::narrow(*this, d, start, len); }
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return xg::slice(*this, d, start, end, step);
}
Tensor Tensor::sum(int64_t d, bool keepdim) const { return xg::sum(*this, {d}, keepdim); }
Tensor Tensor::mean(int64_t d, bool keepdim) const { return xg::mean(*this, {d}, keepdim); }
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return xg::argmax(*this, d, keepdim); }
Tensor Tensor::argmin(int64_t d, bool keepdim) const { return xg::argmin(*this, d, keepdim); }
Tensor Tensor::sqrt() const { return xg::sqrt(*this); }
Tensor Tensor::abs() const { return xg::abs(*this); }
Tensor Tensor::neg() const { return xg::neg(*this); }
Tensor Tensor::tanh() const { return xg::tanh(*this); }
Tensor Tensor::sigmoid() const { return xg::sigmoid(*this); }
Tensor Tensor::relu() const { return xg::relu(*this); }
const Tensor& Tensor::add_(const Tensor& o, double alpha) const {
  xg::add_(*this, o, alpha);
  return *this;
}
const Tensor& Tensor::mul_(double s) const {
  xg::mul_(*this, s);
  return *this;
}
Tensor Tensor::sum() const { return xg::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return xg::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return xg::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return xg::mean(*this, dims, keepdim); }
Tensor Tensor::exp() const { return xg::exp(*this); }
Tensor Tensor::log() const { return xg::log(*this); }
Tensor Tensor::pow(double e) const { return xg::pow(*this, e); }
Tensor Tensor::matmul(const Tensor& o) const { return xg::matmul(*this, o); }
Tensor Tensor::softmax(int64_t d) const { return xg::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return xg::log_softmax(*this, d); }
Tensor Tensor::masked_fill(const Tensor& m, double v) const { return xg::masked_fill(*this, m, v); }

}  // namespace xg

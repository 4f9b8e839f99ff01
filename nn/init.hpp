// Parameter initialisation, in place, with PyTorch's formulas (torch.nn.init). Values come
// from xgrad's generator (random.hpp), so they follow PyTorch's distributions, not its streams.
#pragma once

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace xg::nn::init {

// While a SkipInitGuard is alive on this thread, the random initialisers below (uniform_,
// normal_ and those built on them: kaiming_*, xavier_*, orthogonal_) leave their tensor as
// it is and draw nothing from a generator: for a model whose every parameter is read from a
// file right after it is built (load_hf, load_pretrained), as transformers skips the init of
// the weights it loads. The fills (zeros_, ones_, constant_) still run; they are cheap.
// NOTE: a module built under the guard holds whatever its buffers held (zeros from a fresh
// mapping, or a freed buffer's values): only for parameters that are all overwritten.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool prev_;
};
bool init_skipped();  // a SkipInitGuard is alive on this thread

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (torch's rule).
std::pair<int64_t, int64_t> fans(const Tensor& t);

void uniform_(Tensor& t, double lo, double hi, Generator* gen = nullptr);
void normal_(Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
void zeros_(Tensor& t);
void ones_(Tensor& t);
void constant_(Tensor& t, double value);
// kaiming_uniform_(a): bound = sqrt(6 / ((1 + a^2) fan_in)); nn.Linear uses a = sqrt(5).
void kaiming_uniform_(Tensor& t, double a = 0, Generator* gen = nullptr);
void xavier_uniform_(Tensor& t, double gain = 1, Generator* gen = nullptr);  // bound = gain sqrt(6/(fan_in+fan_out))
void xavier_normal_(Tensor& t, double gain = 1, Generator* gen = nullptr);   // std = gain sqrt(2/(fan_in+fan_out))

// orthogonal_(gain): t, seen as the matrix [size(0), numel / size(0)], becomes gain times a
// matrix with orthonormal rows or columns (whichever are fewer), as torch.nn.init.orthogonal_:
// a normal draw of that matrix goes through orthogonal_from. Needs >= 2 dims; an empty t is
// left as it is.
void orthogonal_(Tensor& t, double gain = 1, Generator* gen = nullptr);
// The deterministic part of orthogonal_: normal: [rows, cols] (float32 or float64) -> Q of the
// same shape. The taller orientation (normal, or its transpose when rows < cols) is
// factored as Q R, each column j of Q is multiplied by sign(R[j, j]) (which makes Q the one
// with a positive diagonal in R, so it is uniformly distributed: Mezzadri 2007, "How to
// generate random matrices from the classical compact groups"), and Q is transposed back.
// Given the same normal draw, PyTorch's orthogonal_ writes the same matrix.
Tensor orthogonal_from(const Tensor& normal);

}  // namespace xg::nn::init

// Initialisers: each draws a fresh tensor and copies it into t's storage. orthogonal_ is a
// cold path written with xtensor, its QR factorisation from xtensor-blas (LAPACK's geqrf/orgqr).
#include "nn/init.hpp"

#include <xflens/cxxblas/auxiliary/debugmacro.h>  // ASSERT, which xlapack.hpp uses without including
#include <xtensor-blas/xlapack.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/xarray.hpp"

namespace xg::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  check(t.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got ", shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

namespace {
thread_local bool skip_init = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : prev_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = prev_; }
bool init_skipped() { return skip_init; }

void uniform_(Tensor& t, double lo, double hi, Generator* gen) {
  if (!skip_init) t.copy_(uniform(t.shape(), lo, hi, t.dtype(), gen));
}
void normal_(Tensor& t, double mean, double std, Generator* gen) {
  if (!skip_init) t.copy_(normal(t.shape(), mean, std, t.dtype(), gen));
}
void zeros_(Tensor& t) { t.fill_(0); }
void ones_(Tensor& t) { t.fill_(1); }
void constant_(Tensor& t, double value) { t.fill_(value); }

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  const double fan_in = static_cast<double>(fans(t).first);
  const double bound = std::sqrt(6.0 / ((1 + a * a) * fan_in));
  uniform_(t, -bound, bound, gen);
}

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  uniform_(t, -bound, bound, gen);
}

void xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  normal_(t, 0, gain * std::sqrt(2.0 / static_cast<double>(fi + fo)), gen);
}

namespace {

// normal: [rows, cols] -> Q: [rows, cols]; see orthogonal_from.
template <class T>
Tensor orthogonal_q(const Tensor& normal) {
  const bool wide = normal.shape()[0] < normal.shape()[1];
  const xt::xarray<T> x = to_xarray<T>(normal);
  // a: [m, n], m >= n (the wide case is transposed), column-major as LAPACK wants it.
  xt::xtensor<T, 2, xt::layout_type::column_major> a = wide ? xt::xarray<T>(xt::transpose(x)) : x;
  const std::size_t n = a.shape()[1];
  xt::xtensor<T, 1> tau = xt::zeros<T>({n});
  // geqrf: R in a's upper triangle and the Householder vectors below it; orgqr: Q [m, n] in a.
  // (xtensor-blas's LAPACK bindings directly: xt::linalg::qr compiles far slower for the same calls.)
  check(xt::lapack::geqrf(a, tau) == 0, "orthogonal_: LAPACK geqrf failed on ", shape_str(normal.shape()));
  std::vector<T> sign(n);
  for (std::size_t j = 0; j < n; ++j) sign[j] = a(j, j) > 0 ? T(1) : a(j, j) < 0 ? T(-1) : T(0);
  check(xt::lapack::orgqr(a, tau) == 0, "orthogonal_: LAPACK orgqr failed on ", shape_str(normal.shape()));
  // Column j of q times sign(r[j, j]); a zero on r's diagonal zeroes its column, as in torch.
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t j = 0; j < n; ++j) a(i, j) *= sign[j];
  xt::xarray<T> out = a;
  if (wide) out = xt::transpose(out);
  return from_xarray<T>(out);
}

}  // namespace

Tensor orthogonal_from(const Tensor& normal) {
  check(normal.defined(), "orthogonal_from: undefined tensor argument");
  check(normal.dim() == 2, "orthogonal_from: needs a 2-D [rows, cols] matrix, got ", shape_str(normal.shape()));
  if (normal.dtype() == kFloat32) return orthogonal_q<float>(normal);
  check(normal.dtype() == kFloat64, "orthogonal_from: needs float32 or float64, got ", dtype_name(normal.dtype()),
        " ", shape_str(normal.shape()));
  return orthogonal_q<double>(normal);
}

void orthogonal_(Tensor& t, double gain, Generator* gen) {
  check(t.dim() >= 2, "orthogonal_: only tensors with 2 or more dimensions are supported, got ",
        shape_str(t.shape()));
  check(t.dtype() == kFloat32 || t.dtype() == kFloat64, "orthogonal_: needs float32 or float64, got ",
        dtype_name(t.dtype()), " ", shape_str(t.shape()));
  if (t.numel() == 0 || skip_init) return;
  const int64_t rows = t.shape()[0], cols = t.numel() / rows;
  // Q's row-major data read in t's shape, as torch's tensor.view_as(q).copy_(q).
  const Tensor q = orthogonal_from(normal({rows, cols}, 0, 1, t.dtype(), gen)).reshape(t.shape());
  t.copy_(q * gain);
}

}  // namespace xg::nn::init

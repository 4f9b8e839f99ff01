// layer_norm and rms_norm: row kernels over x viewed as [R, C], C the last dim. The forward
// saves mean and rstd = 1 / sqrt(var + eps) of each row (in double); the backward is one
// fused pass per row for dx, dweight and dbias (llm.c's layernorm_backward). Rows run in
// parallel; dweight/dbias are summed into per-block partials combined in block order (or,
// for a few long rows, by column chunks), so the result is the same on any number of threads.
#include "autograd/norm.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/op_util.hpp"
#include "autograd/detail/kernels.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

// The parallel backward sums dweight and dbias over row blocks: at most kMaxBlocks blocks of
// at least kMinBlockRows rows (so the partials stay small beside the rows), a number fixed
// by the shape, not the thread count, so the sums are added in the same order on any
// machine. With fewer rows, column chunks of kColBlock sum over all rows instead.
constexpr int64_t kMaxBlocks = 16;
constexpr int64_t kMinBlockRows = 8;
constexpr int64_t kColBlock = 256;

struct Rows {
  int64_t R = 1, C = 0;  // x viewed as [R, C]
};


// Validates x and the optional [C] parameters of `op`; returns x's [R, C] view.
Rows check_inputs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check(x.dim() >= 1, op, ": expected x with at least 1 dim (it normalises the last dim), got a 0-d tensor");
  check(is_floating(x.dtype()), op, ": expected a float32, float64 or bfloat16 x, got ", dtype_name(x.dtype()), " ",
        shape_str(x.shape()));
  Rows rc;
  rc.C = x.size(-1);
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rc.R *= x.size(d);
  auto check_param = [&](const Tensor& p, const char* what) {
    if (!p.defined()) return;
    check(p.shape() == Shape{rc.C}, op, ": ", what, " must have shape [", rc.C, "] (the last dim of x ",
          shape_str(x.shape()), "), got ", shape_str(p.shape()));
    check(p.dtype() == x.dtype(), op, ": dtype mismatch, x ", dtype_name(x.dtype()), " ", shape_str(x.shape()),
          " and ", what, " ", dtype_name(p.dtype()), " ", shape_str(p.shape()),
          " (xgrad does not promote types; convert one with .to())");
  };
  check_param(weight, "weight");
  check_param(bias, "bias");
  check(std::isfinite(eps) && eps >= 0, op, ": eps must be a finite number >= 0, got ", eps);
  return rc;
}

// The data of an optional [C] parameter, or C copies of `value` when it is undefined.
template <class T>
const T* param_or(const Tensor& p, std::vector<T>& fallback, int64_t C, T value) {
  if (p.defined()) return p.data<T>();
  fallback.assign(static_cast<std::size_t>(C), value);
  return fallback.data();
}

// xhat = (x - mean) * rstd in T, for a row whose mean and rstd are known in double.
// NOTE: x - mean is computed as (x - float(mean)) * rstd - (mean - float(mean)) * rstd: the
// first difference is exact or nearly so, and the second term puts back what rounding the
// mean to T lost. A float32 row with mean 100 and std 0.1 then keeps float32 precision,
// where a plain (x - float(mean)) loses 2 digits (as PyTorch's float32 kernel does).
template <class T>
struct Centering {
  T m, s, d;
  Centering(double mean, double rstd)
      : m(static_cast<T>(mean)), s(static_cast<T>(rstd)), d(static_cast<T>((mean - static_cast<double>(m)) * rstd)) {}
  T xhat(T x) const { return (x - m) * s - d; }
};

// x, out: [R, C]; w, b: [C]; mean, rstd: [R]
template <class T>
void layer_norm_forward(const T* x, const T* w, const T* b, T* out, double* mean, double* rstd, const Rows& rc,
                        double eps) {
  const int64_t R = rc.R, C = rc.C;
#pragma omp parallel for schedule(static) if (R > 1 && R * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * C;
    T* yr = out + r * C;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < C; ++i) s += xr[i];
    const double m = s / static_cast<double>(C);
    double v = 0;  // two passes: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : v)
    for (int64_t i = 0; i < C; ++i) {
      const double d = xr[i] - m;
      v += d * d;
    }
    const double rs = 1 / std::sqrt(v / static_cast<double>(C) + eps);
    mean[r] = m;
    rstd[r] = rs;
    const Centering<T> k(m, rs);
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) yr[i] = k.xhat(xr[i]) * w[i] + b[i];
  }
}

// x, out: [R, C]; w: [C]; rstd: [R]
template <class T>
void rms_norm_forward(const T* x, const T* w, T* out, double* rstd, const Rows& rc, double eps) {
  const int64_t R = rc.R, C = rc.C;
#pragma omp parallel for schedule(static) if (R > 1 && R * C >= kParallelMin)
  for (int64_t r = 0; r < R; ++r) {
    const T* xr = x + r * C;
    T* yr = out + r * C;
    double ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < C; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double rs = 1 / std::sqrt(ss / static_cast<double>(C) + eps);
    rstd[r] = rs;
    const T st = static_cast<T>(rs);
    // LLaMA: (x * rstd).type_as(x) * weight
#pragma omp simd
    for (int64_t i = 0; i < C; ++i) yr[i] = (xr[i] * st) * w[i];
  }
}

// The second pass over one row: dx (when kDx) and the row's contributions to the dweight
// and dbias partials bw, bb. a = mean(dn), c = mean(dn * xhat).
template <class T, bool kDx, bool kDw, bool kDb>
void row_pass(const T* gr, const T* xr, const T* w, Centering<T> k, T a, T c, T* dxr, double* bw, double* bb,
              int64_t C) {
#pragma omp simd
  for (int64_t i = 0; i < C; ++i) {
    const T xh = k.xhat(xr[i]);
    if constexpr (kDx) dxr[i] = k.s * (gr[i] * w[i] - a - xh * c);
    if constexpr (kDw) bw[i] += static_cast<double>(gr[i]) * xh;
    if constexpr (kDb) bb[i] += gr[i];
  }
}

template <class T>
using RowPass = void (*)(const T*, const T*, const T*, Centering<T>, T, T, T*, double*, double*, int64_t);

template <class T>
RowPass<T> pick_row_pass(bool dx, bool dw, bool db) {
  if (dx) {
    if (dw) return db ? &row_pass<T, true, true, true> : &row_pass<T, true, true, false>;
    return db ? &row_pass<T, true, false, true> : &row_pass<T, true, false, false>;
  }
  if (dw) return db ? &row_pass<T, false, true, true> : &row_pass<T, false, true, false>;
  return &row_pass<T, false, false, true>;
}

// a = mean(dn), c = mean(dn * xhat) of one row (dn = g * w), accumulated in double.
template <class T, bool kCentered>
void row_means(const T* gr, const T* xr, const T* w, const Centering<T>& k, int64_t C, T& a, T& c) {
  double sdn = 0, sdnx = 0;
#pragma omp simd reduction(+ : sdn, sdnx)
  for (int64_t i = 0; i < C; ++i) {
    const T dn = gr[i] * w[i];
    sdn += dn;
    sdnx += static_cast<double>(dn) * k.xhat(xr[i]);
  }
  a = kCentered ? static_cast<T>(sdn / static_cast<double>(C)) : T(0);
  c = static_cast<T>(sdnx / static_cast<double>(C));
}

// Backward of both norms (kCentered: layer_norm; else rms_norm, where mean is 0 and there
// is no mean(dn) term). g, x, dx: [R, C]; w, dw, db: [C]; mean, rstd: [R]. Null outputs are
// not computed. With xhat = (x - mean) * rstd and dn = g * w:
//   dx = rstd * (dn - mean(dn) - xhat * mean(dn * xhat)),  dw = sum_rows g * xhat,  db = sum_rows g
template <class T, bool kCentered>
void norm_backward_kernel(const T* g, const T* x, const T* w, const double* mean, const double* rstd, const Rows& rc,
                          T* dx, T* dw, T* db) {
  const int64_t R = rc.R, C = rc.C;
  if (R == 0 || C == 0 || (!dx && !dw && !db)) return;
  const bool parallel = R * C >= kParallelMin;
  const bool params = dw || db;
  auto centering = [&](int64_t r) { return Centering<T>(kCentered ? mean[r] : 0.0, rstd[r]); };

  if (params && parallel && R < 2 * kMinBlockRows) {
    // Few long rows: dx in parallel over rows, then dweight/dbias in parallel over column
    // chunks, each summing its columns over the rows in order (no partials to combine).
    if (dx) {
#pragma omp parallel for schedule(static) if (R > 1)
      for (int64_t r = 0; r < R; ++r) {
        const Centering<T> k = centering(r);
        T a, c;
        row_means<T, kCentered>(g + r * C, x + r * C, w, k, C, a, c);
        row_pass<T, true, false, false>(g + r * C, x + r * C, w, k, a, c, dx + r * C, nullptr, nullptr, C);
      }
    }
    const RowPass<T> pass = pick_row_pass<T>(false, dw != nullptr, db != nullptr);
    const int64_t nchunks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < nchunks; ++t) {
      const int64_t c0 = t * kColBlock, n = std::min(kColBlock, C - c0);
      double bw[kColBlock] = {}, bb[kColBlock] = {};
      for (int64_t r = 0; r < R; ++r)
        pass(g + r * C + c0, x + r * C + c0, w + c0, centering(r), 0, 0, nullptr, bw, bb, n);
      for (int64_t i = 0; i < n; ++i) {
        if (dw) dw[c0 + i] = static_cast<T>(bw[i]);
        if (db) db[c0 + i] = static_cast<T>(bb[i]);
      }
    }
    return;
  }

  // One fused pass per row for dx, dweight and dbias. With parameter gradients, the rows
  // are split into blocks of at least kMinBlockRows, each summing into its own partials.
  const int64_t nblocks = !parallel ? 1 : params ? std::min(kMaxBlocks, R / kMinBlockRows) : R;
  std::vector<double> pw(dw ? static_cast<std::size_t>(nblocks * C) : 0, 0.0);
  std::vector<double> pb(db ? static_cast<std::size_t>(nblocks * C) : 0, 0.0);
  const RowPass<T> pass = pick_row_pass<T>(dx != nullptr, dw != nullptr, db != nullptr);
#pragma omp parallel for schedule(static) if (nblocks > 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    double* bw = dw ? pw.data() + blk * C : nullptr;
    double* bb = db ? pb.data() + blk * C : nullptr;
    for (int64_t r = blk * R / nblocks; r < (blk + 1) * R / nblocks; ++r) {
      const Centering<T> k = centering(r);
      T a = 0, c = 0;
      if (dx) row_means<T, kCentered>(g + r * C, x + r * C, w, k, C, a, c);
      pass(g + r * C, x + r * C, w, k, a, c, dx ? dx + r * C : nullptr, bw, bb, C);
    }
  }
  // Partials combined in block order.
  auto combine = [&](std::vector<double>& p, T* out) {
    for (int64_t blk = 1; blk < nblocks; ++blk)
      for (int64_t i = 0; i < C; ++i) p[static_cast<std::size_t>(i)] += p[static_cast<std::size_t>(blk * C + i)];
    for (int64_t i = 0; i < C; ++i) out[i] = static_cast<T>(p[static_cast<std::size_t>(i)]);
  };
  if (dw) combine(pw, dw);
  if (db) combine(pb, db);
}

// Gradients of in = {x, weight[, bias]} for either norm, given its saved row statistics.
template <bool kCentered>
Grads norm_backward(const Tensor& g, const Grads& in, const Tensor& mean, const Tensor& rstd, const Rows& rc) {
  const Tensor& x = in[0];
  Grads grads(in.size());
  if (wants(in, 0)) grads[0] = empty(x.shape(), x.dtype());
  if (wants(in, 1)) grads[1] = empty({rc.C}, x.dtype());
  if (kCentered && wants(in, 2)) grads[2] = empty({rc.C}, x.dtype());
  dispatch_float(x.dtype(), kCentered ? "layer_norm backward" : "rms_norm backward", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> ones;
    auto ptr = [](Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
    norm_backward_kernel<T, kCentered>(g.data<T>(), x.data<T>(), param_or(in[1], ones, rc.C, T(1)),
                                       kCentered ? mean.data<double>() : nullptr, rstd.data<double>(), rc,
                                       ptr(grads[0]), ptr(grads[1]), kCentered ? ptr(grads[2]) : nullptr);
  });
  return grads;
}

// NOTE: a bf16 norm is the float32 norm of the widened tensors, rounded once to bf16, as
// PyTorch's CPU kernels read bf16 and compute in float32; its backward widens the gradient and
// rounds each input's gradient once. The float32 copy of x is what the backward keeps.
Tensor widened(const Tensor& p) { return p.defined() ? p.to(kFloat32) : Tensor(); }

}  // namespace

// out = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), mean and biased var over the last dim
//   =>  with xhat = (x - mean) * rstd, dn = g * w:
//       dx = rstd * (dn - mean(dn) - xhat * mean(dn * xhat)),  dw = sum_rows g * xhat,  db = sum_rows g
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const Rows rc = check_inputs("layer_norm", x, weight, bias, eps);
  if (x.dtype() == kBFloat16)  // widened, computed in float32, rounded once (widened)
    return layer_norm(x.to(kFloat32), widened(weight), widened(bias), eps).to(kBFloat16);
  Tensor out = empty(x.shape(), x.dtype());
  Tensor mean = empty({rc.R}, kFloat64), rstd = empty({rc.R}, kFloat64);
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> ones, zeros;
    layer_norm_forward(x.data<T>(), param_or(weight, ones, rc.C, T(1)), param_or(bias, zeros, rc.C, T(0)),
                       out.data<T>(), mean.data<double>(), rstd.data<double>(), rc, eps);
  });
  // x stays float32 under autocast: from a bf16 x, x - mean would cancel most of its 8 bits
  // when |mean| is large beside the spread (rms_norm subtracts nothing).
  return record(out, {x, weight, bias}, "layer_norm", saves({0, 1}),
                [mean, rstd, rc](const Tensor& g, const Tensor&, const Grads& in) {
                  return norm_backward<true>(g, in, mean, rstd, rc);
                });
}

// out = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps) over the last dim
//   =>  with xhat = x * rstd, dn = g * w:
//       dx = rstd * (dn - xhat * mean(dn * xhat)),  dw = sum_rows g * xhat
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const Rows rc = check_inputs("rms_norm", x, weight, Tensor(), eps);
  if (x.dtype() == kBFloat16) return rms_norm(x.to(kFloat32), widened(weight), eps).to(kBFloat16);
  Tensor out = empty(x.shape(), x.dtype());
  Tensor rstd = empty({rc.R}, kFloat64);
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> ones;
    rms_norm_forward(x.data<T>(), param_or(weight, ones, rc.C, T(1)), out.data<T>(), rstd.data<double>(), rc, eps);
  });
  return record(out, {x, weight}, "rms_norm", bf16_under_autocast(saves({0, 1}), 0), [rstd, rc](const Tensor& g, const Tensor&, const Grads& in) {
    return norm_backward<false>(g, in, Tensor(), rstd, rc);
  });
}

}  // namespace xg

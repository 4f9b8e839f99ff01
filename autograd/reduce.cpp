// Reductions over any set of dims: sum, mean, var, std, amax/amin, max/min (full and along
// one dim), logsumexp. Every kernel reads the input as [outer, R, inner] (R: the reduced
// elements of one output); a dim set that is not one contiguous block is first copied with
// the reduced dims moved last. Backward spreads the gradient back over the reduced dims.
#include "autograd/reduce.hpp"


#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/broadcast.hpp"
#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/row_kernels.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

constexpr int64_t kReduceChunk = 1 << 13;  // elements per task when one long row is split over threads
constexpr int64_t kReduceBlock = 128;      // columns per task when reducing across rows (inner > 1)

// Where the reduced elements of each output lie.
struct ReducePlan {
  Shape in_shape;
  Shape keep_shape;  // the output's shape with the reduced dims kept as size 1
  Shape out_shape;   // the op's output shape (keep_shape, or without the reduced dims)
  std::vector<int64_t> kept, reduced;  // input dims, ascending
  int64_t count = 1;                   // input elements per output element
  // simple: x is [outer, R, inner] in place. Otherwise the kept dims and the reduced dims
  // interleave; the kernels then run on a copy laid out [outer = kept, R = reduced, inner = 1].
  bool simple = true;
  int64_t outer = 1, R = 1, inner = 1;
};

ReducePlan make_plan(const Shape& shape, const Dims& dims, bool keepdim, const char* op) {
  ReducePlan p;
  p.in_shape = shape;
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t range = std::max<int64_t>(nd, 1);  // a 0-d tensor accepts dim 0 / -1, as in torch
  std::vector<bool> is_red(static_cast<std::size_t>(nd), dims.empty());
  std::vector<bool> seen(static_cast<std::size_t>(range), false);
  for (int64_t d : dims) {
    check(d >= -range && d < range, op, ": dim ", d, " out of range for a ", nd, "-d tensor of shape ",
          shape_str(shape), " (expected a dim in [", -range, ", ", range - 1, "])");
    const int64_t w = d < 0 ? d + range : d;
    check(!seen[static_cast<std::size_t>(w)], op, ": dim ", w, " appears more than once in the dims ",
          shape_str(dims));
    seen[static_cast<std::size_t>(w)] = true;
    if (nd > 0) is_red[static_cast<std::size_t>(w)] = true;
  }
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t n = shape[static_cast<std::size_t>(d)];
    if (is_red[static_cast<std::size_t>(d)]) {
      p.reduced.push_back(d);
      p.count *= n;
      p.keep_shape.push_back(1);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.kept.push_back(d);
      p.keep_shape.push_back(n);
      p.out_shape.push_back(n);
    }
  }
  // One block of reduced dims (size-1 dims do not count) reads in place as [outer, R, inner].
  int64_t first = -1, last = -1;
  for (int64_t d : p.reduced)
    if (shape[static_cast<std::size_t>(d)] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  if (first < 0) {
    p.outer = shape_numel(shape);
    return p;
  }
  for (int64_t d = first; d <= last; ++d)
    if (!is_red[static_cast<std::size_t>(d)] && shape[static_cast<std::size_t>(d)] != 1) p.simple = false;
  if (p.simple) {
    for (int64_t d = 0; d < first; ++d) p.outer *= shape[static_cast<std::size_t>(d)];
    for (int64_t d = first; d <= last; ++d) p.R *= shape[static_cast<std::size_t>(d)];
    for (int64_t d = last + 1; d < nd; ++d) p.inner *= shape[static_cast<std::size_t>(d)];
  } else {
    for (int64_t d : p.kept) p.outer *= shape[static_cast<std::size_t>(d)];
    p.R = p.count;
  }
  return p;
}

// A copy of x with the kept dims first and the reduced dims last (for a non-simple plan).
template <class T>
Tensor reduced_last(const Tensor& x, const ReducePlan& p) {
  std::vector<int64_t> order = p.kept;
  order.insert(order.end(), p.reduced.begin(), p.reduced.end());
  const Shape cs = contiguous_strides(p.in_shape);
  Shape ps, pst;
  for (int64_t d : order) {
    ps.push_back(p.in_shape[static_cast<std::size_t>(d)]);
    pst.push_back(cs[static_cast<std::size_t>(d)]);
  }
  Tensor out = empty(ps, x.dtype());
  const T* src = x.data<T>();
  T* dst = out.data<T>();
  for_each_row<2>(ps, {pst, contiguous_strides(ps)}, true,
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& in) {
                    for (int64_t j = 0; j < n; ++j) dst[off[1] + j] = src[off[0] + j * in[0]];
                  });
  return out;
}

// The reduction functors: init, step (one element), combine (two partial results), row (a
// contiguous row, vectorised), finish (the output value).
template <class T>
struct SumOp {
  using Acc = double;  // float32 and bfloat16 sums accumulate in double
  double divisor = 1;  // mean divides by the count
  Acc init() const { return 0; }
  Acc step(Acc a, T v) const { return a + v; }
  Acc combine(Acc a, Acc b) const { return a + b; }
  Acc row(const T* x, int64_t n) const {
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += x[i];
    return acc;
  }
  T finish(Acc a) const { return static_cast<T>(a / divisor); }
};

// Max (or min) with NaN propagation, as torch.amax.
template <class T, bool kMax>
struct ExtremeOp {
  using Acc = T;
  static T better(T a, T v) { return (v != v || (kMax ? v > a : v < a)) ? v : a; }
  Acc init() const { return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity(); }
  Acc step(Acc a, T v) const { return a != a ? a : better(a, v); }
  Acc combine(Acc a, Acc b) const { return step(a, b); }
  Acc row(const T* x, int64_t n) const {
    T m = init();
    int nan = 0;
    if (kMax) {
#pragma omp simd reduction(max : m) reduction(| : nan)
      for (int64_t i = 0; i < n; ++i) {
        m = x[i] > m ? x[i] : m;
        nan |= x[i] != x[i];
      }
    } else {
#pragma omp simd reduction(min : m) reduction(| : nan)
      for (int64_t i = 0; i < n; ++i) {
        m = x[i] < m ? x[i] : m;
        nan |= x[i] != x[i];
      }
    }
    return nan ? std::numeric_limits<T>::quiet_NaN() : m;
  }
  T finish(Acc a) const { return a; }
};

// out[o, i] = finish(reduce over r of x[o, r, i]); x: [O, R, I] -> out: [O, I]
template <class T, class Op>
void reduce_layout(const T* x, int64_t O, int64_t R, int64_t I, T* out, const Op& op) {
  using Acc = typename Op::Acc;
  const int64_t work = O * R * I;
  if (O * I == 0) return;
  if (I == 1) {
    if (O >= 16 || R < 2 * kReduceChunk) {
      // Contiguous rows, one per task.
#pragma omp parallel for schedule(static) if (O > 1 && work >= kParallelMin)
      for (int64_t o = 0; o < O; ++o) out[o] = op.finish(op.row(x + o * R, R));
      return;
    }
    // Few long rows: split each into chunks; partials combine in a fixed order (deterministic).
    const int64_t nc = (R + kReduceChunk - 1) / kReduceChunk;
    std::vector<Acc> part(static_cast<std::size_t>(O * nc));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < O * nc; ++t) {
      const int64_t o = t / nc, c = t % nc;
      part[static_cast<std::size_t>(t)] = op.row(x + o * R + c * kReduceChunk, std::min(kReduceChunk, R - c * kReduceChunk));
    }
    for (int64_t o = 0; o < O; ++o) {
      Acc acc = op.init();
      for (int64_t c = 0; c < nc; ++c) acc = op.combine(acc, part[static_cast<std::size_t>(o * nc + c)]);
      out[o] = op.finish(acc);
    }
    return;
  }
  // Reducing across rows: each task owns a block of columns and walks its rows, so the inner
  // loop runs over contiguous columns. When there are few blocks, R is split as well.
  const int64_t nb = (I + kReduceBlock - 1) / kReduceBlock;
  int64_t nc = 1;
  if (work >= kParallelMin && O * nb < 16) nc = std::min<int64_t>(R, std::max<int64_t>(1, 16 / (O * nb)));
  const int64_t rlen = nc > 1 ? (R + nc - 1) / nc : R;
  if (nc > 1) nc = (R + rlen - 1) / rlen;
  std::vector<Acc> part(nc > 1 ? static_cast<std::size_t>(nc * O * I) : 0);
#pragma omp parallel for schedule(static) if (work >= kParallelMin)
  for (int64_t t = 0; t < nc * O * nb; ++t) {
    const int64_t c = t / (O * nb), o = (t / nb) % O, b = t % nb;
    const int64_t c0 = b * kReduceBlock, n = std::min(kReduceBlock, I - c0);
    const int64_t r0 = c * rlen, r1 = std::min(R, r0 + rlen);
    Acc acc[kReduceBlock];
    for (int64_t i = 0; i < n; ++i) acc[i] = op.init();
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + (o * R + r) * I + c0;
      for (int64_t i = 0; i < n; ++i) acc[i] = op.step(acc[i], row[i]);
    }
    if (nc == 1) {
      for (int64_t i = 0; i < n; ++i) out[o * I + c0 + i] = op.finish(acc[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) part[static_cast<std::size_t>((c * O + o) * I + c0 + i)] = acc[i];
    }
  }
  if (nc == 1) return;
  for (int64_t j = 0; j < O * I; ++j) {
    Acc acc = op.init();
    for (int64_t c = 0; c < nc; ++c) acc = op.combine(acc, part[static_cast<std::size_t>(c * O * I + j)]);
    out[j] = op.finish(acc);
  }
}

// Runs a reduction functor over x by the plan; the result has the plan's output shape.
template <class T, class Op>
Tensor reduce_with(const Tensor& x, const ReducePlan& p, const Op& op) {
  Tensor out = empty(p.out_shape, x.dtype());
  Tensor src = p.simple ? x : reduced_last<T>(x, p);
  reduce_layout<T>(src.data<T>(), p.outer, p.R, p.inner, out.data<T>(), op);
  return out;
}

template <bool kReadX, class T>
inline T load(const T* p, int64_t i) {
  if constexpr (kReadX) {
    return p[i];
  } else {
    (void)p;
    (void)i;
    return T(0);
  }
}

// dx[k] = f(x[k], a[j], b[j]) over the input's shape, where j is the output element that
// input element k was reduced into; a and b hold one value per output element (any shape
// with the output's numel). x is read only when kReadX.
template <class T, bool kReadX, class F>
Tensor spread(const ReducePlan& p, const Tensor& x, const Tensor& a, const Tensor& b, F f) {
  Tensor dx = empty(p.in_shape, a.dtype());
  const T* px = kReadX ? x.data<T>() : nullptr;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pd = dx.data<T>();
  const int64_t n = dx.numel();
  if (!p.simple) {
    for_each_row<2>(p.in_shape, {contiguous_strides(p.in_shape), broadcast_strides(p.keep_shape, p.in_shape)}, true,
                    [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& in) {
                      for (int64_t k = 0; k < len; ++k) {
                        const int64_t j = off[1] + k * in[1];
                        pd[off[0] + k] = f(load<kReadX>(px, off[0] + k), pa[j], pb[j]);
                      }
                    });
    return dx;
  }
  const int64_t O = p.outer, R = p.R, I = p.inner;
  if (I == 1) {
    if (O > 1 && (O >= 16 || R < kParallelMin)) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (int64_t o = 0; o < O; ++o) {
        const T aj = pa[o], bj = pb[o];
        for (int64_t r = 0; r < R; ++r) pd[o * R + r] = f(load<kReadX>(px, o * R + r), aj, bj);
      }
    } else {
      for (int64_t o = 0; o < O; ++o) {
        const T aj = pa[o], bj = pb[o];
#pragma omp parallel for simd schedule(static) if (R >= kParallelMin)
        for (int64_t r = 0; r < R; ++r) pd[o * R + r] = f(load<kReadX>(px, o * R + r), aj, bj);
      }
    }
    return dx;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t row = 0; row < O * R; ++row) {
    const int64_t base = row * I, j0 = (row / R) * I;
    for (int64_t i = 0; i < I; ++i) pd[base + i] = f(load<kReadX>(px, base + i), pa[j0 + i], pb[j0 + i]);
  }
  return dx;
}

void check_float(const Tensor& x, const char* op) {
  check(is_floating(x.dtype()), op, ": expected a float32, float64 or bfloat16 tensor, got ", dtype_name(x.dtype()));
}

// sum (divisor 1) or mean (divisor count), with the backward g / divisor spread back.
Tensor sum_or_mean(const Tensor& x, const Dims& dims, bool keepdim, bool is_mean) {
  const char* op = is_mean ? "mean" : "sum";
  check_float(x, op);
  ReducePlan p = make_plan(x.shape(), dims, keepdim, op);
  const double divisor = is_mean ? static_cast<double>(p.count) : 1.0;
  Tensor out = dispatch_floating(x.dtype(), op, [&](auto tag) {  // bf16 sums accumulate in double too
    using T = decltype(tag);
    return reduce_with<T>(x, p, SumOp<T>{divisor});
  });
  return record(out, {x}, op, saves_nothing(), [p, divisor](const Tensor& g, const Tensor&, const Grads&) {
    return dispatch_floating(g.dtype(), "sum backward", [&](auto tag) {
      using T = decltype(tag);
      if (divisor == 1) return Grads{spread<T, false>(p, Tensor(), g, g, [](T, T gj, T) { return gj; })};
      const T inv = static_cast<T>(1 / divisor);
      return Grads{spread<T, false>(p, Tensor(), g, g, [inv](T, T gj, T) { return gj * inv; })};
    });
  });
}

// amax/amin, and the full max/min (which also route the gradient to NaNs, as torch.max does).
Tensor extreme(const Tensor& x, const Dims& dims, bool keepdim, bool is_max, const char* op, bool nan_ties) {
  check_float(x, op);
  ReducePlan p = make_plan(x.shape(), dims, keepdim, op);
  check(p.count > 0 || shape_numel(p.out_shape) == 0, op, ": cannot reduce over a dim of size 0 (input shape ",
        shape_str(x.shape()), "); the ", is_max ? "maximum" : "minimum", " of no elements is undefined");
  Tensor out = dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (is_max) return reduce_with<T>(x, p, ExtremeOp<T, true>{});
    return reduce_with<T>(x, p, ExtremeOp<T, false>{});
  });
  // The gradient is shared evenly among the elements equal to the extreme (ties).
  return record(out, {x}, op, [p, nan_ties](const Tensor& g, const Tensor& out, const Grads& in) {
    return dispatch_float(g.dtype(), "amax backward", [&](auto tag) {
      using T = decltype(tag);
      Tensor hit = spread<T, true>(p, in[0], out, out, [nan_ties](T xi, T oj, T) {
        return T(xi == oj || (nan_ties && xi != xi && oj != oj));
      });
      Tensor ties = reduce_with<T>(hit, p, SumOp<T>{});
      if (nan_ties)  // torch.max: masked_fill(mask, g / count)
        return Grads{spread<T, true>(p, hit, g, ties, [](T h, T gj, T cj) { return h != 0 ? gj / cj : T(0); })};
      // torch.amax: (g / count) * mask
      return Grads{spread<T, true>(p, hit, g, ties, [](T h, T gj, T cj) { return gj / cj * h; })};
    });
  });
}

// values/indices of the first extreme along one dim; x: [O, R, I] -> [O, I]
template <class T, bool kMax>
void arg_extreme(const T* x, int64_t O, int64_t R, int64_t I, T* val, int64_t* idx) {
  // NaN counts as the extreme (torch.max propagates it); the first one wins.
  auto better = [](T v, T best) { return best == best && (v != v || (kMax ? v > best : v < best)); };
  const int64_t work = O * R * I;
  if (I == 1) {
    // Two vectorised passes per row: the extreme, then the first index holding it.
    const ExtremeOp<T, kMax> op;
#pragma omp parallel for schedule(static) if (O > 1 && work >= kParallelMin)
    for (int64_t o = 0; o < O; ++o) {
      const T* row = x + o * R;
      const T best = op.row(row, R);
      int64_t bi = 0;
      if (best != best) {
        while (row[bi] == row[bi]) ++bi;
      } else {
        while (row[bi] != best) ++bi;
      }
      val[o] = best;
      idx[o] = bi;
    }
    return;
  }
  const int64_t nb = (I + kReduceBlock - 1) / kReduceBlock;
#pragma omp parallel for schedule(static) if (work >= kParallelMin)
  for (int64_t t = 0; t < O * nb; ++t) {
    const int64_t o = t / nb, c0 = (t % nb) * kReduceBlock, n = std::min(kReduceBlock, I - c0);
    T best[kReduceBlock];
    int64_t bi[kReduceBlock];
    for (int64_t i = 0; i < n; ++i) {
      best[i] = x[o * R * I + c0 + i];
      bi[i] = 0;
    }
    for (int64_t r = 1; r < R; ++r) {
      const T* row = x + (o * R + r) * I + c0;
      for (int64_t i = 0; i < n; ++i)
        if (better(row[i], best[i])) {
          best[i] = row[i];
          bi[i] = r;
        }
    }
    for (int64_t i = 0; i < n; ++i) {
      val[o * I + c0 + i] = best[i];
      idx[o * I + c0 + i] = bi[i];
    }
  }
}

ValuesIndices extreme_dim(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* op = is_max ? "max" : "min";
  check_float(x, op);
  ReducePlan p = make_plan(x.shape(), {dim}, keepdim, op);
  check(p.count > 0 || shape_numel(p.out_shape) == 0, op, ": cannot reduce over dim ", dim,
        " of size 0 (input shape ", shape_str(x.shape()), ")");
  Tensor values = empty(p.out_shape, x.dtype());
  Tensor indices = empty(p.out_shape, kInt64);
  if (values.numel() > 0) {
    dispatch_float(x.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      if (is_max)
        arg_extreme<T, true>(x.data<T>(), p.outer, p.R, p.inner, values.data<T>(), indices.data<int64_t>());
      else
        arg_extreme<T, false>(x.data<T>(), p.outer, p.R, p.inner, values.data<T>(), indices.data<int64_t>());
    });
  }
  // out[o, i] = x[o, idx[o, i], i]   =>   dx[o, idx[o, i], i] = g[o, i], 0 elsewhere
  Tensor saved = needs_grad({x}) ? indices : Tensor();
  values = record(values, {x}, op, saves_nothing(), [p, saved](const Tensor& g, const Tensor&, const Grads&) {
    Tensor dx = zeros(p.in_shape, g.dtype());
    dispatch_float(g.dtype(), "max backward", [&](auto tag) {
      using T = decltype(tag);
      const T* pg = g.data<T>();
      const int64_t* pi = saved.data<int64_t>();
      T* pd = dx.data<T>();
      const int64_t R = p.R, I = p.inner;
      for (int64_t j = 0, n = g.numel(); j < n; ++j) pd[((j / I) * R + pi[j]) * I + j % I] = pg[j];
    });
    return Grads{dx};
  });
  return {values, indices};
}

// out = m + log(sum exp(x - m)), m the row max (0 where it is infinite); x: [O, R, I] -> [O, I]
template <class T>
void logsumexp_layout(const T* x, int64_t O, int64_t R, int64_t I, T* out) {
  const ExtremeOp<T, true> mx;
  auto shift = [](T m) { return std::isinf(m) ? T(0) : m; };
  const int64_t work = O * R * I;
  if (I == 1) {
#pragma omp parallel for schedule(static) if (O > 1 && work >= kParallelMin)
    for (int64_t o = 0; o < O; ++o) {
      const T* row = x + o * R;
      const T m = shift(mx.row(row, R));
      out[o] = static_cast<T>(std::log(sum_exp_shifted(row, m, R)) + m);
    }
    return;
  }
  const int64_t nb = (I + kReduceBlock - 1) / kReduceBlock;
#pragma omp parallel for schedule(static) if (work >= kParallelMin)
  for (int64_t t = 0; t < O * nb; ++t) {
    const int64_t o = t / nb, c0 = (t % nb) * kReduceBlock, n = std::min(kReduceBlock, I - c0);
    T m[kReduceBlock];
    double s[kReduceBlock];
    for (int64_t i = 0; i < n; ++i) {
      m[i] = mx.init();
      s[i] = 0;
    }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < n; ++i) m[i] = mx.step(m[i], x[(o * R + r) * I + c0 + i]);
    for (int64_t i = 0; i < n; ++i) m[i] = shift(m[i]);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < n; ++i) s[i] += std::exp(x[(o * R + r) * I + c0 + i] - m[i]);
    for (int64_t i = 0; i < n; ++i) out[o * I + c0 + i] = static_cast<T>(std::log(s[i]) + m[i]);
  }
}

// dx[o, r] = g[o] * exp(x[o, r] - out[o]) for contiguous rows (the reduced dims last), vectorised.
template <class T>
Tensor logsumexp_backward_rows(const Tensor& x, const Tensor& g, const Tensor& out, int64_t O, int64_t R) {
  using B = xsimd::batch<T>;
  constexpr int64_t W = static_cast<int64_t>(B::size);
  Tensor dx = empty(x.shape(), x.dtype());
  const T* px = x.data<T>();
  const T* pg = g.data<T>();
  const T* po = out.data<T>();
  T* pd = dx.data<T>();
#pragma omp parallel for schedule(static) if (O > 1 && O * R >= kParallelMin)
  for (int64_t o = 0; o < O; ++o) {
    const T* xr = px + o * R;
    T* dr = pd + o * R;
    const B vo(po[o]), vg(pg[o]);
    int64_t r = 0;
    for (; r + W <= R; r += W) (vg * vexp(B::load_unaligned(xr + r) - vo)).store_unaligned(dr + r);
    for (; r < R; ++r) dr[r] = pg[o] * std::exp(xr[r] - po[o]);
  }
  return dx;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// sum and mean

// out = sum of x over dims   =>   dx = g broadcast back over the reduced dims
Tensor sum(const Tensor& x, const Dims& dims, bool keepdim) { return sum_or_mean(x, dims, keepdim, false); }

// out = sum of x over dims / count   =>   dx = g / count broadcast back over the reduced dims
Tensor mean(const Tensor& x, const Dims& dims, bool keepdim) { return sum_or_mean(x, dims, keepdim, true); }

// ---------------------------------------------------------------------------------------
// var and std (cold: composed from recorded ops, so their backward comes for free)

// out = sum((x - mean(x))^2) / (count - correction)
//   =>   dx = g * 2 (x - mean(x)) / (count - correction)   (via the composed ops)
Tensor var(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  check_float(x, "var");
  const ReducePlan p = make_plan(x.shape(), dims, keepdim, "var");
  // NOTE: like torch, count <= correction divides by zero or less (inf/nan), no error.
  const double divisor = static_cast<double>(std::max<int64_t>(p.count - correction, 0));
  Tensor d = x - mean(x, dims, true);
  return sum(d * d, dims, keepdim) / divisor;
}

// out = sqrt(var(x))   =>   dx = g / (2 out) * dvar/dx   (as torch.std)
Tensor std(const Tensor& x, const Dims& dims, int64_t correction, bool keepdim) {
  check_float(x, "std");
  make_plan(x.shape(), dims, keepdim, "std");  // validates dims under this op's name
  return sqrt(var(x, dims, correction, keepdim));
}

// ---------------------------------------------------------------------------------------
// max and min

// out = max of x over dims   =>   dx = g / (number of ties) where x == out, 0 elsewhere
Tensor amax(const Tensor& x, const Dims& dims, bool keepdim) { return extreme(x, dims, keepdim, true, "amax", false); }
Tensor amin(const Tensor& x, const Dims& dims, bool keepdim) { return extreme(x, dims, keepdim, false, "amin", false); }

// out = max of all elements   =>   dx = g / (number of ties) where x == out (torch >= 1.7)
Tensor max(const Tensor& x) { return extreme(x, {}, false, true, "max", true); }
Tensor min(const Tensor& x) { return extreme(x, {}, false, false, "min", true); }

// values[o, i] = x[o, idx, i], the first extreme along dim   =>   dx[o, idx, i] = g[o, i]
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim(x, dim, keepdim, true); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return extreme_dim(x, dim, keepdim, false); }

// ---------------------------------------------------------------------------------------
// logsumexp

// out = log(sum(exp(x))) over dims, computed as m + log(sum(exp(x - m)))
//   =>   dx = g * exp(x - out)
Tensor logsumexp(const Tensor& x, const Dims& dims, bool keepdim) {
  check_float(x, "logsumexp");
  ReducePlan p = make_plan(x.shape(), dims, keepdim, "logsumexp");
  Tensor out = dispatch_float(x.dtype(), "logsumexp", [&](auto tag) {
    using T = decltype(tag);
    Tensor o = empty(p.out_shape, x.dtype());
    if (o.numel() == 0) return o;
    Tensor src = p.simple ? x : reduced_last<T>(x, p);
    logsumexp_layout<T>(src.data<T>(), p.outer, p.R, p.inner, o.data<T>());
    return o;
  });
  return record(out, {x}, "logsumexp", [p](const Tensor& g, const Tensor& out, const Grads& in) {
    return dispatch_float(g.dtype(), "logsumexp backward", [&](auto tag) {
      using T = decltype(tag);
      if (p.simple && p.inner == 1) return Grads{logsumexp_backward_rows<T>(in[0], g, out, p.outer, p.R)};
      return Grads{spread<T, true>(p, in[0], g, out, [](T xi, T gj, T oj) { return gj * std::exp(xi - oj); })};
    });
  });
}

}  // namespace xg

// Elementwise ops: each validates, computes the forward with a flat (or broadcast) loop,
// then records its backward closure. Backward closures run with grad mode off and return
// gradients in the output's broadcast shape; the engine sums them back to input shapes.
#include "autograd/elementwise.hpp"

#include <cmath>

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/op_util.hpp"

namespace xg {

using Grads = std::vector<Tensor>;

namespace {

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  check(a.dtype() == b.dtype(), op, ": dtype mismatch, ", dtype_name(a.dtype()), " ", shape_str(a.shape()),
        " and ", dtype_name(b.dtype()), " ", shape_str(b.shape()),
        " (xgrad does not promote types; convert one with .to())");
}

// A C++ scalar as a 0-d tensor of `like`'s dtype.
Tensor scalar_like(double v, const Tensor& like) { return scalar_tensor(v, like.dtype()); }

// out = f(a, b) for two float tensors of one dtype, broadcast. f sees float for bfloat16
// (acc_t), so every op computes in float32 and rounds its result to bf16 once, as PyTorch's
// CPU kernels do.
template <class F>
Tensor float_binary(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_same_dtype(a, b, op);
  return dispatch_floating(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;  // bf16 is read as float32, computed in it, and rounded once
    return broadcast_binary<T, T, T>(a, b, a.dtype(), op, [f](T x, T y) { return static_cast<T>(f(A(x), A(y))); });
  });
}

// out = f(x) for a float tensor.
template <class F>
Tensor float_unary(const Tensor& x, const char* op, F f) {
  return dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    return map_tensor<T>(x, [f](T v) { return static_cast<T>(f(A(v))); });
  });
}

// g * f(x, y) fused over two same-shape tensors (e.g. g * (1 - y^2) for tanh).
template <class F>
Tensor float_ternary(const Tensor& g, const Tensor& x, const Tensor& y, F f) {
  return dispatch_floating(g.dtype(), "backward", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    Tensor out = empty(g.shape(), g.dtype());
    const T* pg = g.data<T>();
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    T* po = out.data<T>();
    const int64_t n = g.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<T>(f(A(pg[i]), A(px[i]), A(py[i])));
    return out;
  });
}

}  // namespace

// ---------------------------------------------------------------------------------------
// arithmetic

// out = a + b   =>   da = g,   db = g   (broadcast axes summed away by the engine)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = float_binary(a, b, "add", [](auto x, auto y) { return x + y; });
  return record(out, {a, b}, "add", saves_nothing(), [](const Tensor& g, const Tensor&, const Grads&) { return Grads{g, g}; });
}

// out = a - b   =>   da = g,   db = -g
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = float_binary(a, b, "sub", [](auto x, auto y) { return x - y; });
  return record(out, {a, b}, "sub", saves_nothing(), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{g, wants(in, 1) ? neg(g) : Tensor()};
  });
}

// out = a * b   =>   da = g * b,   db = g * a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = float_binary(a, b, "mul", [](auto x, auto y) { return x * y; });
  return record(out, {a, b}, "mul", saves_where({wants_grad(b), wants_grad(a)}), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{wants(in, 0) ? mul(g, in[1]) : Tensor(), wants(in, 1) ? mul(g, in[0]) : Tensor()};
  });
}

// out = a / b   =>   da = g / b,   db = -g * a / b^2
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = float_binary(a, b, "div", [](auto x, auto y) { return x / y; });
  return record(out, {a, b}, "div", saves_where({wants_grad(b), true}), [](const Tensor& g, const Tensor&, const Grads& in) {
    Tensor da, db;
    if (wants(in, 0)) da = div(g, in[1]);
    if (wants(in, 1)) db = neg(div(mul(g, in[0]), mul(in[1], in[1])));
    return Grads{da, db};
  });
}

// out = -x   =>   dx = -g
Tensor neg(const Tensor& x) {
  Tensor out = float_unary(x, "neg", [](auto v) { return -v; });
  return record(out, {x}, "neg", saves_nothing(), [](const Tensor& g, const Tensor&, const Grads&) { return Grads{neg(g)}; });
}

// out = x^p   =>   dx = g * p * x^(p-1)
Tensor pow(const Tensor& x, double p) {
  Tensor out = float_unary(x, "pow", [p](auto v) { return std::pow(v, static_cast<decltype(v)>(p)); });
  return record(out, {x}, "pow", saves({0}), [p](const Tensor& g, const Tensor&, const Grads& in) {
    if (p == 0) return Grads{zeros_like(g)};
    return Grads{float_ternary(g, in[0], in[0], [p](auto gi, auto xi, auto) {
      using T = decltype(gi);
      return gi * static_cast<T>(p) * std::pow(xi, static_cast<T>(p - 1));
    })};
  });
}

// out = x^e   =>   dx = g * e * x^(e-1),   de = g * out * log(x)
Tensor pow(const Tensor& x, const Tensor& e) {
  Tensor out = float_binary(x, e, "pow", [](auto v, auto w) { return std::pow(v, w); });
  return record(out, {x, e}, "pow", [](const Tensor& g, const Tensor& out, const Grads& in) {
    Tensor dx, de;
    if (wants(in, 0)) dx = mul(mul(g, in[1]), pow(in[0], sub(in[1], scalar_like(1, in[1]))));
    if (wants(in, 1)) {
      // NOTE: PyTorch masks the exponent gradient to 0 where x == 0 and e >= 0 (log 0 = -inf).
      Tensor lx = where(logical_and(eq(in[0], scalar_like(0, in[0])), ge(in[1], scalar_like(0, in[1]))),
                        scalar_like(0, in[0]), log(in[0]));
      de = mul(mul(g, out), lx);
    }
    return Grads{dx, de};
  });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

// ---------------------------------------------------------------------------------------
// math

// out = exp(x)   =>   dx = g * out
Tensor exp(const Tensor& x) {
  Tensor out = float_unary(x, "exp", [](auto v) { return std::exp(v); });
  return record(out, {x}, "exp", saves({}, true), [](const Tensor& g, const Tensor& out, const Grads&) {
    return Grads{mul(g, out)};
  });
}

// out = log(x)   =>   dx = g / x
Tensor log(const Tensor& x) {
  Tensor out = float_unary(x, "log", [](auto v) { return std::log(v); });
  return record(out, {x}, "log", saves({0}), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{div(g, in[0])};
  });
}

// out = sqrt(x)   =>   dx = g / (2 out)
Tensor sqrt(const Tensor& x) {
  Tensor out = float_unary(x, "sqrt", [](auto v) { return std::sqrt(v); });
  return record(out, {x}, "sqrt", saves({}, true), [](const Tensor& g, const Tensor& out, const Grads&) {
    return Grads{float_ternary(g, out, out, [](auto gi, auto yi, auto) { return gi / (2 * yi); })};
  });
}

// out = 1 / sqrt(x)   =>   dx = -g * out^3 / 2
// (from x, not the output: a bf16 output's rounding would be cubed, 1.5 ulp)
Tensor rsqrt(const Tensor& x) {
  Tensor out = float_unary(x, "rsqrt", [](auto v) { return 1 / std::sqrt(v); });
  return record(out, {x}, "rsqrt", saves({0}), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{float_ternary(g, in[0], in[0], [](auto gi, auto xi, auto) {
      using T = decltype(gi);
      const T yi = 1 / std::sqrt(xi);
      return -gi * yi * yi * yi / T(2);
    })};
  });
}

// out = |x|   =>   dx = g * sign(x)   (sign(0) = 0)
Tensor abs(const Tensor& x) {
  Tensor out = float_unary(x, "abs", [](auto v) { return std::abs(v); });
  return record(out, {x}, "abs", saves({0}), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{float_ternary(g, in[0], in[0], [](auto gi, auto xi, auto) {
      using T = decltype(gi);
      return xi > 0 ? gi : (xi < 0 ? -gi : T(0));
    })};
  });
}

// out = tanh(x)   =>   dx = g * (1 - out^2)
Tensor tanh(const Tensor& x) {
  Tensor out = float_unary(x, "tanh", [](auto v) { return std::tanh(v); });
  return record(out, {x}, "tanh", saves({}, true), [](const Tensor& g, const Tensor& out, const Grads&) {
    return Grads{float_ternary(g, out, out, [](auto gi, auto yi, auto) { return gi * (1 - yi * yi); })};
  });
}

// out = cap * tanh(x / cap), Gemma 2's soft-capping of attention scores and logits (x / cap
// first, as its tanh(x / cap) * cap does)   =>   dx = g * (1 - (out / cap)^2)
Tensor softcap(const Tensor& x, double cap) {
  check(std::isfinite(cap) && cap > 0, "softcap: cap must be a positive number, got ", cap);
  Tensor out = float_unary(x, "softcap", [cap](auto v) {
    using A = decltype(v);
    return std::tanh(v / static_cast<A>(cap)) * static_cast<A>(cap);
  });
  return record(out, {x}, "softcap", saves({}, true), [cap](const Tensor& g, const Tensor& out, const Grads&) {
    return Grads{float_ternary(g, out, out, [cap](auto gi, auto yi, auto) {
      using A = decltype(gi);
      const A t = yi / static_cast<A>(cap);
      return gi * (1 - t * t);
    })};
  });
}

template <class T>
static T sigmoid_of(T v) {
  // Stable on both sides: never exp of a large positive number.
  return v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
}

// out = 1 / (1 + exp(-x))   =>   dx = g * out * (1 - out)
Tensor sigmoid(const Tensor& x) {
  Tensor out = float_unary(x, "sigmoid", [](auto v) { return sigmoid_of(v); });
  return record(out, {x}, "sigmoid", saves({}, true), [](const Tensor& g, const Tensor& out, const Grads&) {
    return Grads{float_ternary(g, out, out, [](auto gi, auto yi, auto) { return gi * yi * (1 - yi); })};
  });
}

// out = log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|))   =>   dx = g * sigmoid(-x)
Tensor logsigmoid(const Tensor& x) {
  Tensor out = float_unary(x, "logsigmoid", [](auto v) {
    using T = decltype(v);
    return std::min(v, T(0)) - std::log1p(std::exp(-std::abs(v)));
  });
  return record(out, {x}, "logsigmoid", saves({0}), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{float_ternary(g, in[0], in[0], [](auto gi, auto xi, auto) { return gi * sigmoid_of(-xi); })};
  });
}

// out = log1p(exp(beta x)) / beta, or x where beta x > threshold
//   =>   dx = g * sigmoid(beta x), or g above the threshold
Tensor softplus(const Tensor& x, double beta, double threshold) {
  check(beta != 0, "softplus: beta must be non-zero");
  Tensor out = float_unary(x, "softplus", [beta, threshold](auto v) {
    using T = decltype(v);
    const T bx = static_cast<T>(beta) * v;
    return bx > static_cast<T>(threshold) ? v : std::log1p(std::exp(bx)) / static_cast<T>(beta);
  });
  return record(out, {x}, "softplus", saves({0}), [beta, threshold](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{float_ternary(g, in[0], in[0], [beta, threshold](auto gi, auto xi, auto) {
      using T = decltype(gi);
      const T bx = static_cast<T>(beta) * xi;
      return bx > static_cast<T>(threshold) ? gi : gi * sigmoid_of(bx);
    })};
  });
}

// ---------------------------------------------------------------------------------------
// activations

// out = max(x, 0)   =>   dx = g * (out > 0)
Tensor relu(const Tensor& x) {
  Tensor out = float_unary(x, "relu", [](auto v) { return v > 0 ? v : decltype(v)(0); });
  return record(out, {x}, "relu", saves({}, true), [](const Tensor& g, const Tensor& out, const Grads&) {
    return Grads{float_ternary(g, out, out, [](auto gi, auto yi, auto) { return yi > 0 ? gi : decltype(gi)(0); })};
  });
}

// silu is in swiglu.cpp, vectorised beside the fused swiglu.

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kC = 0.044715;

// erf form: out = x/2 (1 + erf(x/sqrt2))   =>   dx = g (Phi(x) + x phi(x))
// Phi(x) = erfc(-x/sqrt2)/2, not (1 + erf(x/sqrt2))/2: for x below -3 that sum cancels (erf is
// -0.9999994 at x = -5) and keeps a few bits of float32's; erfc keeps them all.
// tanh form: out = x/2 (1 + tanh u), u = sqrt(2/pi)(x + 0.044715 x^3)
//   =>   dx = g (1/2 (1 + tanh u) + x/2 (1 - tanh^2 u) sqrt(2/pi)(1 + 3 * 0.044715 x^2))
Tensor gelu(const Tensor& x, GeluApprox approximate) {
  if (approximate == GeluApprox::None) {
    Tensor out = float_unary(x, "gelu", [](auto v) {
      using T = decltype(v);
      return T(0.5) * v * std::erfc(-v * T(kSqrt1_2));
    });
    return record(out, {x}, "gelu", saves({0}), [](const Tensor& g, const Tensor&, const Grads& in) {
      return Grads{float_ternary(g, in[0], in[0], [](auto gi, auto xi, auto) {
        using T = decltype(gi);
        const T cdf = T(0.5) * std::erfc(-xi * T(kSqrt1_2));
        const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * xi * xi);
        return gi * (cdf + xi * pdf);
      })};
    });
  }
  Tensor out = float_unary(x, "gelu", [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (T(1) + std::tanh(T(kSqrt2OverPi) * (v + T(kC) * v * v * v)));
  });
  return record(out, {x}, "gelu", saves({0}), [](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{float_ternary(g, in[0], in[0], [](auto gi, auto xi, auto) {
      using T = decltype(gi);
      const T th = std::tanh(T(kSqrt2OverPi) * (xi + T(kC) * xi * xi * xi));
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kC) * xi * xi);
      return gi * (T(0.5) * (T(1) + th) + T(0.5) * xi * (T(1) - th * th) * du);
    })};
  });
}

// ---------------------------------------------------------------------------------------
// clamp, min/max, selection

// out = min(max(x, lo), hi)   =>   dx = g where lo <= x <= hi, else 0
Tensor clamp(const Tensor& x, double lo, double hi) {
  const bool has_lo = !std::isnan(lo), has_hi = !std::isnan(hi);
  check(has_lo || has_hi, "clamp: at least one of min and max must be given");
  Tensor out = float_unary(x, "clamp", [=](auto v) {
    using T = decltype(v);
    if (has_lo && v < static_cast<T>(lo)) v = static_cast<T>(lo);
    if (has_hi && v > static_cast<T>(hi)) v = static_cast<T>(hi);
    return v;
  });
  return record(out, {x}, "clamp", saves({0}), [=](const Tensor& g, const Tensor&, const Grads& in) {
    return Grads{float_ternary(g, in[0], in[0], [=](auto gi, auto xi, auto) {
      using T = decltype(gi);
      const bool pass = (!has_lo || xi >= static_cast<T>(lo)) && (!has_hi || xi <= static_cast<T>(hi));
      return pass ? gi : T(0);
    })};
  });
}

Tensor clamp_min(const Tensor& x, double lo) { return clamp(x, lo, kNoBound); }
Tensor clamp_max(const Tensor& x, double hi) { return clamp(x, kNoBound, hi); }

// out = a where a < b, b where b < a (ties: either)   =>   the smaller side gets g, ties g/2 each
static Tensor min_max(const Tensor& a, const Tensor& b, bool is_max) {
  const char* op = is_max ? "maximum" : "minimum";
  Tensor out = float_binary(a, b, op, [is_max](auto x, auto y) {
    if (std::isnan(x) || std::isnan(y)) return x + y;  // NaN propagates, as in PyTorch
    return is_max ? (x > y ? x : y) : (x < y ? x : y);
  });
  return record(out, {a, b}, op, saves({0, 1}), [is_max](const Tensor& g, const Tensor&, const Grads& in) {
    // NOTE: PyTorch >= 1.12 splits the gradient evenly between equal operands.
    auto side = [&](const Tensor& self, const Tensor& other) {
      Tensor half = mul(g, scalar_like(0.5, g));
      Tensor wins = is_max ? gt(self, other) : lt(self, other);
      return where(eq(self, other), half, where(wins, g, scalar_like(0, g)));
    };
    return Grads{wants(in, 0) ? side(in[0], in[1]) : Tensor(), wants(in, 1) ? side(in[1], in[0]) : Tensor()};
  });
}

Tensor minimum(const Tensor& a, const Tensor& b) { return min_max(a, b, false); }
Tensor maximum(const Tensor& a, const Tensor& b) { return min_max(a, b, true); }

// out = cond ? a : b   =>   da = where(cond, g, 0),   db = where(cond, 0, g)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check(cond.dtype() == kBool, "where: condition must be a bool tensor, got ", dtype_name(cond.dtype()));
  check_same_dtype(a, b, "where");
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor o = empty(shape, a.dtype());
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = o.data<T>();
    for_each_row<4>(shape,
                    {broadcast_strides(cond.shape(), shape), broadcast_strides(a.shape(), shape),
                     broadcast_strides(b.shape(), shape), contiguous_strides(shape)},
                    true, [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& s) {
                      for (int64_t j = 0; j < n; ++j)
                        po[off[3] + j] = pc[off[0] + j * s[0]] ? pa[off[1] + j * s[1]] : pb[off[2] + j * s[2]];
                    });
    return o;
  });
  if (!is_floating(a.dtype())) return out;
  return record(out, {a, b, cond}, "where", saves({2}), [](const Tensor& g, const Tensor&, const Grads& in) {
    Tensor zero = scalar_like(0, g);
    return Grads{wants(in, 0) ? where(in[2], g, zero) : Tensor(), wants(in, 1) ? where(in[2], zero, g) : Tensor(),
                 Tensor()};
  });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_like(b, a)); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, scalar_like(a, b), b); }

// out = mask ? value : x   =>   dx = where(mask, 0, g)
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check(mask.dtype() == kBool, "masked_fill: mask must be a bool tensor, got ", dtype_name(mask.dtype()),
        " (compare with 0 first, e.g. mask == 0)");
  check(broadcast_shapes(mask.shape(), x.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
        shape_str(mask.shape()), " does not broadcast to the input's shape ", shape_str(x.shape()));
  return where(mask, scalar_like(value, x), x);
}

// ---------------------------------------------------------------------------------------
// comparisons and logic

template <class F>
static Tensor compare(const Tensor& a, const Tensor& b, const char* op, F f) {
  check_same_dtype(a, b, op);
  return dispatch_all(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    return broadcast_binary<T, T, bool>(a, b, kBool, op, f);
  });
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(a, b, "eq", [](auto x, auto y) { return x == y; }); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(a, b, "ne", [](auto x, auto y) { return x != y; }); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(a, b, "lt", [](auto x, auto y) { return x < y; }); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(a, b, "le", [](auto x, auto y) { return x <= y; }); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(a, b, "gt", [](auto x, auto y) { return x > y; }); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(a, b, "ge", [](auto x, auto y) { return x >= y; }); }
Tensor operator==(const Tensor& a, double b) { return eq(a, scalar_like(b, a)); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, scalar_like(b, a)); }
Tensor operator<(const Tensor& a, double b) { return lt(a, scalar_like(b, a)); }
Tensor operator<=(const Tensor& a, double b) { return le(a, scalar_like(b, a)); }
Tensor operator>(const Tensor& a, double b) { return gt(a, scalar_like(b, a)); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, scalar_like(b, a)); }

Tensor logical_not(const Tensor& x) {
  check(x.dtype() == kBool, "logical_not: expected a bool tensor, got ", dtype_name(x.dtype()));
  Tensor out = empty(x.shape(), kBool);
  map_n(x.data<bool>(), out.data<bool>(), x.numel(), [](bool v) { return !v; });
  return out;
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  check(a.dtype() == kBool && b.dtype() == kBool, "logical_and: expected bool tensors, got ",
        dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  return broadcast_binary<bool, bool, bool>(a, b, kBool, "logical_and", [](bool x, bool y) { return x && y; });
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  check(a.dtype() == kBool && b.dtype() == kBool, "logical_or: expected bool tensors, got ",
        dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  return broadcast_binary<bool, bool, bool>(a, b, kBool, "logical_or", [](bool x, bool y) { return x || y; });
}

bool isfinite_all(const Tensor& x) {
  if (!is_floating(x.dtype())) return true;
  return dispatch_floating(x.dtype(), "isfinite_all", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    bool ok = true;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) ok &= std::isfinite(p[i]);
    return ok;
  });
}

// ---------------------------------------------------------------------------------------
// in place

void add_(const Tensor& dst_handle, const Tensor& src, double alpha) {
  Tensor dst = dst_handle;  // the same data through a handle that writes
  check_same_dtype(dst, src, "add_");
  const Tensor& s = src;
  check(broadcast_shapes(src.shape(), dst.shape(), "add_") == dst.shape(), "add_: source of shape ",
        shape_str(src.shape()), " does not broadcast to the destination's shape ", shape_str(dst.shape()));
  dispatch_floating(dst.dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    const T a = static_cast<T>(alpha);
    T* pd = dst.data<T>();
    const T* ps = s.data<T>();
    if (s.shape() == dst.shape()) {
      const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) pd[i] += a * ps[i];
      return;
    }
    for_each_row<2>(dst.shape(), {broadcast_strides(s.shape(), dst.shape()), contiguous_strides(dst.shape())}, true,
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                      for (int64_t j = 0; j < n; ++j) pd[off[1] + j] += a * ps[off[0] + j * st[0]];
                    });
  });
}

void mul_(const Tensor& dst_handle, double s) {
  Tensor dst = dst_handle;  // the same data through a handle that writes
  dispatch_floating(dst.dtype(), "mul_", [&](auto tag) {
    using T = decltype(tag);
    T* p = dst.data<T>();
    const T v = static_cast<T>(s);
    const int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] *= v;
  });
}

}  // namespace xg

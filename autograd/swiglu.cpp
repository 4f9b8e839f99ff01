// The SiLU family, vectorised with xsimd: silu(x) and the fused swiglu(gate, up) =
// silu(gate) * up, each forward and backward one pass (libm's scalar expf in a silu then a
// mul is slow enough to be a large share of a small model's training step).
#include "autograd/swiglu.hpp"

#include "autograd/detail/dispatch.hpp"
#include "autograd/graph.hpp"
#include "autograd/detail/kernels.hpp"
#include "autograd/detail/row_kernels.hpp"

namespace xg {

namespace {

// Elements per parallel chunk: a multiple of every batch width.
constexpr int64_t kChunk = 1 << 13;

// sigmoid(x) = 1 / (1 + exp(-x)): 0 for x -> -inf (exp gives inf), 1 for x -> inf.
template <class T>
Batch<T> vsigmoid(const Batch<T>& x) {
  return Batch<T>(T(1)) / (Batch<T>(T(1)) + vexp(-x));
}

template <class T>
T sigmoid_scalar(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Calls f(begin, end) over [0, n) in chunks, in parallel when n is large enough.
template <class F>
void for_chunks(int64_t n, F f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(n, (c + 1) * kChunk));
}

// Over [0, n) in parallel chunks: vec(i) for each full batch of W elements at i, then
// scalar(i) for the chunk's tail.
template <class T, class V, class S>
void for_elements(int64_t n, V vec, S scalar) {
  constexpr int64_t W = static_cast<int64_t>(Batch<T>::size);
  for_chunks(n, [&](int64_t b, int64_t e) {
    int64_t i = b;
    for (; i + W <= e; i += W) vec(i);
    for (; i < e; ++i) scalar(i);
  });
}

template <class T>
Batch<T> load(const T* p, int64_t i) {
  return Batch<T>::load_unaligned(p + i);
}

template <class T>
void swiglu_forward(const T* gate, const T* up, T* out, int64_t n) {
  for_elements<T>(
      n,
      [=](int64_t i) {
        const Batch<T> x = load(gate, i);
        (x * vsigmoid(x) * load(up, i)).store_unaligned(out + i);
      },
      [=](int64_t i) { out[i] = gate[i] * sigmoid_scalar(gate[i]) * up[i]; });
}

template <class T>
void swiglu_backward(const T* g, const T* gate, const T* up, T* dgate, T* dup, int64_t n) {
  const Batch<T> one(T(1));
  for_elements<T>(
      n,
      [=](int64_t i) {
        const Batch<T> x = load(gate, i), s = vsigmoid(x), gi = load(g, i);
        (gi * x * s).store_unaligned(dup + i);
        (gi * load(up, i) * s * (one + x * (one - s))).store_unaligned(dgate + i);
      },
      [=](int64_t i) {
        const T x = gate[i], s = sigmoid_scalar(x);
        dup[i] = g[i] * x * s;
        dgate[i] = g[i] * up[i] * s * (T(1) + x * (T(1) - s));
      });
}

template <class T>
void silu_forward(const T* x, T* out, int64_t n) {
  for_elements<T>(
      n,
      [=](int64_t i) {
        const Batch<T> v = load(x, i);
        (v * vsigmoid(v)).store_unaligned(out + i);
      },
      [=](int64_t i) { out[i] = x[i] * sigmoid_scalar(x[i]); });
}

template <class T>
void silu_backward(const T* g, const T* x, T* dx, int64_t n) {
  const Batch<T> one(T(1));
  for_elements<T>(
      n,
      [=](int64_t i) {
        const Batch<T> v = load(x, i), s = vsigmoid(v);
        (load(g, i) * s * (one + v * (one - s))).store_unaligned(dx + i);
      },
      [=](int64_t i) {
        const T s = sigmoid_scalar(x[i]);
        dx[i] = g[i] * s * (T(1) + x[i] * (T(1) - s));
      });
}

}  // namespace

// out = x * sigmoid(x)   =>   dx = g * s * (1 + x (1 - s)),  s = sigmoid(x)
Tensor silu(const Tensor& x) {
  check(x.defined(), "silu: undefined input");
  // bf16: widened, computed in float32 and rounded once (as rms_norm and softmax do).
  if (x.dtype() == kBFloat16) return silu(x.to(kFloat32)).to(kBFloat16);
  Tensor out = dispatch_float(x.dtype(), "silu", [&](auto tag) {
    using T = decltype(tag);
    Tensor o = empty(x.shape(), x.dtype());
    silu_forward<T>(x.data<T>(), o.data<T>(), x.numel());
    return o;
  });
  return record(out, {x}, "silu", bf16_under_autocast(saves({0})), [](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
    return dispatch_float(g.dtype(), "silu backward", [&](auto tag) {
      using T = decltype(tag);
      Tensor dx = empty(g.shape(), g.dtype());
      silu_backward<T>(g.data<T>(), in[0].data<T>(), dx.data<T>(), g.numel());
      return std::vector<Tensor>{dx};
    });
  });
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check(gate.defined() && up.defined(), "swiglu: undefined input");
  check(gate.shape() == up.shape() && gate.dtype() == up.dtype(), "swiglu: gate and up must have the same shape and dtype, got ",
        dtype_name(gate.dtype()), " ", shape_str(gate.shape()), " and ", dtype_name(up.dtype()), " ", shape_str(up.shape()));
  if (gate.dtype() == kBFloat16) return swiglu(gate.to(kFloat32), up.to(kFloat32)).to(kBFloat16);  // as silu's
  Tensor out = dispatch_float(gate.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    Tensor o = empty(gate.shape(), gate.dtype());
    swiglu_forward<T>(gate.data<T>(), up.data<T>(), o.data<T>(), gate.numel());
    return o;
  });
  return record(out, {gate, up}, "swiglu", bf16_under_autocast(saves({0, 1})), [](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
    return dispatch_float(g.dtype(), "swiglu backward", [&](auto tag) {
      using T = decltype(tag);
      Tensor dgate = empty(g.shape(), g.dtype()), dup = empty(g.shape(), g.dtype());
      swiglu_backward<T>(g.data<T>(), in[0].data<T>(), in[1].data<T>(), dgate.data<T>(), dup.data<T>(), g.numel());
      return std::vector<Tensor>{dgate, dup};
    });
  });
}

}  // namespace xg

// Internal to xgrad's .cpp files: the loops elementwise kernels are made of. Contiguous
// loops the compiler vectorises, split over threads with OpenMP when large enough.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "autograd/broadcast.hpp"
#include "autograd/tensor.hpp"

namespace xg {

// Below this many elements a loop runs on one thread: spawning costs more than it saves.
constexpr int64_t kParallelMin = 1 << 15;

// The length of a piece along a side of `len` when a product is cut into pieces whose shapes
// depend on its own shape only (its sums then do not depend on the thread count): an eighth of
// it (so that a small product splits over threads too), rounded up to `align`, between `align`
// and `most`. blocks.cpp's tiles (q8_0, q4_0) and matmul.cpp's widened bf16 products.
inline int64_t piece_len(int64_t len, int64_t align, int64_t most) {
  const int64_t eighth = (len / 8 + align - 1) / align * align;
  return std::min(most, std::max(align, eighth));
}

// A thread's buffer for a piece of a widened operand, kept between products (q8_0 tiles and
// widened bf16 pieces; never two at once on one thread).
template <class T>
T* thread_buffer(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// out[i] = f(x[i]) for contiguous arrays of n elements.
template <class Tin, class Tout, class F>
void map_n(const Tin* x, Tout* out, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f(x[i]);
}

// out[i] = f(a[i], b[i]) for contiguous arrays of n elements.
template <class Ta, class Tb, class Tout, class F>
void zip_n(const Ta* a, const Tb* b, Tout* out, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

// A new tensor of x's shape and dtype with f applied to each element (T is x's type).
template <class T, class F>
Tensor map_tensor(const Tensor& x, F f) {
  Tensor out = empty(x.shape(), x.dtype());
  map_n(x.data<T>(), out.data<T>(), x.numel(), f);
  return out;
}

// A new tensor of a's shape and dtype with f(a[i], b[i]); a and b have one shape.
template <class T, class F>
Tensor zip_tensor(const Tensor& a, const Tensor& b, F f) {
  Tensor out = empty(a.shape(), a.dtype());
  zip_n(a.data<T>(), b.data<T>(), out.data<T>(), a.numel(), f);
  return out;
}

// out = f(a, b) with broadcasting; Ta, Tb the operand types, Tout the result's.
template <class Ta, class Tb, class Tout, class F>
Tensor broadcast_binary(const Tensor& a, const Tensor& b, Dtype out_dtype, const char* op, F f) {
  const Shape shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, out_dtype);
  const Ta* pa = a.data<Ta>();
  const Tb* pb = b.data<Tb>();
  Tout* po = out.data<Tout>();
  const int64_t n = out.numel();
  if (a.shape() == b.shape()) {
    zip_n(pa, pb, po, n, f);
  } else if (b.numel() == 1 && a.numel() == n) {
    const Tb s = pb[0];
    map_n(pa, po, n, [&](Ta v) { return f(v, s); });
  } else if (a.numel() == 1 && b.numel() == n) {
    const Ta s = pa[0];
    map_n(pb, po, n, [&](Tb v) { return f(s, v); });
  } else {
    for_each_row<3>(shape, {broadcast_strides(a.shape(), shape), broadcast_strides(b.shape(), shape),
                            contiguous_strides(shape)},
                    true, [&](const std::array<int64_t, 3>& off, int64_t len, const std::array<int64_t, 3>& in) {
                      const Ta* ra = pa + off[0];
                      const Tb* rb = pb + off[1];
                      Tout* ro = po + off[2];
                      for (int64_t j = 0; j < len; ++j) ro[j] = f(ra[j * in[0]], rb[j * in[1]]);
                    });
  }
  return out;
}

}  // namespace xg

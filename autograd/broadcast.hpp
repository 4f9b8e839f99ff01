// NumPy/PyTorch broadcasting: the broadcast shape of two shapes, strides that read an
// array as if broadcast, a row-wise strided loop for kernels, and sum_to (the reduction
// that backward uses to bring a gradient back to an input's shape).
#pragma once

#include <array>
#include <cstddef>

#include "autograd/tensor.hpp"

namespace xg {

// The broadcast of two shapes; throws naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Row-major strides (in elements) of a contiguous array of this shape.
Shape contiguous_strides(const Shape& shape);

// Strides that read a contiguous array of `shape` as if broadcast to `out` (0 on broadcast axes).
Shape broadcast_strides(const Shape& shape, const Shape& out);

// Sums `g` over the axes along which `shape` was broadcast to g's shape. Returns g itself
// when the shapes are equal. Not recorded in the graph (a backward helper).
Tensor sum_to(const Tensor& g, const Shape& shape);

// Calls f(offsets, n, inner) for each row (all dims but the last) of `shape`: offsets[k] is
// where operand k's row starts, n the row length, inner[k] the operand's stride along it.
// Rows run in parallel (OpenMP) when `parallel` and the work is large; f must then only
// write to disjoint places.
template <std::size_t N, class F>
void for_each_row(const Shape& shape, const std::array<Shape, N>& strides, bool parallel, F&& f) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::array<int64_t, N> inner{};
  if (nd == 0) {
    std::array<int64_t, N> off{};
    f(off, int64_t{1}, inner);
    return;
  }
  const int64_t n = shape[nd - 1];
  for (std::size_t k = 0; k < N; ++k) inner[k] = strides[k][nd - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d < nd - 1; ++d) rows *= shape[d];
  if (n == 0 || rows == 0) return;
  auto row_offsets = [&](int64_t r) {
    std::array<int64_t, N> off{};
    for (int64_t d = nd - 2; d >= 0; --d) {
      const int64_t i = r % shape[d];
      r /= shape[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
    return off;
  };
#pragma omp parallel for schedule(static) if (parallel && rows > 1 && rows * n >= (1 << 16))
  for (int64_t r = 0; r < rows; ++r) f(row_offsets(r), n, inner);
}

}  // namespace xg

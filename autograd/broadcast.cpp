// Broadcast shapes and strides, and sum_to.
#include "autograd/broadcast.hpp"

#include "autograd/detail/dispatch.hpp"

namespace xg {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error(str_cat(op, ": shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast (dim ",
                      static_cast<int64_t>(i) - static_cast<int64_t>(n), ": ", da, " vs ", db, ")"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Shape broadcast_strides(const Shape& shape, const Shape& out) {
  Shape cs = contiguous_strides(shape);
  Shape s(out.size(), 0);
  const std::size_t lead = out.size() - shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) s[lead + i] = (shape[i] == 1 && out[lead + i] != 1) ? 0 : cs[i];
  return s;
}

// out[i reduced over broadcast axes] = sum of g[i]
Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  check(shape.size() <= g.shape().size(), "sum_to: cannot reduce ", shape_str(g.shape()), " to ",
        shape_str(shape));
  check(broadcast_shapes(shape, g.shape(), "sum_to") == g.shape(), "sum_to: ", shape_str(shape),
        " does not broadcast to ", shape_str(g.shape()));
  // bf16 (the gradient of a broadcast bf16 operand): summed in float32 and rounded once, as
  // PyTorch's bf16 reductions do; a bf16 accumulator would round at every row.
  if (g.dtype() == kBFloat16) return sum_to(g.detach().to(kFloat32), shape).to(kBFloat16);
  Tensor out = zeros(shape, g.dtype());
  dispatch_float(g.dtype(), "sum_to", [&](auto tag) {
    using T = decltype(tag);
    const T* src = g.data<T>();
    T* dst = out.data<T>();
    // Serial: several rows of g land on the same output row.
    for_each_row<2>(g.shape(), {contiguous_strides(g.shape()), broadcast_strides(shape, g.shape())}, false,
                    [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& inner) {
                      const T* s = src + off[0];
                      T* d = dst + off[1];
                      if (inner[1] == 0) {
                        double acc = 0;  // a whole row reduces to one value
                        for (int64_t j = 0; j < n; ++j) acc += s[j];
                        d[0] += static_cast<T>(acc);
                      } else {
                        for (int64_t j = 0; j < n; ++j) d[j] += s[j];
                      }
                    });
  });
  return out;
}

}  // namespace xg

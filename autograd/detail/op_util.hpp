// Internal to xgrad's op files: the small checks every op family shares.
#pragma once

#include <algorithm>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

// True when input k of a backward closure needs a gradient (tinygrad's needs_input_grad);
// false for an input that is absent (an optional input past the end of the list).
inline bool wants(const std::vector<Tensor>& in, std::size_t k) {
  return k < in.size() && in[k].defined() && in[k].requires_grad();
}

// Dim d in [-n, n) mapped to [0, n); otherwise an error naming the op and the shape.
inline int64_t wrap_dim(int64_t d, int64_t n, const char* op, const Shape& shape) {
  const int64_t w = d < 0 ? d + n : d;
  check(w >= 0 && w < n, op, ": dim ", d, " out of range for a ", shape.size(), "-d tensor of shape ",
        shape_str(shape), " (expected a dim in [", -n, ", ", n - 1, "])");
  return w;
}

// The same for a dim of `shape` itself; a 0-d tensor accepts dim 0 and -1, as in torch.
inline int64_t wrap_dim(int64_t d, const Shape& shape, const char* op) {
  return wrap_dim(d, std::max<int64_t>(static_cast<int64_t>(shape.size()), 1), op, shape);
}

}  // namespace xg

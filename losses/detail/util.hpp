// Internal to the losses' .cpp files: the argument checks they share, with messages that
// name the loss, the argument and its shape.
#pragma once

#include <cstring>
#include <string>

#include "autograd/elementwise.hpp"
#include "autograd/tensor.hpp"

namespace xg::losses::detail {

// `t` is a float32/float64 tensor.
inline void check_float(const Tensor& t, const char* op, const char* name) {
  check(t.defined(), op, ": ", name, " is undefined");
  check(is_floating(t.dtype()), op, ": ", name, " must be a float32 or float64 tensor, got ", dtype_name(t.dtype()),
        " ", shape_str(t.shape()));
}

// `b` has a's shape and dtype.
inline void check_like(const Tensor& a, const char* an, const Tensor& b, const char* bn, const char* op) {
  check(b.defined(), op, ": ", bn, " is undefined");
  check(a.shape() == b.shape(), op, ": ", an, " ", shape_str(a.shape()), " and ", bn, " ", shape_str(b.shape()),
        " must have the same shape");
  check(a.dtype() == b.dtype(), op, ": ", an, " is ", dtype_name(a.dtype()), " but ", bn, " is ", dtype_name(b.dtype()),
        " (convert one with .to())");
}

// An LM head's operands: h [..., C] float32/float64 and weight [V, C] (linear_cross_entropy,
// linear_token_logprobs).
inline void check_head_operands(const Tensor& h, const Tensor& weight, const char* op) {
  check(h.defined() && (h.dtype() == kFloat32 || h.dtype() == kFloat64) && h.dim() >= 1, op,
        ": h must be a float32 or float64 tensor [..., C]");
  check(weight.defined() && weight.dim() == 2 && weight.shape()[1] == h.shape().back(), op, ": weight ",
        weight.defined() ? shape_str(weight.shape()).str() : "(undefined)", " must be [V, C] with C = ",
        h.shape().back(), " (h is ", shape_str(h.shape()), ")");
}

// Copies the rows of `src` [n, C] into `dst` [N, C] (same dtype) from row r0: one block's
// results written into the whole (the head's losses, a block of rows at a time).
inline void put_rows(Tensor& dst, int64_t r0, const Tensor& src) {
  const std::size_t row_bytes = static_cast<std::size_t>(dst.shape()[1]) * itemsize(dst.dtype());
  std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<std::size_t>(r0) * row_bytes, src.raw_data(),
              static_cast<std::size_t>(src.shape()[0]) * row_bytes);
}

// A mask (bool, int64 or float; nonzero = keep) of `like`'s shape, as a 0/1 tensor of
// like's dtype (never requiring grad).
inline Tensor float_mask(const Tensor& mask, const Tensor& like, const char* op, const char* name) {
  check(mask.shape() == like.shape(), op, ": ", name, " ", shape_str(mask.shape()), " must have the shape ",
        shape_str(like.shape()), " of the values it masks");
  if (mask.dtype() == kBool) return mask.to(like.dtype());
  if (mask.dtype() == kInt64) return ne(mask, zeros(mask.shape(), kInt64)).to(like.dtype());
  return ne(mask.detach(), zeros(mask.shape(), mask.dtype())).to(like.dtype());
}

// The same mask as bool (true = keep).
inline Tensor bool_mask(const Tensor& mask, const Shape& shape, const char* op, const char* name) {
  check(mask.shape() == shape, op, ": ", name, " ", shape_str(mask.shape()), " must have the shape ", shape_str(shape),
        " of the values it masks");
  if (mask.dtype() == kBool) return mask;
  return ne(mask.detach(), zeros(mask.shape(), mask.dtype()));
}

}  // namespace xg::losses::detail

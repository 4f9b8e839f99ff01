// Internal to xgrad's .cpp files: runs a generic lambda with the C++ type of a runtime
// dtype, so that every kernel is one template instantiated for float and double.
#pragma once

#include <cstdint>

#include "autograd/dtype.hpp"
#include "autograd/error.hpp"

namespace xg {

// f(T{}) with T = float or double; any other dtype is an error naming `op`.
template <class F>
decltype(auto) dispatch_float(Dtype d, const char* op, F&& f) {
  switch (d) {
    case Dtype::Float32: return f(float{});
    case Dtype::Float64: return f(double{});
    default: break;
  }
  throw Error(str_cat(op, ": expected a float32 or float64 tensor, got ", dtype_name(d)));
}

// f(T{}) with T = float, double or bfloat16: for the ops whose kernels read bf16 and
// accumulate in acc_t<T> (float32). An op that has not been written for bf16 dispatches
// with dispatch_float and so refuses a bf16 tensor by name.
template <class F>
decltype(auto) dispatch_floating(Dtype d, const char* op, F&& f) {
  switch (d) {
    case Dtype::Float32: return f(float{});
    case Dtype::Float64: return f(double{});
    case Dtype::BFloat16: return f(bfloat16{});
    default: break;
  }
  throw Error(str_cat(op, ": expected a float32, float64 or bfloat16 tensor, got ", dtype_name(d)));
}

// f(T{}) for any dtype.
template <class F>
decltype(auto) dispatch_all(Dtype d, F&& f) {
  switch (d) {
    case Dtype::Float32: return f(float{});
    case Dtype::Float64: return f(double{});
    case Dtype::Int64: return f(int64_t{});
    case Dtype::BFloat16: return f(bfloat16{});
    case Dtype::Bool: break;
    case Dtype::Q8_0:
    case Dtype::Q4_0:
    case Dtype::Q4_K:
    case Dtype::Q5_K:
    case Dtype::Q6_K:
    case Dtype::Q4_1:
    case Dtype::Q5_0:
    case Dtype::Q5_1:
    case Dtype::IQ4_NL:
    case Dtype::IQ4_XS:
    case Dtype::Q2_K:
    case Dtype::Q3_K:
    case Dtype::F16:
      throw Error(str_cat("a ", dtype_name(d), " tensor holds blocks of ",
                          d == Dtype::F16                                             ? "16"
                          : d == Dtype::Q8_0                                          ? "8"
                          : d == Dtype::Q6_K                                          ? "6"
                          : d == Dtype::Q5_K || d == Dtype::Q5_0 || d == Dtype::Q5_1 ? "5"
                          : d == Dtype::Q3_K                                          ? "3"
                          : d == Dtype::Q2_K                                          ? "2"
                                                                                      : "4",
                          "-bit values that only linear, matmul, embedding and to() read; ",
                          "widen it with .to(kFloat32) first"));
  }
  return f(bool{});
}

}  // namespace xg

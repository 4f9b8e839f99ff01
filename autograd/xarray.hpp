// Bridges to xtensor: a Tensor from an xt::xarray (copied), and a Tensor's data seen as an
// xtensor expression without copying (as_xarray), for cold paths and user code. Kept out
// of tensor.hpp so that files which do not need xtensor do not compile it.
#pragma once

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

#include "autograd/tensor.hpp"

namespace xg {

// A new tensor holding a copy of `a` (T: float, double, int64_t or bool).
template <class T>
Tensor from_xarray(const xt::xarray<T>& a) {
  Shape shape(a.shape().begin(), a.shape().end());
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(a.begin(), a.end(), t.data<T>());  // xarray iterates row-major
  return t;
}

// The tensor's storage as an xtensor array of its shape: reads and writes go to the tensor.
// The tensor must outlive the view. Writes bypass autograd (like .data in PyTorch).
template <class T>
auto as_xarray(Tensor& t) {
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  return xt::adapt(t.data<T>(), static_cast<std::size_t>(t.numel()), xt::no_ownership(), shape);
}

// A copy of the tensor's data as an xt::xarray.
template <class T>
xt::xarray<T> to_xarray(const Tensor& t) {
  std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  xt::xarray<T> a = xt::empty<T>(shape);
  std::copy(t.data<T>(), t.data<T>() + t.numel(), a.begin());
  return a;
}

}  // namespace xg

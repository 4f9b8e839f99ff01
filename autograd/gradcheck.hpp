// gradcheck: compares analytic gradients with central differences in float64, as
// torch.autograd.gradcheck does (eps 1e-6, atol 1e-5, rtol 1e-3), through a random
// upstream gradient so that a transposed or mis-summed gradient cannot hide.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;  // for the random upstream gradient
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // on failure: input, index, analytic and numeric values
  explicit operator bool() const { return ok; }
};

// fn maps float64 inputs to one output. Inputs that require grad are checked; others are
// passed through unchanged (indices, masks, ...).
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opts = {});

}  // namespace xg

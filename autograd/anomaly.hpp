// Anomaly detection, like torch.autograd.detect_anomaly: while a DetectAnomalyGuard lives
// (on this thread), every recorded op checks its output for NaN and every backward closure
// checks the gradients it returns for NaN or Inf. The first offender throws AnomalyError,
// naming the op and the nearest named parameter upstream of it (its module). Forward allows
// Inf (causal masks fill with -inf); NaN in forward, or any non-finite gradient, is the error.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/error.hpp"
#include "autograd/tensor.hpp"

namespace xg {

struct AnomalyError : Error {
  using Error::Error;
};

class DetectAnomalyGuard {
 public:
  // named_leaves: e.g. a model's named_parameters(), to name where an anomaly arose.
  explicit DetectAnomalyGuard(std::vector<std::pair<std::string, Tensor>> named_leaves = {});
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  const void* prev_;
};

bool is_anomaly_enabled();

namespace detail {
// Called by the graph: after an op recorded `out` (forward), and after a node's backward
// returned `in_grads` for `node`'s inputs.
void check_forward_anomaly(const Tensor& out, const char* op);
void check_backward_anomaly(const Tensor& out, const std::vector<Tensor>& in_grads);
}  // namespace detail

}  // namespace xg

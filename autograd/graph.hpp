// The autograd graph: grad mode (NoGradGuard), recording an op's node, and the engine
// that runs backward (Tensor::backward and xg::grad).
#pragma once

#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

// True unless a NoGradGuard is alive on this thread.
bool is_grad_enabled();

// RAII: no op records a node while it lives (thread-local), like torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// RAII: turns grad mode back on inside a NoGradGuard (torch.enable_grad()).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Called by every op after computing `out`: if grad mode is on and some input requires
// grad, makes `out` a graph node with these inputs and backward closure. Returns `out`.
Tensor record(Tensor out, std::vector<Tensor> inputs, const char* op, BackwardFn backward);

// True when recording would happen for these inputs (lets ops skip saving tensors).
bool needs_grad(const std::vector<Tensor>& inputs);

// Runs backward from `outputs` (seeded with `grad_outputs`, or ones for scalars) and
// accumulates into the .grad of the leaves that require grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false);

// Like torch.autograd.grad: returns d(outputs)/d(inputs) without touching any .grad.
// An input the outputs do not depend on is an error unless allow_unused (then undefined).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

}  // namespace xg

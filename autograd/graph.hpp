// The autograd graph: grad mode (NoGradGuard), recording an op's node, and the engine
// that runs backward (Tensor::backward and xg::grad).
#pragma once

#include <cstdint>
#include <initializer_list>
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

// Which of an op's tensors its backward reads (PyTorch's saved tensors): bit k of `inputs`
// for input k, and `out` for the output. The graph keeps the others as edges only (their
// gradient flows back, their data is released once nothing else holds it). The default,
// everything, is always correct; an op that says less keeps less alive until backward.
struct Saves {
  uint64_t inputs = ~uint64_t{0};
  bool out = true;
  // Saved float32 inputs the backward may read rounded to bf16: under autocast they are kept
  // as bf16 copies (half the bytes) and widened back for the backward, as PyTorch's autocast
  // keeps its bf16 activations. For the inputs of ops whose gradient is an elementwise or
  // product formula (attention, SwiGLU, an adapter's input) and an RMS norm's input, whose
  // backward reads it only as xhat = x * rstd with rstd kept from the float32 forward: xhat is then
  // within a bf16 rounding (2^-9 relative) of float32's, the error the bf16 products after the
  // norm already carry. Never a weight (the master copy is float32).
  uint64_t bf16_ok = 0;
};
inline Saves bf16_under_autocast(Saves s) {
  s.bf16_ok = s.inputs;
  return s;
}
// Only input k of `s` may be kept as a bf16 copy.
inline Saves bf16_under_autocast(Saves s, int k) {
  s.bf16_ok = s.inputs & (uint64_t{1} << k);
  return s;
}
inline Saves saves_nothing() { return Saves{0, false}; }
// The inputs whose data backward reads, by position, and whether it reads the output.
inline Saves saves(std::initializer_list<int> inputs, bool out = false) {
  Saves s{0, out};
  for (int k : inputs) s.inputs |= uint64_t{1} << k;
  return s;
}

// Saves input k when keep[k] is true (at most 64 inputs).
inline Saves saves_where(std::initializer_list<bool> keep, bool out = false) {
  Saves s{0, out};
  int k = 0;
  for (bool b : keep) s.inputs |= uint64_t{b} << k++;
  return s;
}

// Called by every op after computing `out`: if grad mode is on and some input requires
// grad, makes `out` a graph node with these inputs and backward closure. Returns `out`.
// This form saves everything; the one after it says what the backward reads.
Tensor record(Tensor out, std::vector<Tensor> inputs, const char* op, BackwardFn backward);
Tensor record(Tensor out, std::vector<Tensor> inputs, const char* op, Saves saved, BackwardFn backward);
// True when `t` will get a gradient: a product's backward reads the other operand's data
// only for an operand that wants one.
inline bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

// True when recording would happen for these inputs (lets ops skip saving tensors).
bool needs_grad(const std::vector<Tensor>& inputs);

// Inside an op's backward closure: `t` (one of its saved inputs) as a new handle on the same
// buffer, for the closure to write its gradient into, when this backward is the last reader
// of that buffer (the graph is not retained, and nothing but the op holds it); otherwise an
// undefined tensor. The cross-entropy of an LM head turns its [N, vocab] logits into their
// gradient in place this way, instead of holding both at the step's peak.
Tensor reuse_if_last_reader(const Tensor& t);

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

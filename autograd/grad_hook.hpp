// A hook on the moment backward has given a leaf its gradient (PyTorch's
// register_post_accumulate_grad_hook): data parallelism starts summing gradients there.
#pragma once

#include <functional>

#include "autograd/tensor.hpp"

namespace xg {

using LeafGradHook = std::function<void(const Tensor& leaf)>;

// RAII: while it lives, each backward on this thread calls `hook(leaf)` right after adding a
// leaf's gradient into leaf.grad(). A leaf's contributions are summed before that add, so the
// hook runs once per leaf and backward, when that backward will not touch its .grad again.
// xg::grad (which writes no .grad) never calls it. The previous hook comes back at the end.
class LeafGradHookGuard {
 public:
  explicit LeafGradHookGuard(LeafGradHook hook);
  ~LeafGradHookGuard();
  LeafGradHookGuard(const LeafGradHookGuard&) = delete;
  LeafGradHookGuard& operator=(const LeafGradHookGuard&) = delete;

 private:
  LeafGradHook hook_;
  const LeafGradHook* prev_;
};

}  // namespace xg

// The autocast scope's state and its cache of leaves' bf16 copies (autocast.hpp).
#include "autograd/autocast.hpp"

#include "autograd/graph.hpp"

#include <map>
#include <utility>

namespace xg {

namespace {

thread_local int g_depth = 0;          // nested enabled scopes alive on this thread
thread_local bool g_enabled = false;
// Leaf node and storage -> (the leaf, its bf16 copy), while an autocast scope is alive on this
// thread. The leaf is held so that its node and storage cannot be freed and their addresses
// reused for another tensor within the scope.
thread_local std::map<std::pair<const Node*, const Storage*>, std::pair<Tensor, Tensor>> g_bf16_leaves;

}  // namespace

autocast::autocast(bool enabled, Dtype dtype) : prev_(g_enabled) {
  check(dtype == kBFloat16, "autocast: only bfloat16 is supported on the CPU, got ", dtype_name(dtype));
  g_enabled = enabled;
  ++g_depth;
}

autocast::~autocast() {
  g_enabled = prev_;
  if (--g_depth == 0) g_bf16_leaves.clear();
}

bool autocast_enabled() { return g_enabled; }

namespace detail {

Tensor bf16_operand(const Tensor& t, bool cache_it) {
  if (t.dtype() == kBFloat16) return t;
  check(t.dtype() == kFloat32, "bf16 product: expected a float32 or bfloat16 operand, got ", dtype_name(t.dtype()),
        " ", shape_str(t.shape()));
  // Only a weight's copy is kept for the scope: a leaf that requires grad, or any leaf while a
  // graph is recorded. Without a graph every activation is a leaf too (gradient checkpointing's
  // first pass, evaluation), and keeping those kept every block's activations for the step.
  const bool cache = cache_it && g_enabled && t.is_leaf() && (t.requires_grad() || is_grad_enabled());
  const auto key = std::make_pair<const Node*, const Storage*>(t.node(), t.node()->storage.get());
  if (cache) {
    auto it = g_bf16_leaves.find(key);
    if (it != g_bf16_leaves.end()) return it->second.second;
  }
  Tensor out = t.detach().to(kBFloat16);
  if (cache) g_bf16_leaves.emplace(key, std::make_pair(t, out));
  return out;
}

}  // namespace detail

}  // namespace xg

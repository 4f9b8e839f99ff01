// Grad mode, op recording, and the backward engine: an iterative topological sort, one
// call of each node's closure in reverse order, gradients accumulated through one helper.
#include "autograd/graph.hpp"

#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd/anomaly.hpp"
#include "autograd/autocast.hpp"
#include "autograd/broadcast.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/grad_hook.hpp"

namespace xg {

namespace detail {
extern thread_local const char* g_backward_op;  // tensor.cpp
}

namespace {
thread_local bool g_grad_enabled = true;
thread_local const LeafGradHook* g_leaf_hook = nullptr;  // LeafGradHookGuard's

// While alive, an error reading data an op did not save names `op` (a checkpoint's closure
// runs a backward of its own inside, so the previous name comes back after it).
// It also says whether the op's saved tensors go right after its closure (reuse_if_last_reader).
thread_local bool g_frees_saved = false;
class BackwardOfOp {
 public:
  BackwardOfOp(const char* op, bool frees_saved) : prev_(detail::g_backward_op), prev_frees_(g_frees_saved) {
    detail::g_backward_op = op;
    g_frees_saved = frees_saved;
  }
  ~BackwardOfOp() {
    detail::g_backward_op = prev_;
    g_frees_saved = prev_frees_;
  }
  BackwardOfOp(const BackwardOfOp&) = delete;
  BackwardOfOp& operator=(const BackwardOfOp&) = delete;

 private:
  const char* prev_;
  bool prev_frees_;
};
}  // namespace

Tensor reuse_if_last_reader(const Tensor& t) {
  if (!g_frees_saved || !t.defined() || t.is_edge()) return Tensor();
  const Node* n = t.node();
  if (n->handles.load(std::memory_order_acquire) != 1 || n->storage.use_count() != 1) return Tensor();
  return t.detach();
}

bool is_grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { g_grad_enabled = prev_; }

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(Tensor out, std::vector<Tensor> inputs, const char* op, BackwardFn backward) {
  return record(std::move(out), std::move(inputs), op, Saves{}, std::move(backward));
}

namespace {

// The bf16 copy a node keeps of a saved float32 input. Ops reading the same tensor share one
// copy: an adapted q_proj and v_proj both keep the norm's output, which would otherwise be kept
// twice. The last copy made is remembered by its source's node, weakly (neither is kept alive).
Tensor bf16_copy(const Tensor& x) {
  thread_local std::weak_ptr<Node> last_source, last_copy;
  if (last_source.lock().get() == x.node()) {
    std::shared_ptr<Node> copy = last_copy.lock();
    if (copy && copy->storage) return Tensor(std::move(copy));
  }
  NoGradGuard no_grad;
  Tensor c = x.to(kBFloat16);
  last_source = x.node_ptr();
  last_copy = c.node_ptr();
  return c;
}

}  // namespace

Tensor record(Tensor out, std::vector<Tensor> inputs, const char* op, Saves saved, BackwardFn backward) {
  if (!needs_grad(inputs)) return out;
  Node* n = out.node();
  n->requires_grad = true;
  n->op = op;
  // Anomaly mode reads every input's values (which one held NaN, where it came from): it keeps
  // them all, as a debugging mode may.
  if (is_anomaly_enabled()) saved = Saves{};
  const bool pack = saved.bf16_ok != 0 && autocast_enabled();
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const bool keep = k < 64 && ((saved.inputs >> k) & 1);
    if (!inputs[k].defined() || (keep && !(pack && ((saved.bf16_ok >> k) & 1) && inputs[k].dtype() == kFloat32))) continue;
    if (keep) {  // kept as a bf16 copy
      if (n->packed.empty()) n->packed.resize(inputs.size());
      n->packed[k] = bf16_copy(inputs[k]);
    }
    inputs[k] = inputs[k].edge();
  }
  n->inputs = std::move(inputs);
  n->backward = std::move(backward);
  if (saved.out) {
    n->out_saved = true;
    n->handles.fetch_add(1, std::memory_order_relaxed);
  }
  if (is_anomaly_enabled()) detail::check_forward_anomaly(out, op);
  return out;
}

namespace {

// Nodes reachable from the roots through tensors that require grad, inputs before the
// nodes made from them. Iterative depth-first walk with an explicit stack, so an
// arbitrarily deep graph cannot overflow the call stack.
std::vector<std::shared_ptr<Node>> topo_order(const std::vector<Tensor>& roots) {
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack;  // node, next input
  for (const Tensor& r : roots) {
    if (!seen.insert(r.node()).second) continue;
    stack.emplace_back(r.node_ptr(), 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (node->freed) {
        throw Error(str_cat("backward: trying to backward through the graph a second time (through '", node->op,
                        "', whose saved tensors were freed by the first backward); pass "
                        "retain_graph=true to the first backward"));
      }
      if (next < node->inputs.size()) {
        const Tensor& in = node->inputs[next++];
        if (in.defined() && in.requires_grad() && seen.insert(in.node()).second)
          stack.emplace_back(in.node_ptr(), 0);
        continue;
      }
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

// The inputs a closure reads, with the bf16 copies of packed ones widened back to float32
// (fresh tensors that say whether the input wants a gradient, as the closure asks).
std::vector<Tensor> unpacked(const Node& node) {
  std::vector<Tensor> in = node.inputs;
  for (std::size_t k = 0; k < node.packed.size(); ++k) {
    if (!node.packed[k].defined()) continue;
    in[k] = node.packed[k].to(kFloat32);
    if (node.inputs[k].requires_grad()) in[k].requires_grad_(true);
  }
  return in;
}

// True when nothing but `t` itself refers to its node or its storage.
bool sole_owner(const Tensor& t) { return t.node_ptr().use_count() == 1 && t.node()->storage.use_count() == 1; }

// The single place where gradients add up: reduces `g` to `shape` (summing broadcast axes)
// and adds it to `slot`. A .grad slot (in_place) is later accumulated in place, so it may
// take `g` itself only when nobody else holds g's node or storage; otherwise it copies.
// A pending gradient of an inner node takes `g` as it is (it may be shared) and adds in
// place only while nothing else holds it (a captured gradient, a view another slot shares,
// a tensor an op saved); otherwise out of place. In place saves a fresh buffer per add: the
// normed input of an attention block collects q's, k's and v's gradients in one.
void accumulate(Tensor& slot, Tensor g, const Shape& shape, bool in_place) {
  Tensor r = sum_to(g, shape);
  g = Tensor();  // so that sole_owner(r) counts only other holders
  if (!slot.defined()) {
    slot = (in_place && !sole_owner(r)) ? r.detach().clone() : std::move(r);
  } else if (in_place || sole_owner(slot)) {
    add_(slot, r);
  } else {
    slot = add(slot, r);
  }
}

void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                  bool retain_graph, const std::vector<Tensor>* capture, std::vector<Tensor>* captured) {
  check(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: got ", grad_outputs.size(),
        " gradients for ", outputs.size(), " outputs");
  std::unordered_map<Node*, Tensor> grads;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    check(out.defined(), "backward: output ", i, " is an undefined tensor");
    check(out.requires_grad(), "backward: output ", i, " of shape ", shape_str(out.shape()),
          " does not require grad and has no grad_fn (no input of the ops that made it requires grad)");
    Tensor g;
    if (grad_outputs.empty() || !grad_outputs[i].defined()) {
      check(out.numel() == 1, "backward: grad can be implicitly created only for scalar outputs, got shape ",
            shape_str(out.shape()), "; pass a gradient of that shape");
      g = ones(out.shape(), out.dtype());
    } else {
      g = grad_outputs[i];
      check(g.shape() == out.shape(), "backward: gradient shape ", shape_str(g.shape()),
            " does not match output shape ", shape_str(out.shape()));
      check(g.dtype() == out.dtype(), "backward: gradient dtype ", dtype_name(g.dtype()),
            " does not match output dtype ", dtype_name(out.dtype()));
    }
    accumulate(grads[out.node()], g, out.shape(), false);
  }

  std::unordered_set<Node*> wanted;
  if (capture)
    for (const Tensor& t : *capture) wanted.insert(t.node());

  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Node>> order = topo_order(outputs);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = it->get();
    auto found = grads.find(node);
    if (found == grads.end()) continue;
    Tensor g = std::move(found->second);
    grads.erase(found);

    if (capture) {
      if (wanted.count(node))
        for (std::size_t k = 0; k < capture->size(); ++k)
          if ((*capture)[k].node() == node) (*captured)[k] = g;
    } else if (node->is_leaf()) {
      accumulate(node->grad, std::move(g), node->shape, true);
      if (g_leaf_hook) (*g_leaf_hook)(Tensor(*it));
      continue;
    } else if (node->retains_grad) {
      accumulate(node->grad, g, node->shape, true);
    }
    if (node->is_leaf()) continue;

    Tensor out = node->out_saved ? Tensor(*it) : Tensor(*it).edge();
    std::vector<Tensor> in_grads;
    {
      BackwardOfOp running(node->op, !retain_graph);
      if (node->packed.empty())
        in_grads = node->backward(g, out, node->inputs);  // by reference: a copy would count as a reader
      else
        in_grads = node->backward(g, out, unpacked(*node));
    }
    check(in_grads.size() == node->inputs.size(), "backward of '", node->op, "' returned ", in_grads.size(),
          " gradients for ", node->inputs.size(), " inputs");
    if (is_anomaly_enabled()) detail::check_backward_anomaly(out, in_grads);
    for (std::size_t k = 0; k < in_grads.size(); ++k) {
      const Tensor& in = node->inputs[k];
      if (!in.defined() || !in.requires_grad() || !in_grads[k].defined()) continue;
      check(in_grads[k].dtype() == in.dtype(), "backward of '", node->op, "': gradient dtype ",
            dtype_name(in_grads[k].dtype()), " for an input of dtype ", dtype_name(in.dtype()));
      accumulate(grads[in.node()], in_grads[k], in.shape(), false);
    }
    if (!retain_graph) {
      node->backward = nullptr;
      node->inputs.clear();
      node->packed.clear();
      node->freed = true;
      if (node->out_saved) {  // the closure's pin on its output's data
        node->out_saved = false;
        if (node->handles.fetch_sub(1, std::memory_order_acq_rel) == 1) node->storage.reset();
      }
    }
  }
}

}  // namespace

LeafGradHookGuard::LeafGradHookGuard(LeafGradHook hook) : hook_(std::move(hook)), prev_(g_leaf_hook) {
  g_leaf_hook = &hook_;
}
LeafGradHookGuard::~LeafGradHookGuard() { g_leaf_hook = prev_; }

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  run_backward(outputs, grad_outputs, retain_graph, nullptr, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool allow_unused) {
  for (std::size_t k = 0; k < inputs.size(); ++k)
    check(inputs[k].defined() && inputs[k].requires_grad(), "grad: input ", k, " does not require grad");
  std::vector<Tensor> result(inputs.size());
  run_backward(outputs, grad_outputs, retain_graph, &inputs, &result);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    check(allow_unused || result[k].defined(), "grad: input ", k, " of shape ", shape_str(inputs[k].shape()),
          " was not used in the graph of the outputs; pass allow_unused=true to get an undefined gradient");
  }
  return result;
}

}  // namespace xg

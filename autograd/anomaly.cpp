// DetectAnomalyGuard: NaN checks of forward outputs and non-finite checks of gradients.
#include "autograd/anomaly.hpp"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "autograd/detail/dispatch.hpp"
#include "autograd/elementwise.hpp"

namespace xg {

namespace {

struct AnomalyState {
  std::unordered_map<const Node*, std::string> names;  // named leaves
  std::vector<Tensor> keep;                            // keeps those nodes alive
};
thread_local const AnomalyState* g_anomaly = nullptr;

bool has_nan(const Tensor& t) {
  if (!t.defined() || (t.dtype() != kFloat32 && t.dtype() != kFloat64)) return false;
  return dispatch_float(t.dtype(), "detect_anomaly", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(t.raw_data());
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (std::isnan(p[i])) return true;
    return false;
  });
}

bool non_finite(const Tensor& t) {
  return t.defined() && (t.dtype() == kFloat32 || t.dtype() == kFloat64) && !isfinite_all(t);
}

// The named leaves closest upstream of `node` (breadth-first through the recorded inputs), as
// " in module 'a.b' (nearest parameter upstream: a.b.weight)", or "" when none is reachable.
// Where some of a node's inputs hold Inf or NaN, the search follows those only: the bad values
// came from there. Of the leaves at the least distance, the trainable ones (requires_grad) are
// named when there are any (a frozen weight does not change between steps, so it is seldom
// what went wrong); several are listed, their module being their common dotted prefix.
std::string nearest_named(const Node* node) {
  if (!g_anomaly || g_anomaly->names.empty()) return "";
  std::vector<const Node*> level{node};
  std::unordered_set<const Node*> seen{node};
  while (!level.empty()) {
    std::vector<std::string> found, trainable;
    std::vector<const Node*> next;
    for (const Node* n : level) {
      auto it = g_anomaly->names.find(n);
      if (it != g_anomaly->names.end()) {
        found.push_back(it->second);
        if (n->requires_grad) trainable.push_back(it->second);
        continue;
      }
      bool any_bad = false;
      for (const Tensor& in : n->inputs) any_bad = any_bad || non_finite(in);
      for (const Tensor& in : n->inputs)
        if (in.defined() && (!any_bad || non_finite(in)) && seen.insert(in.node()).second) next.push_back(in.node());
    }
    if (!found.empty()) {
      const std::vector<std::string>& names = trainable.empty() ? found : trainable;
      std::string module = names[0].substr(0, std::min(names[0].size(), names[0].rfind('.')));
      for (const std::string& p : names)  // the common dotted prefix
        while (!module.empty() && p.compare(0, module.size() + 1, module + ".") != 0) {
          const std::size_t dot = module.rfind('.');
          module = dot == std::string::npos ? "" : module.substr(0, dot);
        }
      constexpr std::size_t kListed = 4;
      std::string list = names[0];
      for (std::size_t i = 1; i < std::min(names.size(), kListed); ++i) list += ", " + names[i];
      if (names.size() > kListed) list += str_cat(" and ", names.size() - kListed, " more");
      return str_cat(" in module '", module.empty() ? std::string("(the model)") : module, "' (nearest parameter",
                     names.size() > 1 ? "s" : "", " upstream: ", list, ")");
    }
    level = std::move(next);
  }
  return "";
}

}  // namespace

DetectAnomalyGuard::DetectAnomalyGuard(std::vector<std::pair<std::string, Tensor>> named_leaves) : prev_(g_anomaly) {
  auto* s = new AnomalyState;
  for (auto& [name, t] : named_leaves) {
    if (!t.defined()) continue;
    s->names[t.node()] = name;
    s->keep.push_back(t);
  }
  g_anomaly = s;
}

DetectAnomalyGuard::~DetectAnomalyGuard() {
  delete g_anomaly;
  g_anomaly = static_cast<const AnomalyState*>(prev_);
}

bool is_anomaly_enabled() { return g_anomaly != nullptr; }

namespace detail {

void check_forward_anomaly(const Tensor& out, const char* op) {
  if (!g_anomaly || !has_nan(out)) return;
  std::string inputs = "inputs without NaN";
  for (const Tensor& in : out.node()->inputs)
    if (has_nan(in)) inputs = "an input that already held NaN (made outside the recorded graph)";
  throw AnomalyError(str_cat("detect_anomaly: op '", op, "' produced NaN in its output of shape ", shape_str(out.shape()),
                             " from ", inputs, nearest_named(out.node())));
}

void check_backward_anomaly(const Tensor& out, const std::vector<Tensor>& in_grads) {
  if (!g_anomaly) return;
  for (std::size_t k = 0; k < in_grads.size(); ++k)
    if (non_finite(in_grads[k]))
      throw AnomalyError(str_cat("detect_anomaly: the backward of op '", out.node()->op, "' returned NaN or Inf in the gradient of its input ",
                                 k, " (shape ", shape_str(in_grads[k].shape()), ")", nearest_named(out.node())));
}

}  // namespace detail

}  // namespace xg

// Module registration, walks, modes and state dicts.
#include "nn/module.hpp"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "autograd/graph.hpp"

namespace xg::nn {

namespace {

void check_name(const std::string& name, const char* what) {
  check(!name.empty() && name.find('.') == std::string::npos, "Module::register_", what, ": name '", name,
        "' must be non-empty and contain no '.'");
}

bool has(const NamedTensors& v, const std::string& name) {
  return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
}

}  // namespace

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "parameter");
  check(!has(params_, name) && !has(buffers_, name), "Module::register_parameter: '", name, "' is already registered");
  check(t.defined(), "Module::register_parameter: '", name, "' is an undefined tensor");
  t = t.detach();  // a fresh leaf
  if (requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_name(name, "buffer");
  check(!has(params_, name) && !has(buffers_, name), "Module::register_buffer: '", name, "' is already registered");
  buffers_.emplace_back(name, t.detach());
  if (!persistent) non_persistent_.push_back(name);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check(!name.empty() && name.find('.') == std::string::npos, "Module::register_module: name '", name,
        "' must be non-empty and contain no '.'");
  check(m != nullptr, "Module::register_module: '", name, "' is null");
  for (const auto& c : children_)
    check(c.first != name, "Module::register_module: '", name, "' is already registered");
  children_.emplace_back(name, std::move(m));
}

Tensor Module::param(const std::string& name) const {
  for (const auto& p : params_)
    if (p.first == name) return p.second;
  throw Error(str_cat(this->name(), ": no parameter '", name, "'"));
}

Tensor Module::buffer(const std::string& name) const {
  for (const auto& b : buffers_)
    if (b.first == name) return b.second;
  throw Error(str_cat(this->name(), ": no buffer '", name, "'"));
}

void Module::collect_named(NamedTensors& out, const std::string& prefix, bool params, bool recurse,
                           bool persistent_only) const {
  for (const auto& [n, t] : params ? params_ : buffers_) {
    if (!params && persistent_only &&
        std::find(non_persistent_.begin(), non_persistent_.end(), n) != non_persistent_.end())
      continue;
    out.emplace_back(prefix + n, t);
  }
  if (!recurse) return;
  for (const auto& [n, c] : children_) c->collect_named(out, prefix + n + ".", params, true, persistent_only);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect_named(out, "", true, recurse, false);
  // A module shared under two names (tied weights) is listed once, like PyTorch.
  NamedTensors unique;
  std::unordered_set<const Node*> seen;
  for (auto& p : out)
    if (seen.insert(p.second.node()).second) unique.push_back(std::move(p));
  return unique;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(recurse)) out.push_back(p.second);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect_named(out, "", false, recurse, false);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& c : children_) out.push_back(c.second);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // Iterative walk, parents before children.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> stack(children_.rbegin(), children_.rend());
  while (!stack.empty()) {
    auto [n, m] = stack.back();
    stack.pop_back();
    out.emplace_back(n, m);
    const auto& kids = m->children_;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it) stack.emplace_back(n + "." + it->first, it->second);
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.zero_grad();
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::requires_grad_(bool on) {
  for (Tensor& p : parameters()) p.requires_grad_(on);
}

void Module::to(Dtype dtype) {
  check(is_floating(dtype), "Module::to: expected float32 or float64, got ", dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto& [n, t] : named_parameters()) {
    if (t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  }
  for (auto& [n, t] : named_buffers()) {
    if (is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  }
  rebuild_buffers(dtype);
  for (auto& [n, m] : named_modules()) m->rebuild_buffers(dtype);
}

EvalModeGuard::EvalModeGuard(Module& root) {
  modes_.emplace_back(&root, root.is_training());
  for (auto& [name, m] : root.named_modules()) modes_.emplace_back(m.get(), m->is_training());
  root.eval();
}

// Parents first, so that a child's own mode wins over the train(on) its parent spreads.
EvalModeGuard::~EvalModeGuard() {
  for (auto& [m, training] : modes_) m->train(training);
}

TensorMap Module::state_dict() const {
  NamedTensors all;
  collect_named(all, "", true, true, false);
  collect_named(all, "", false, true, true);
  TensorMap out;
  for (auto& [n, t] : all) out.emplace(n, t);
  return out;
}

void Module::load_state_dict(const TensorMap& dict, bool strict) {
  TensorMap own = state_dict();
  std::vector<std::string> missing, unexpected, wrong;
  for (const auto& [n, t] : own) {
    auto it = dict.find(n);
    if (it == dict.end()) {
      missing.push_back(n);
    } else if (it->second.shape() != t.shape()) {
      wrong.push_back(str_cat(n, " (checkpoint ", shape_str(it->second.shape()), ", model ", shape_str(t.shape()), ")"));
    }
  }
  for (const auto& [n, t] : dict)
    if (!own.count(n)) unexpected.push_back(n);
  if (!wrong.empty() || (strict && (!missing.empty() || !unexpected.empty()))) {
    std::ostringstream os;
    os << "load_state_dict: error(s) loading into " << name() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      os << " " << what << ": ";
      for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
      os << ".";
    };
    if (strict) list("missing keys", missing);
    if (strict) list("unexpected keys", unexpected);
    list("wrong shapes", wrong);
    throw Error(os.str());
  }
  // All checked: now copy (converting dtype like PyTorch's copy_) into existing storage.
  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = dict.find(n);
    if (it == dict.end()) continue;
    t.copy_(it->second.dtype() == t.dtype() ? it->second : it->second.to(t.dtype()));
  }
}

std::string Module::repr(int indent) const {
  std::ostringstream os;
  os << name() << "(" << extra_repr();
  if (!children_.empty()) {
    os << "\n";
    for (const auto& [n, c] : children_)
      os << std::string(indent + 2, ' ') << "(" << n << "): " << c->repr(indent + 2) << "\n";
    os << std::string(indent, ' ');
  }
  os << ")";
  return os.str();
}

void save(const Module& m, const std::string& path) {
  TensorMap sd = m.state_dict();
  io::save_safetensors(path, sd, {{"format", "pt"}});
}

void load(Module& m, const std::string& path, bool strict) { m.load_state_dict(io::load_safetensors(path), strict); }

}  // namespace xg::nn

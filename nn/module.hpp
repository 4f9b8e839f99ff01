// xg::nn::Module: named parameters, buffers and child modules, PyTorch's dotted names,
// train/eval mode, and state dicts that cross over with PyTorch's (safetensors files).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tensor.hpp"
#include "io/safetensors.hpp"

namespace xg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
struct NamingScheme;  // nn/naming.hpp

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Registration, by the names PyTorch's module would use ("weight", "w_q", "layers").
  // Parameters become leaves that require grad; buffers do not (persistent ones go into
  // the state dict). Returns the registered handle.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Walks, in registration order, with dotted names ("layers.0.attention.w_q.weight").
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  std::vector<std::shared_ptr<Module>> children() const;
  // Every module below this one (not this one itself), with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;

  // Mode: train (default) or eval; applies to every child.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();                // drops every parameter's gradient
  int64_t num_parameters() const;  // total elements of all parameters
  void requires_grad_(bool on);    // e.g. freeze a base model for LoRA
  // Converts parameters and buffers to another float dtype in place: handles stay valid.
  // Each module below (and this one) then rebuilds what it derives from constants in the new
  // dtype (rebuild_buffers), so a float64 RoPE table is computed in float64, not widened.
  void to(Dtype dtype);

  // Parameters and persistent buffers by dotted name (sharing storage with the module).
  TensorMap state_dict() const;
  // Copies each tensor into the existing storage (never rebinds a handle an optimizer
  // holds). With strict, missing and unexpected keys are an error; a wrong shape always is.
  // The error lists every missing, unexpected and wrongly-shaped key with both shapes.
  void load_state_dict(const TensorMap& dict, bool strict = true);
  // The same under another framework's names (nn/naming.hpp: NamingScheme::get("hf_llama")).
  // state_dict(scheme) shares storage except for tensors the scheme packs or permutes;
  // load_state_dict(dict, scheme) is strict, and its error names every missing, unexpected
  // or wrongly-shaped name with the closest expected (or given) one.
  TensorMap state_dict(const NamingScheme& scheme) const;
  void load_state_dict(const TensorMap& dict, const NamingScheme& scheme);

  // "Linear(in_features=4, out_features=8, bias=true)"; children indent below.
  virtual std::string name() const { return "Module"; }
  virtual std::string extra_repr() const { return ""; }
  std::string repr(int indent = 0) const;

 protected:
  // For subclasses that own parameters under a path of their own (e.g. ModuleList).
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // Called by to(dtype) after the conversion: a module whose buffers are computed from
  // constants (RoPE's cos/sin, the sinusoidal table) recomputes them in `dtype` here.
  virtual void rebuild_buffers(Dtype /*dtype*/) {}
  // A registered parameter or buffer by local name (throws if absent).
  Tensor param(const std::string& name) const;
  Tensor buffer(const std::string& name) const;

 private:
  void collect_named(NamedTensors& out, const std::string& prefix, bool params, bool recurse,
                     bool persistent_only) const;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::string> non_persistent_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A module whose forward maps one tensor to one tensor (Linear, Embedding, Dropout, the
// norms, the FFNs, the activations): what nn::Sequential chains, as torch.nn.Sequential
// chains modules with a one-argument forward.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

// A list of modules registered as "0", "1", ... (torch.nn.ModuleList).
template <class M = Module>
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<M> m) {
    add_child(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  std::size_t size() const { return items_.size(); }
  const std::shared_ptr<M>& operator[](std::size_t i) const { return items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::string name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

// Modules applied in order, registered as "0", "1", ... (torch.nn.Sequential), so that
// nn.Sequential(Linear, ReLU, Linear)'s state dict ("0.weight", "2.bias") loads by name.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> modules) {
    for (auto& m : modules) push_back(std::move(m));
  }
  void push_back(std::shared_ptr<UnaryModule> m) {
    add_child(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  // x -> items[n-1](... items[0](x)); the identity when empty.
  Tensor forward(const Tensor& x) const override {
    Tensor h = x;
    for (const auto& m : items_) h = m->forward(h);
    return h;
  }
  std::size_t size() const { return items_.size(); }
  const std::shared_ptr<UnaryModule>& operator[](std::size_t i) const { return items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::string name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<UnaryModule>> items_;
};

// RAII: puts a module and every module below it in eval mode, and restores each one's own
// mode when it goes out of scope, also when an exception leaves the scope (PyTorch code
// writes model.eval() ... model.train(), which an exception skips).
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module& root);
  ~EvalModeGuard();
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  std::vector<std::pair<Module*, bool>> modes_;  // every module's own mode, parents first
};

// Writes the state dict as safetensors under PyTorch's names (temporary file + rename).
void save(const Module& m, const std::string& path);
// Loads a safetensors state dict (e.g. one saved from PyTorch) into the module's storage.
void load(Module& m, const std::string& path, bool strict = true);

}  // namespace xg::nn

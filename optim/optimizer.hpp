// xg::optim::Optimizer, the base of SGD, Adam and AdamW: parameter groups with their own
// options, zero_grad, per-parameter state, state dicts and safetensors files for resuming.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd/error.hpp"
#include "autograd/tensor.hpp"
#include "io/safetensors.hpp"
#include "optim/shard.hpp"

namespace xg::optim {

// (dotted name, parameter) pairs, as nn::Module::named_parameters() returns them.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// One entry of torch's optimizer.param_groups: parameters and the options they step with.
template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
};

// What an optimizer keeps for one parameter once it has been updated: the number of
// updates and named buffers ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq").
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
};

// A group's options as named numbers (bools as 0/1), for state dicts.
using OptionValues = std::vector<std::pair<std::string, double>>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (one without is skipped, as in torch).
  virtual void step() = 0;
  // Drops every gradient (set_to_none, torch 2's default) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  const std::string& name() const { return name_; }  // "SGD", "Adam", "AdamW"
  virtual std::size_t num_groups() const = 0;
  virtual const std::vector<Tensor>& group_params(std::size_t group) const = 0;
  std::vector<Tensor> parameters() const;  // every group's, in order (the state's indices)
  // A group's learning rate; schedulers set it before each step.
  virtual double lr(std::size_t group) const = 0;
  virtual void set_lr(std::size_t group, double lr) = 0;
  // The state of the parameter at `index` in parameters(), or nullptr before its first update.
  const ParamState* state(std::size_t index) const;

  // Everything a resumed run needs, under names like torch's state_dict:
  //   state.<i>.step (int64), state.<i>.<buffer>     per parameter index i in parameters()
  //   param_groups.<g>.params (int64 indices), param_groups.<g>.<option> (float64)
  // The tensors are copies: later steps do not change a state dict already taken.
  // With buffers = false the per-parameter buffers are left out (the steps stay).
  TensorMap state_dict(bool buffers = true) const;
  // Restores a state dict taken from an optimizer of the same kind built over parameters
  // of the same shapes in the same groups (e.g. a fresh one). Group options are restored too.
  void load_state_dict(const TensorMap& dict);
  // state_dict() as a safetensors file (temporary file + rename), and back.
  void save(const std::string& path) const;
  void load(const std::string& path);

  // ZeRO stage 1: from now on this optimizer updates only `owned[i]` of parameter i (flattened,
  // in parameters() order) and keeps state only for it, as flat buffers of that size; step()
  // reads the gradient and writes the parameter there alone. Full-size state already held, or
  // loaded later by load_state_dict, is cut down to the slice; state_dict() gives the slices
  // (finetune::ZeroShards gathers them into a full state dict). Adam and AdamW only.
  void shard(std::vector<Shard> owned);
  bool sharded() const { return !shards_.empty(); }
  const std::vector<Shard>& shards() const { return shards_; }
  // ZeRO stage 2: the next step() reads parameter i's gradient from slices[i], which holds its
  // shard alone (shards()[i].size() elements, flat; undefined: no gradient), not from .grad,
  // which the ranks have dropped. zero_grad() drops them.
  void set_grad_slices(std::vector<Tensor> slices);
  // The bytes of the state buffers this optimizer holds (the moments), e.g. to see ZeRO's 1/N.
  int64_t state_bytes() const;

 protected:
  // `buffers`: the names of the per-parameter state buffers this optimizer keeps.
  Optimizer(std::string name, std::vector<std::string> buffers)
      : name_(std::move(name)), buffers_(std::move(buffers)) {}
  virtual OptionValues group_options(std::size_t group) const = 0;
  // Sets a group's options from named numbers (every option present); validates them.
  virtual void set_group_options(std::size_t group, const std::map<std::string, double>& values) = 0;
  // Checks a new group's parameters (floating leaves, none already in another group) and
  // makes room for their state.
  void register_params(const std::vector<Tensor>& params);
  // Throws if the optimizer holds no parameter at all (torch: "empty parameter list").
  void check_not_empty() const;
  // Whether step() honours shards_ (Adam and AdamW do).
  virtual bool can_shard() const { return false; }
  // The part of parameter i this optimizer updates: its shard, or all of it.
  Shard owned(std::size_t i, const Tensor& p) const { return sharded() ? shards_[i] : Shard{0, p.numel()}; }
  // Parameter i's gradient and the index in it of the first element step() updates: .grad and
  // its shard's start, or (ZeRO stage 2) the slice set_grad_slices gave and 0.
  std::pair<Tensor, int64_t> owned_grad(std::size_t i, const Tensor& p) const;

  std::string name_;
  std::vector<std::string> buffers_;
  std::vector<ParamState> state_;  // one per parameter, in parameters() order
  std::vector<Shard> shards_;      // ZeRO: the owned slice of each parameter (empty: all of every one)
  std::vector<Tensor> grad_slices_;  // ZeRO stage 2: the gradients of those slices (empty: .grad)
  std::unordered_set<const Node*> seen_;
};

// Group bookkeeping shared by the optimizers; `Options` is a plain struct with at least
// `lr` and `weight_decay`. Subclasses say how to validate and (de)serialise their options.
template <class Options>
class OptimizerBase : public Optimizer {
 public:
  // Appends a group (torch's add_param_group); its options are validated.
  void add_param_group(ParamGroup<Options> group) {
    validate(group.options);
    register_params(group.params);
    groups_.push_back(std::move(group));
  }
  std::vector<ParamGroup<Options>>& param_groups() { return groups_; }
  const std::vector<ParamGroup<Options>>& param_groups() const { return groups_; }
  // A group's options, to read or change between steps (torch's param_groups[g]["lr"] = ...).
  Options& options(std::size_t group = 0) { return groups_.at(group).options; }
  const Options& options(std::size_t group = 0) const { return groups_.at(group).options; }

  std::size_t num_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& group_params(std::size_t group) const override { return groups_.at(group).params; }
  double lr(std::size_t group) const override { return groups_.at(group).options.lr; }
  void set_lr(std::size_t group, double lr) override {
    check(lr >= 0, name_, ": invalid learning rate lr = ", lr, " for group ", group, " (must be >= 0)");
    groups_.at(group).options.lr = lr;
  }

 protected:
  OptimizerBase(std::string name, std::vector<std::string> buffers) : Optimizer(std::move(name), std::move(buffers)) {}
  // The constructors' common path: every group, then the empty-list check.
  void init(std::vector<ParamGroup<Options>> groups) {
    for (auto& g : groups) add_param_group(std::move(g));
    check_not_empty();
  }
  // Throws xg::Error naming the optimizer and the bad option.
  virtual void validate(const Options& o) const = 0;
  virtual OptionValues to_values(const Options& o) const = 0;
  virtual Options from_values(const std::map<std::string, double>& v) const = 0;

  OptionValues group_options(std::size_t group) const override { return to_values(groups_.at(group).options); }
  void set_group_options(std::size_t group, const std::map<std::string, double>& values) override {
    Options o = from_values(values);
    validate(o);
    groups_.at(group).options = o;
  }

  std::vector<ParamGroup<Options>> groups_;
};

// Which parameters get no weight decay: takes the dotted name and the parameter.
using NoDecayFn = std::function<bool(const std::string& name, const Tensor& p)>;

// The usual rule: no decay on 1-d (and 0-d) parameters, i.e. biases and norm weights, and
// none on embeddings, recognised by name: a name part containing "embed" (any case), or
// equal to "wte", "wpe" (GPT-2) or "pos" (nn::Decoder's learned positions).
bool default_no_decay(const std::string& name, const Tensor& p);

// Splits named parameters into two groups with `options`: group 0 decays (options as
// given), group 1 does not (weight_decay = 0). Parameters that do not require grad (frozen)
// are left out. Both groups are always returned, so their indices are fixed:
//   xg::optim::AdamW opt(xg::optim::weight_decay_groups(model.named_parameters(), opts));
template <class Options>
std::vector<ParamGroup<Options>> weight_decay_groups(const NamedTensors& named, const Options& options,
                                                     const NoDecayFn& no_decay = default_no_decay) {
  ParamGroup<Options> decay{{}, options};
  ParamGroup<Options> plain{{}, options};
  plain.options.weight_decay = 0;
  for (const auto& [name, p] : named) {
    if (!p.defined() || !p.requires_grad()) continue;
    (no_decay(name, p) ? plain : decay).params.push_back(p);
  }
  return {decay, plain};
}

// Shared by the optimizers' validation: throws "<opt>: invalid <what> (<rule>)".
namespace detail {
void check_option(bool ok, const std::string& opt, const char* option, double value, const char* rule);
}  // namespace detail

}  // namespace xg::optim

// LoRA (Hu et al. 2021, as Hugging Face PEFT implements it): y = base(x) + scaling * B A dropout(x)
// on chosen Linear modules of any model; injection by target names, freezing, merge/unmerge.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/random.hpp"
#include "nn/linear.hpp"

namespace xg::finetune {

// PEFT's LoraConfig fields that xgrad supports (defaults: PEFT's r = 8, lora_alpha = 8).
struct LoRAConfig {
  int64_t r = 8;
  double alpha = 8;     // lora_alpha
  double dropout = 0;   // lora_dropout, on the adapter's input only
  // Which Linear modules get an adapter. Either a comma list (only letters, digits, '_', '.'
  // and ','), each entry matching a module whose path equals it or ends with "." + entry (PEFT's
  // rule for a list) or one of the short names q, k, v, o, gate, up, down standing for the
  // repo's projection names (q: w_q, W_q, q_proj; gate: w_gate, W_gate, w1; up: w_up, W_up, w3,
  // fc1; down: w_down, W_down, w2, fc2; ...), Hugging Face's q_proj ... down_proj standing for
  // the short names too (so q_proj selects w_q in xgrad's own models); or else a regex that must match the whole module
  // path (PEFT's re.fullmatch for a string target_modules).
  std::string targets = "q,v";
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r

  double scaling() const;
  // Throws xg::Error naming `who` and the field: r in [1, 65536], lora_alpha finite with a
  // scale of at most 1e4 in size, dropout in [0, 1), targets non-empty.
  void validate(const std::string& who = "LoRAConfig") const;
};

// Holder of one low-rank matrix under the name "weight", as torch's bias-free nn.Linear that
// PEFT uses for lora_A / lora_B (so the parameter is "<linear>.lora_A.weight").
class LoRAWeight : public nn::Module {
 public:
  LoRAWeight(int64_t in_features, int64_t out_features, Dtype dtype);
  Tensor weight() const { return weight_; }
  std::string name() const override { return "Linear"; }
  std::string extra_repr() const override;

 private:
  int64_t in_, out_;
  Tensor weight_;
};

// The adapter of one Linear: lora_A [r, in] (kaiming-uniform, a = sqrt 5), lora_B [out, r] (zeros),
// registered as children "lora_A" and "lora_B" of that Linear. Its delta is
// scale * scaling * (dropout(x) A^T) B^T, skipped when disabled or merged. Dropout uses the
// default generator and follows lora_A's train/eval mode (so the model's).
class LoRAAdapter : public nn::LinearAdapter {
 public:
  // Attaches a new adapter to `base` (which must have none) and freezes base's own weight and
  // bias. A is drawn from `gen`.
  static std::shared_ptr<LoRAAdapter> attach(nn::Linear& base, const LoRAConfig& config, Generator& gen);

  bool active() const override { return enabled_ && !merged_; }
  // x W^T + b + scaling (dropout(x) A^T) B^T, one op.
  Tensor forward(const Tensor& x, const Tensor& weight, const Tensor& bias) const override;

  Tensor A() const { return A_->weight(); }  // [r, in]
  Tensor B() const { return B_->weight(); }  // [out, r]
  int64_t r() const { return r_; }
  double alpha() const { return alpha_; }
  double dropout() const { return dropout_; }
  bool use_rslora() const { return use_rslora_; }
  // alpha / r (or alpha / sqrt r) times the scale set by set_scale (PEFT's set_scale).
  double scaling() const { return scale_ * base_scaling_; }
  void set_scale(double scale);

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }
  // W += scaling B A (then forward is the plain Linear); unmerge subtracts what merge added.
  bool merged() const { return merged_; }
  void merge();
  void unmerge();

 private:
  LoRAAdapter() = default;
  void add_delta(double s);  // W += s B A
  std::shared_ptr<LoRAWeight> A_, B_;
  Tensor base_weight_;  // the Linear's weight (a handle: Module::to and load_state_dict keep it)
  int64_t r_ = 0;
  double alpha_ = 0, dropout_ = 0, base_scaling_ = 0, scale_ = 1, merged_scaling_ = 0;
  bool use_rslora_ = false, enabled_ = true, merged_ = false;
};

// The LoRA adapter attached to `linear`, or null.
std::shared_ptr<LoRAAdapter> lora_of(const nn::Linear& linear);

// A standalone LoRA linear layer: an nn::Linear (weight, bias) with an adapter attached, so its
// parameters are named weight, bias, lora_A.weight, lora_B.weight. At init its output equals
// the base output exactly (B = 0). To add LoRA to an existing Linear in place, use
// LoRAAdapter::attach (what inject_lora does); the second constructor copies one instead.
class LoRALinear : public nn::Linear {
 public:
  LoRALinear(int64_t in_features, int64_t out_features, const LoRAConfig& config, Generator& gen,
             bool bias = true, Dtype dtype = kFloat32);
  // A copy of base's weight and bias (base is left untouched) with a fresh adapter.
  LoRALinear(const nn::Linear& base, const LoRAConfig& config, Generator& gen);
  LoRAAdapter& lora() const { return *lora_; }
  std::string name() const override { return "LoRALinear"; }

 private:
  std::shared_ptr<LoRAAdapter> lora_;
};

// Every Linear module of `model` (dotted path, module), in named_modules order, once each.
std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> linear_modules(const nn::Module& model);
// The same under the module names of a naming scheme (nn/naming.hpp), the paths PEFT sees:
// "xgrad" keeps the model's own; "hf_llama" names a Hugging Face model's as transformers does
// (layers.0.attention.w_q is model.layers.0.self_attn.q_proj). Targets are matched against
// these paths, and adapter files name them. A Linear the scheme has no name for, or RoPE
// attention in another layout than the scheme's (adapter rows are not permuted), is an error.
// Every function below that takes `naming` means this, but for the fused namings.
//
// Fused namings ("hf_gpt2", "hf_phi3"): one of PEFT's modules there (GPT-2's c_attn, Phi-3's
// qkv_proj and gate_up_proj) is several of xgrad's Linears, so the functions below name each
// Linear by its xgrad path (layers.0.attention.w_q), and match targets as PEFT matches them
// against PEFT's module paths (peft_modules): a list entry equal to a module path or a dotted
// suffix of it ("c_attn", "attn.c_attn", "transformer.h.0.attn.c_attn"), or a regex matching a
// whole module path, selects every part of that module; the short names and q_proj ...
// down_proj select the part of that role alone (q_proj: the query rows of c_attn or qkv_proj).
std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> linear_modules(const nn::Module& model,
                                                                                const std::string& naming);

// True for the namings whose modules fuse several of xgrad's Linears: hf_gpt2, hf_phi3.
bool fused_naming(const std::string& naming);

// One Linear as PEFT sees it under a naming: its path and the xgrad Linears it is made of, in
// the fused matrix's row order (one part for a plain Linear).
struct PeftModule {
  std::string path;
  std::vector<std::string> parts;
};
// The Linear modules of `model` under `naming`, in the order of their external names. A module
// stored in another RoPE layout than the model's (its adapter's rows would need permuting) is an
// error naming it.
std::vector<PeftModule> peft_modules(const nn::Module& model, const std::string& naming);

// The paths of the Linear modules of `model` that `targets` (LoRAConfig::targets syntax)
// selects. An entry of a list (or a regex) that selects nothing, or an invalid regex, is an
// xg::Error naming `who`, the target and listing the model's Linear module paths.
std::vector<std::string> match_targets(const nn::Module& model, const std::string& targets,
                                       const std::string& who = "inject_lora", const std::string& naming = "xgrad");

// The entries of a comma list `targets` that select some Linear of `model`, joined again (a
// default list of every projection kind, on a model without some kinds: GPT-2 has no gate).
// A regex is returned as it is.
std::string targets_present(const nn::Module& model, const std::string& targets, const std::string& naming = "xgrad");

// True when `targets` is a regex rather than a comma list (LoRAConfig::targets syntax).
bool targets_are_regex(const std::string& targets);
// For a comma list: the entries as PEFT's target_modules needs them, each short name replaced
// by the module names it selects in `model` (w_q, fc1, ...; q_proj, ... under hf_llama); sorted,
// without repeats.
std::vector<std::string> peft_target_names(const nn::Module& model, const std::string& targets,
                                           const std::string& naming = "xgrad");

// Freezes every parameter of `model` (requires_grad false) and attaches an adapter to each
// Linear selected by config.targets; returns their paths. Nothing changes when it throws
// (unknown target, a selected Linear that already has an adapter, bad config).
// NOTE: the base parameters keep their names (layers.0.attention.w_q.weight), so a base state
// dict still loads into an injected model with strict = false; with strict = true the adapter
// keys (...lora_A.weight) are reported missing, as PyTorch does for a PEFT-wrapped module.
std::vector<std::string> inject_lora(nn::Module& model, const LoRAConfig& config, Generator& gen,
                                     const std::string& naming = "xgrad");

// (path, adapter) for every Linear of `model` that has a LoRA adapter; `model` itself (a
// LoRALinear) comes first under the path "".
std::vector<std::pair<std::string, std::shared_ptr<LoRAAdapter>>> lora_adapters(const nn::Module& model,
                                                                                const std::string& naming = "xgrad");

// The adapters' A and B (what goes to the optimizer), with their dotted names.
nn::NamedTensors named_lora_parameters(const nn::Module& model);
std::vector<Tensor> lora_parameters(const nn::Module& model);

// Merges every unmerged adapter into its base weight / unmerges every merged one. An error
// when the model has no adapters.
void merge(nn::Module& model);
void unmerge(nn::Module& model);

// Scales every adapter's delta by `scale` (xg-generate's --adapter-scale; 1 = as trained).
// An error when the model has no adapters or one is merged.
void set_adapter_scale(nn::Module& model, double scale);

// RAII: while alive, every adapter of `model` is disabled, so the model computes the base
// network (the reference policy of DPO / GRPO without a second copy); restores the previous
// enabled flags on destruction. An error when an adapter is merged (unmerge first).
class DisableAdapters {
 public:
  explicit DisableAdapters(const nn::Module& model);
  ~DisableAdapters();
  DisableAdapters(const DisableAdapters&) = delete;
  DisableAdapters& operator=(const DisableAdapters&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<LoRAAdapter>, bool>> saved_;
};

}  // namespace xg::finetune

// LoRA: the adapter behind nn::Linear's hook, LoRALinear, target matching, injection,
// merge/unmerge, adapter scale and the DisableAdapters guard.
#include "finetune/lora.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "autograd/detail/dispatch.hpp"
#include "autograd/detail/op_util.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "nn/sublayer.hpp"
#include "nn/init.hpp"
#include "nn/naming.hpp"

namespace xg::finetune {

// NOTE: tutorial LoRALinear code (Hu et al. 2021's LoRA written by hand: a base nn.Linear in
// `self.weight`, `lora_a` / `lora_b`, alpha 1.0) commonly differs from PEFT / PyTorch in three
// places, and xgrad follows PEFT: (1) `self.weight.requires_grad = False` sets an attribute on
// the nn.Linear module and freezes nothing (PEFT freezes the base parameters); (2) a base
// output computed under torch.no_grad() also cuts the gradient to x through the base path
// (PEFT only freezes W, so x gets W^T g + the adapter's part); (3) comments that give A as
// [in_features, rank] and B as [rank, out_features], while nn.Linear stores lora_a.weight as
// [rank, in] and lora_b.weight as [out, rank] (PEFT's lora_A.weight / lora_B.weight shapes).
// Such code's lora_a / lora_b are PEFT's lora_A / lora_B here, and its default alpha 1.0 is
// PEFT's 8 (with r 8).

double LoRAConfig::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

namespace {
// What one adapter needs (targets matter only for injection).
// NOTE: the bounds are far beyond any published recipe (r 4-256, a scale alpha / r of 0.5-4):
// they only keep the adapters' matrices allocatable and their products finite.
constexpr int64_t kMaxRank = 65536;
constexpr double kMaxScale = 1e4;

void check_numbers(const LoRAConfig& c, const std::string& who) {
  check(c.r >= 1, who, ": r must be at least 1, got ", c.r);
  check(c.r <= kMaxRank, who, ": r must be at most ", kMaxRank, ", got ", c.r);
  check(std::isfinite(c.alpha), who, ": lora_alpha must be a finite number, got ", c.alpha);
  check(std::abs(c.scaling()) <= kMaxScale, who, ": lora_alpha ", c.alpha, " with r ", c.r, " scales the adapter by ",
        c.scaling(), c.use_rslora ? " (rsLoRA: alpha / sqrt(r))" : "", ", beyond +-", kMaxScale,
        " (its products would overflow)");
  check(c.dropout >= 0 && c.dropout < 1, who, ": lora_dropout must be in [0, 1), got ", c.dropout);
}
}  // namespace

void LoRAConfig::validate(const std::string& who) const {
  check_numbers(*this, who);
  check(!targets.empty(), who, ": target modules must not be empty");
}

LoRAWeight::LoRAWeight(int64_t in_features, int64_t out_features, Dtype dtype)
    : in_(in_features), out_(out_features) {
  weight_ = register_parameter("weight", zeros({out_features, in_features}, dtype));
}

std::string LoRAWeight::extra_repr() const {
  return str_cat("in_features=", in_, ", out_features=", out_, ", bias=false");
}

std::shared_ptr<LoRAAdapter> LoRAAdapter::attach(nn::Linear& base, const LoRAConfig& config, Generator& gen) {
  check_numbers(config, "LoRA");
  check(base.adapter() == nullptr, "LoRA: this Linear(in_features=", base.in_features(),
        ", out_features=", base.out_features(), ") already has an adapter");
  // Adapters train in float32 on a base stored in bf16, q8_0 or q4_0 (QLoRA's recipe); float64 stays
  // float64 (gradient checks).
  const Dtype dt = base.weight().dtype() == kFloat64 ? kFloat64 : kFloat32;
  std::shared_ptr<LoRAAdapter> a(new LoRAAdapter());
  a->A_ = std::make_shared<LoRAWeight>(base.in_features(), config.r, dt);
  a->B_ = std::make_shared<LoRAWeight>(config.r, base.out_features(), dt);
  Tensor A = a->A_->weight();
  nn::init::kaiming_uniform_(A, std::sqrt(5.0), &gen);  // B stays zero: delta = 0 at init
  a->base_weight_ = base.weight();
  a->r_ = config.r;
  a->alpha_ = config.alpha;
  a->dropout_ = config.dropout;
  a->use_rslora_ = config.use_rslora;
  a->base_scaling_ = config.scaling();
  a->A_->train(base.is_training());
  a->B_->train(base.is_training());
  for (Tensor& p : base.parameters()) p.requires_grad_(false);
  base.register_module("lora_A", a->A_);
  base.register_module("lora_B", a->B_);
  base.set_adapter(a);
  return a;
}

// y = x W^T + b + s (h A^T) B^T, h = dropout(x), as PEFT's
// base_layer(x) + lora_B(lora_A(dropout(x))) * scaling (x: [..., in], W: [out, in], b: [out],
// A: [r, in], B: [out, r] -> [..., out]; s: scaling). With h = x * m (m: 0 or 1 / (1 - p),
// drawn as xg::dropout draws it) and u = h A^T:
//   du = s g B,   dB = s g^T u,   dA = du^T h,   dx = g W + (du A) * m,   dW = g^T x,   db = sum g
// NOTE: one op rather than a linear, dropout, two linears, a mul and an add, so that the graph
// keeps the keep-mask (bool), u ([N, r]) and x (for dA) only. The separate ops would keep h, a float
// mask, u B^T and its scaled copy, and a linear and a delta op beside their sum two more
// [N, out] tensors per adapted module: a large part of a LoRA step's live memory.
Tensor LoRAAdapter::forward(const Tensor& x, const Tensor& W, const Tensor& bias) const {
  const Tensor A = A_->weight(), B = B_->weight();
  const int64_t r = A.shape()[0], C = A.shape()[1], OC = B.shape()[0];
  check(x.dim() >= 1 && x.shape().back() == C, "LoRA: input must be [..., ", C, "], got ", shape_str(x.shape()));
  const double s = scaling(), p = dropout_;
  const bool drop = p > 0 && A_->is_training();
  Tensor keep, h = x;  // keep: the mask of kept inputs (with dropout only)
  auto apply_mask = [p](const Tensor& src, const Tensor& mask) {
    Tensor dst = empty(src.shape(), src.dtype());
    dispatch_float(src.dtype(), "LoRA dropout", [&](auto tag) {
      using T = decltype(tag);
      const T k = static_cast<T>(1.0 / (1.0 - p));
      const T* ps = src.data<T>();
      const bool* pm = mask.data<bool>();
      T* pd = dst.data<T>();
      for (int64_t i = 0, n = src.numel(); i < n; ++i) pd[i] = ps[i] * (pm[i] ? k : T(0));
    });
    return dst;
  };
  if (drop) {
    keep = empty(x.shape(), kBool);
    Generator& g = default_generator();
    bool* pk = keep.data<bool>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) pk[i] = !(g.uniform() < p);
    h = apply_mask(x, keep);
  }
  Tensor u, y;
  {
    NoGradGuard no_grad;
    y = linear(x, W, bias);
    u = linear(h, A);
    y.add_(linear(u, B), s);  // the [N, out] product is freed here
  }
  std::vector<Tensor> inputs = {x, A, B, W};
  if (bias.defined()) inputs.push_back(bias);
  if (!needs_grad(inputs)) return y;
  const bool dx = wants_grad(x), dA = wants_grad(A);
  Saves saved = saves_where({dA || wants_grad(W), dx, dx || dA, dx});  // x, A, B, W; never the bias
  saved.bf16_ok = 1;  // x: under autocast dA's product rounds it to bf16 anyway
  return record(y, std::move(inputs), "lora_linear", saved,
                [keep, u, s, r, C, OC, apply_mask](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
                  std::vector<Tensor> grads(in.size());
                  const Tensor g2 = g.reshape({-1, OC});  // [N, out]
                  const Tensor u2 = u.reshape({-1, r});   // [N, r]
                  if (wants(in, 2)) grads[2] = matmul(u2.t(), g2).t() * s;  // [out, r]
                  if (wants(in, 0) || wants(in, 1)) {
                    const Tensor du = matmul(g2, in[2]) * s;  // [N, r]
                    if (wants(in, 1)) {
                      const Tensor h = keep.defined() ? apply_mask(in[0], keep) : in[0];
                      grads[1] = matmul(du.t(), h.reshape({-1, C}));  // [r, in]
                    }
                    if (wants(in, 0)) {
                      Tensor dh = matmul(du, in[1]).reshape(in[0].shape());  // [..., in]
                      if (keep.defined()) dh = apply_mask(dh, keep);
                      grads[0] = matmul(g2, in[3]).reshape(in[0].shape());  // through W
                      grads[0].add_(dh);
                    }
                  }
                  if (wants(in, 3)) grads[3] = matmul(g2.t(), in[0].reshape({-1, C}));  // [out, in]
                  if (in.size() > 4 && wants(in, 4)) grads[4] = g2.sum(0);  // [out]
                  return grads;
                });
}

void LoRAAdapter::set_scale(double scale) {
  check(std::isfinite(scale), "LoRA: adapter scale must be finite, got ", scale);
  check(!merged_, "LoRA: cannot change the scale of a merged adapter (unmerge first)");
  scale_ = scale;
}

// W += scaling B A   (B: [out, r], A: [r, in] -> [out, in])
// W += s B A; a bf16 W takes the sum computed in float32, rounded once (so unmerge gives W back
// only to within bf16's rounding).
void LoRAAdapter::add_delta(double s) {
  NoGradGuard no_grad;
  Tensor W = base_weight_;
  const Tensor delta = matmul(B_->weight(), A_->weight());
  if (W.dtype() == delta.dtype()) {
    add_(W, delta, s);
  } else {
    Tensor sum = W.to(delta.dtype());
    add_(sum, delta, s);
    W.copy_(sum.to(W.dtype()));
  }
}

void LoRAAdapter::merge() {
  check(!merged_, "LoRA: merge: the adapter is already merged");
  check(!is_blocked(base_weight_.dtype()), "LoRA: merge: the base weight is ", dtype_name(base_weight_.dtype()),
        ", which cannot take the delta exactly; ",
        "widen the base first (nn::store_weights_in(model, kFloat32))");
  add_delta(scaling());
  merged_scaling_ = scaling();
  merged_ = true;
}

void LoRAAdapter::unmerge() {
  check(merged_, "LoRA: unmerge: the adapter is not merged");
  add_delta(-merged_scaling_);
  merged_ = false;
}

std::shared_ptr<LoRAAdapter> lora_of(const nn::Linear& linear) {
  return std::dynamic_pointer_cast<LoRAAdapter>(linear.adapter());
}

LoRALinear::LoRALinear(int64_t in_features, int64_t out_features, const LoRAConfig& config, Generator& gen,
                       bool bias, Dtype dtype)
    : nn::Linear(in_features, out_features, bias, dtype) {
  lora_ = LoRAAdapter::attach(*this, config, gen);
}

LoRALinear::LoRALinear(const nn::Linear& base, const LoRAConfig& config, Generator& gen)
    : nn::Linear(base.in_features(), base.out_features(), base.bias().defined(), base.weight().dtype()) {
  weight().copy_(base.weight());
  if (base.bias().defined()) bias().copy_(base.bias());
  lora_ = LoRAAdapter::attach(*this, config, gen);
}

std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> linear_modules(const nn::Module& model) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> out;
  std::set<const nn::Module*> seen;
  for (const auto& [path, m] : model.named_modules()) {
    auto lin = std::dynamic_pointer_cast<nn::Linear>(m);
    if (lin && seen.insert(lin.get()).second) out.emplace_back(path, lin);
  }
  return out;
}

bool fused_naming(const std::string& naming) { return naming == "hf_gpt2" || naming == "hf_phi3"; }

std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> linear_modules(const nn::Module& model,
                                                                                const std::string& naming) {
  auto lins = linear_modules(model);
  if (naming == "xgrad") return lins;
  if (fused_naming(naming)) {  // xgrad's paths (a part has no PEFT path of its own), checked as PEFT sees them
    peft_modules(model, naming);
    return lins;
  }
  const nn::NamingScheme& scheme = nn::NamingScheme::get(naming);
  // NOTE: adapter rows are not permuted between RoPE layouts (state_dict(scheme) permutes q/k
  // weights): a model whose layout differs from the scheme's would get wrong q/k adapters.
  if (scheme.rope_layout)
    for (const auto& [path, m] : model.named_modules()) {
      const std::optional<nn::RopeParams> rope = nn::rope_params_of(*m);
      check(!rope || rope->layout == *scheme.rope_layout, "naming scheme '", naming, "' names adapters of a model in the ",
            rope_layout_name(*scheme.rope_layout), " RoPE layout, but '", path, "' uses the ",
            rope_layout_name(rope ? rope->layout : *scheme.rope_layout), " layout");
    }
  const std::string suffix = ".weight";
  for (auto& [path, lin] : lins) {
    const std::optional<std::string> w = nn::rename_tensor(scheme, path + suffix, lin->name());
    check(w && w->size() > suffix.size() && w->compare(w->size() - suffix.size(), suffix.size(), suffix) == 0,
          "naming scheme '", naming, "' has no name for the Linear module '", path, "'");
    path = w->substr(0, w->size() - suffix.size());
  }
  return lins;
}

std::vector<PeftModule> peft_modules(const nn::Module& model, const std::string& naming) {
  std::set<std::string> linear;
  for (const auto& [path, lin] : linear_modules(model)) linear.insert(path);
  const std::string w = ".weight";
  auto ends_with_w = [&](const std::string& s) { return s.size() > w.size() && s.compare(s.size() - w.size(), w.size(), w) == 0; };
  std::vector<PeftModule> out;
  // Not complete: the adapters' own lora_A / lora_B weights have no name in the scheme (and are
  // no Linear's weight, so they are skipped below).
  nn::NamingScheme scheme = nn::NamingScheme::get(naming);
  scheme.complete = false;
  for (const auto& [external, e] : nn::external_tensors(model, scheme)) {
    if (!ends_with_w(external)) continue;
    PeftModule m{external.substr(0, external.size() - w.size()), {}};
    for (const std::string& p : e.parts)
      if (ends_with_w(p) && linear.count(p.substr(0, p.size() - w.size()))) m.parts.push_back(p.substr(0, p.size() - w.size()));
    if (m.parts.size() != e.parts.size()) continue;  // not Linear weights (embeddings, norms)
    // Adapter rows are not permuted between RoPE layouts.
    check(!e.rope_permuted, "naming scheme '", naming, "': '", m.path,
          "' is stored in another RoPE layout than the model's; an adapter's rows would need permuting");
    out.push_back(m);
  }
  return out;
}

namespace {

// The module names each short target name stands for: those of xgrad's attention and FFN kinds
// (nn/attention_*.hpp, nn/ffn.hpp) and of Hugging Face's checkpoints.
const std::map<std::string, std::vector<std::string>>& short_names() {
  static const std::map<std::string, std::vector<std::string>> m = {
      {"q", {"w_q", "W_q", "q_proj"}},
      {"k", {"w_k", "W_k", "k_proj"}},
      {"v", {"w_v", "W_v", "v_proj"}},
      {"o", {"w_o", "W_o", "o_proj"}},
      {"gate", {"w_gate", "W_gate", "w1", "gate_proj"}},
      {"up", {"w_up", "W_up", "w3", "fc1", "up_proj"}},
      {"down", {"w_down", "W_down", "w2", "fc2", "down_proj"}},
  };
  return m;
}

// Hugging Face's projection names stand for the short names (q_proj: q, ...), so that they
// select the same modules under xgrad's module names too.
const std::string& short_name_of(const std::string& entry) {
  static const std::map<std::string, std::string> hf = {{"q_proj", "q"},       {"k_proj", "k"},   {"v_proj", "v"},
                                                        {"o_proj", "o"},       {"gate_proj", "gate"},
                                                        {"up_proj", "up"},     {"down_proj", "down"}};
  auto it = hf.find(entry);
  return it == hf.end() ? entry : it->second;
}

// A fused projection of a Hugging Face checkpoint (GPT-2's c_attn, c_fc, c_proj; Phi-3's
// qkv_proj, gate_up_proj) stands for the short names of its parts, which xgrad keeps as
// separate modules; null for another entry.
const std::vector<std::string>* fused_parts(const std::string& entry) {
  static const std::map<std::string, std::vector<std::string>> m = {{"c_attn", {"q", "k", "v"}},
                                                                    {"qkv_proj", {"q", "k", "v"}},
                                                                    {"gate_up_proj", {"gate", "up"}},
                                                                    {"c_fc", {"up"}},
                                                                    {"c_proj", {"o", "down"}}};
  auto it = m.find(entry);
  return it == m.end() ? nullptr : &it->second;
}

bool is_target_list(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ',';
  });
}

std::string leaf(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// PEFT's rule for a list entry: name == key or name.endswith("." + key).
bool peft_entry_matches(const std::string& entry, const std::string& path) {
  if (path == entry) return true;
  return path.size() > entry.size() && path.compare(path.size() - entry.size(), entry.size(), entry) == 0 &&
         path[path.size() - entry.size() - 1] == '.';
}

// Whether a short name (or q_proj ..., or a fused projection's name standing for its parts'
// short names) stands for a module named `last`.
bool short_name_selects(const std::string& entry, const std::string& last) {
  auto selects = [&](const std::string& short_name) {
    auto it = short_names().find(short_name);
    return it != short_names().end() && std::find(it->second.begin(), it->second.end(), last) != it->second.end();
  };
  if (const std::vector<std::string>* parts = fused_parts(entry))
    return std::any_of(parts->begin(), parts->end(), selects);
  return selects(short_name_of(entry));
}

// PEFT's rule for a list entry, plus short names.
bool entry_matches(const std::string& entry, const std::string& path) {
  return peft_entry_matches(entry, path) || short_name_selects(entry, leaf(path));
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string available(const std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>>& lins) {
  if (lins.empty()) return "the model has no Linear modules";
  std::string s = "available Linear modules: ";
  for (std::size_t i = 0; i < lins.size(); ++i) s += (i ? ", " : "") + lins[i].first;
  return s;
}

// The Linears of `model` that `targets` selects. `list_match(entry, i)` / `regex_match(re, i)`
// say whether a list entry / the regex selects lins[i]; `listing` names the modules in errors.
template <class ListMatch, class RegexMatch>
std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> select_by(
    const std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>>& lins, const std::string& targets,
    const std::string& who, const std::string& listing, ListMatch list_match, RegexMatch regex_match) {
  std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> out;
  check(!targets.empty(), who, ": target modules must not be empty");
  if (is_target_list(targets)) {
    const auto entries = split_list(targets);
    check(!entries.empty(), who, ": target modules '", targets, "' name no module");
    for (const auto& e : entries) {
      bool any = false;
      for (std::size_t i = 0; i < lins.size() && !any; ++i) any = list_match(e, i);
      check(any, who, ": target module '", e, "' matches no Linear module in the model; ", listing);
    }
    for (std::size_t i = 0; i < lins.size(); ++i)
      if (std::any_of(entries.begin(), entries.end(), [&](const std::string& e) { return list_match(e, i); }))
        out.push_back(lins[i]);
  } else {
    std::regex re;
    try {
      re = std::regex(targets, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(str_cat(who, ": invalid target regex '", targets, "': ", e.what()));
    }
    for (std::size_t i = 0; i < lins.size(); ++i)
      if (regex_match(re, i)) out.push_back(lins[i]);
    check(!out.empty(), who, ": target regex '", targets, "' matches no Linear module path; ", listing);
  }
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<nn::Linear>>> select(const nn::Module& model,
                                                                         const std::string& targets,
                                                                         const std::string& who,
                                                                         const std::string& naming) {
  const auto lins = linear_modules(model, naming);
  if (!fused_naming(naming))
    return select_by(
        lins, targets, who, available(lins), [&](const std::string& e, std::size_t i) { return entry_matches(e, lins[i].first); },
        [&](const std::regex& re, std::size_t i) { return std::regex_match(lins[i].first, re); });
  // Each Linear's PEFT module path: PEFT's rules match those; a short name matches the part.
  std::map<std::string, std::string> module_of;
  std::string listing = "available Linear modules: ";
  bool first = true;
  for (const PeftModule& m : peft_modules(model, naming)) {
    std::string parts;
    for (const std::string& p : m.parts) {
      module_of[p] = m.path;
      parts += (parts.empty() ? "" : ", ") + leaf(p);
    }
    listing += (first ? "" : ", ") + m.path + (m.parts.size() > 1 ? " (" + parts + ")" : "");
    first = false;
  }
  auto peft_path = [&](std::size_t i) {
    auto it = module_of.find(lins[i].first);
    check(it != module_of.end(), who, ": naming scheme '", naming, "' has no name for the Linear module '", lins[i].first, "'");
    return it->second;
  };
  return select_by(
      lins, targets, who, listing,
      [&](const std::string& e, std::size_t i) {
        return peft_entry_matches(e, peft_path(i)) || short_name_selects(e, leaf(lins[i].first));
      },
      [&](const std::regex& re, std::size_t i) { return std::regex_match(peft_path(i), re); });
}

}  // namespace

std::vector<std::string> match_targets(const nn::Module& model, const std::string& targets, const std::string& who,
                                       const std::string& naming) {
  std::vector<std::string> out;
  for (const auto& l : select(model, targets, who, naming)) out.push_back(l.first);
  return out;
}

bool targets_are_regex(const std::string& targets) { return !is_target_list(targets); }

std::string targets_present(const nn::Module& model, const std::string& targets, const std::string& naming) {
  if (!is_target_list(targets)) return targets;
  std::string out;
  for (const std::string& e : split_list(targets)) {
    try {
      select(model, e, "targets_present", naming);
    } catch (const Error&) {
      continue;  // selects nothing
    }
    out += (out.empty() ? "" : ",") + e;
  }
  return out;
}

std::vector<std::string> peft_target_names(const nn::Module& model, const std::string& targets,
                                           const std::string& naming) {
  check(is_target_list(targets), "peft_target_names: '", targets, "' is a regex, not a list");
  std::set<std::string> names;
  const auto lins = linear_modules(model, naming);
  for (const auto& e : split_list(targets)) {
    if (!short_names().count(short_name_of(e)) && !fused_parts(e)) {
      names.insert(e);
      continue;
    }
    for (const auto& l : lins)
      if (entry_matches(e, l.first)) names.insert(l.first == e ? e : leaf(l.first));
  }
  return {names.begin(), names.end()};
}

std::vector<std::string> inject_lora(nn::Module& model, const LoRAConfig& config, Generator& gen,
                                     const std::string& naming) {
  config.validate("inject_lora");
  const auto chosen = select(model, config.targets, "inject_lora", naming);
  for (const auto& [path, lin] : chosen)
    check(lin->adapter() == nullptr, "inject_lora: module '", path, "' already has an adapter");
  model.requires_grad_(false);
  std::vector<std::string> paths;
  for (const auto& [path, lin] : chosen) {
    LoRAAdapter::attach(*lin, config, gen);
    paths.push_back(path);
  }
  return paths;
}

std::vector<std::pair<std::string, std::shared_ptr<LoRAAdapter>>> lora_adapters(const nn::Module& model,
                                                                                const std::string& naming) {
  std::vector<std::pair<std::string, std::shared_ptr<LoRAAdapter>>> out;
  // The model itself may be the adapted Linear (a LoRALinear), under the empty path.
  if (const auto* self = dynamic_cast<const nn::Linear*>(&model))
    if (auto a = lora_of(*self)) out.emplace_back("", a);
  for (const auto& [path, lin] : linear_modules(model, naming))
    if (auto a = lora_of(*lin)) out.emplace_back(path, a);
  return out;
}

nn::NamedTensors named_lora_parameters(const nn::Module& model) {
  nn::NamedTensors out;
  for (const auto& [path, a] : lora_adapters(model)) {
    out.emplace_back(path + ".lora_A.weight", a->A());
    out.emplace_back(path + ".lora_B.weight", a->B());
  }
  return out;
}

std::vector<Tensor> lora_parameters(const nn::Module& model) {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_lora_parameters(model)) out.push_back(t);
  return out;
}

namespace {
std::vector<std::pair<std::string, std::shared_ptr<LoRAAdapter>>> require_adapters(const nn::Module& model,
                                                                                   const char* who) {
  auto all = lora_adapters(model);
  check(!all.empty(), who, ": the model has no LoRA adapters (inject_lora or load_adapter first)");
  return all;
}
}  // namespace

void merge(nn::Module& model) {
  for (auto& [path, a] : require_adapters(model, "merge"))
    if (!a->merged()) a->merge();
}

void unmerge(nn::Module& model) {
  for (auto& [path, a] : require_adapters(model, "unmerge"))
    if (a->merged()) a->unmerge();
}

void set_adapter_scale(nn::Module& model, double scale) {
  check(std::isfinite(scale), "set_adapter_scale: scale must be finite, got ", scale);
  auto all = require_adapters(model, "set_adapter_scale");
  for (auto& [path, a] : all)
    check(!a->merged(), "set_adapter_scale: the adapter of '", path, "' is merged (unmerge first)");
  for (auto& [path, a] : all) a->set_scale(scale);
}

DisableAdapters::DisableAdapters(const nn::Module& model) {
  auto all = lora_adapters(model);
  for (auto& [path, a] : all)
    check(!a->merged(), "DisableAdapters: the adapter of '", path,
          "' is merged into the weight, so the base model is not available (unmerge first)");
  for (auto& [path, a] : all) {
    saved_.emplace_back(a, a->enabled());
    a->set_enabled(false);
  }
}

DisableAdapters::~DisableAdapters() {
  for (auto& [a, on] : saved_) a->set_enabled(on);
}

}  // namespace xg::finetune

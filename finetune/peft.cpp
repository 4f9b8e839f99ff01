// PEFT adapter files: the config JSON (written and validated), the safetensors key mapping,
// staged save and validated load.
#include "finetune/peft.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "autograd/graph.hpp"
#include "autograd/shape.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "nn/naming.hpp"

namespace xg::finetune {

namespace fs = std::filesystem;
using json = nlohmann::json;  // std::map objects: keys sorted, as PEFT's json.dumps(sort_keys=True)

namespace {

const char* kPrefix = "base_model.model.";
const char* kConfigFile = "adapter_config.json";
const char* kWeightsFile = "adapter_model.safetensors";

json number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return json(static_cast<int64_t>(v));
  return json(v);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool list_entry_ok(const std::string& e) {
  if (e.empty()) return false;
  for (char c : e)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.')) return false;
  return true;
}

}  // namespace

std::string peft_key(const std::string& module_path, char which) {
  check(which == 'A' || which == 'B', "peft_key: which must be 'A' or 'B'");
  return str_cat(kPrefix, module_path, ".lora_", which, ".weight");
}

namespace {

// The module path of an adapter file's key base_model.model.<module>.lora_A.weight (is_a) or
// .lora_B.weight; another key is an error naming the file.
std::string lora_key_module(const std::string& wfile, const std::string& key, bool& is_a) {
  const std::string pre = kPrefix;
  is_a = ends_with(key, ".lora_A.weight");
  const bool is_b = ends_with(key, ".lora_B.weight");
  check(key.size() > pre.size() + 14 && key.compare(0, pre.size(), pre) == 0 && (is_a || is_b), wfile, ": key '", key,
        "' is not a LoRA weight (expected base_model.model.<module>.lora_A.weight or .lora_B.weight)");
  return key.substr(pre.size(), key.size() - pre.size() - std::string(".lora_A.weight").size());
}

// --- Fused projections (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj) ------------------

std::string leaf_of(const std::string& path) { return path.substr(path.rfind('.') + 1); }

// PEFT's A and B of each adapted module under `naming` (fused modules stacked and block-diagonal),
// filling rank_pattern / alpha_pattern for the fused ones.
std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> fused_adapter_tensors(const nn::Module& model,
                                                                                      const std::string& naming,
                                                                                      const LoRAConfig& config,
                                                                                      json& rank_pattern,
                                                                                      json& alpha_pattern) {
  std::map<std::string, std::shared_ptr<nn::Linear>> lins;
  for (const auto& [path, lin] : linear_modules(model)) lins.emplace(path, lin);
  std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> out;
  NoGradGuard no_grad;
  for (const PeftModule& m : peft_modules(model, naming)) {
    std::vector<std::shared_ptr<LoRAAdapter>> parts;
    bool any = false;
    for (const std::string& p : m.parts) {
      parts.push_back(lora_of(*lins.at(p)));
      any = any || parts.back() != nullptr;
    }
    if (!any) continue;
    if (parts.size() == 1) {
      out.push_back({m.path, {parts[0]->A().detach(), parts[0]->B().detach()}});
      continue;
    }
    // A = cat(A_i) [k r, in]; B = blockdiag(B_i) [out, k r]: B A = cat(B_i A_i) along the rows.
    const int64_t k = static_cast<int64_t>(parts.size()), r = config.r;
    std::vector<Tensor> As;
    int64_t out_total = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const nn::Linear& lin = *lins.at(m.parts[i]);
      As.push_back(parts[i] ? parts[i]->A().detach().to(kFloat32) : zeros({r, lin.in_features()}));
      out_total += lin.out_features();
    }
    Tensor B = zeros({out_total, k * r});
    float* b = B.data<float>();
    int64_t row = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const int64_t rows = lins.at(m.parts[i])->out_features();
      if (parts[i]) {
        const Tensor Bi = parts[i]->B().detach().to(kFloat32).contiguous();
        const float* bi = Bi.data<float>();
        for (int64_t o = 0; o < rows; ++o)
          for (int64_t j = 0; j < r; ++j) b[(row + o) * k * r + static_cast<int64_t>(i) * r + j] = bi[o * r + j];
      }
      row += rows;
    }
    out.push_back({m.path, {cat(As, 0), B}});
    // alpha' / r' = alpha / r (rsLoRA: alpha' / sqrt r' = alpha / sqrt r).
    const double alpha = config.use_rslora ? config.alpha * std::sqrt(static_cast<double>(k)) : config.alpha * k;
    rank_pattern[leaf_of(m.path)] = k * r;
    alpha_pattern[leaf_of(m.path)] = number(alpha);
  }
  return out;
}

// PEFT's selection of module paths: a list entry equal to the path or a dotted suffix of it, or
// a regex matching the whole path.
bool peft_selects(const std::string& targets, const std::string& path) {
  if (targets_are_regex(targets)) return std::regex_match(path, std::regex(targets));
  std::stringstream ss(targets);
  for (std::string e; std::getline(ss, e, ',');)
    if (path == e || ends_with(path, "." + e)) return true;
  return false;
}

AdapterInfo load_fused_adapter(nn::Module& model, const std::string& dir, const std::string& naming) {
  AdapterInfo info = read_adapter_config(dir);
  const std::string cfile = (fs::path(dir) / kConfigFile).string();
  const std::string wfile = (fs::path(dir) / kWeightsFile).string();
  const TensorMap weights = io::load_safetensors(wfile);
  std::map<std::string, std::shared_ptr<nn::Linear>> lins;
  for (const auto& [path, lin] : linear_modules(model)) lins.emplace(path, lin);
  std::map<std::string, PeftModule> modules;
  for (PeftModule& m : peft_modules(model, naming)) modules.emplace(m.path, m);
  std::map<std::string, std::pair<Tensor, Tensor>> found;
  for (const auto& [key, t] : weights) {
    bool is_a = false;
    const std::string path = lora_key_module(wfile, key, is_a);
    auto it = modules.find(path);
    check(it != modules.end(), wfile, ": key '", key, "': the model has no Linear module '", path, "' under ", naming,
          " (an adapter for a different base model?)");
    check(is_floating(t.dtype()), wfile, ": key '", key, "' has dtype ", dtype_name(t.dtype()), ", expected a float");
    auto& slot = found[path];
    (is_a ? slot.first : slot.second) = t;
  }
  check(!found.empty(), wfile, ": holds no LoRA weights");
  for (const auto& [path, m] : modules)
    check(peft_selects(info.config.targets, path) == (found.count(path) > 0), cfile, ": target_modules '",
          info.config.targets, found.count(path) ? "' do not select module '" : "' select module '", path, "' but ",
          wfile, found.count(path) ? " has weights for it" : " has none for it");
  // Every shape is checked before the model changes.
  std::vector<std::tuple<std::string, LoRAConfig>> plan;
  for (const auto& [path, ab] : found) {
    check(ab.first.defined() && ab.second.defined(), wfile, ": module '", path, "' has ",
          ab.first.defined() ? "lora_A but no lora_B" : "lora_B but no lora_A");
    const PeftModule& m = modules.at(path);
    LoRAConfig c = info.config;
    const std::string leaf = leaf_of(path);
    if (info.rank_pattern.count(leaf)) c.r = info.rank_pattern.at(leaf);
    if (info.alpha_pattern.count(leaf)) c.alpha = info.alpha_pattern.at(leaf);
    c.validate(cfile);
    int64_t out = 0;
    for (const std::string& p : m.parts) {
      check(lins.at(p)->adapter() == nullptr, "load_adapter: module '", p, "' already has an adapter");
      out += lins.at(p)->out_features();
    }
    const int64_t in = lins.at(m.parts[0])->in_features();
    for (const auto& [t, want, name] : {std::tuple{ab.first, Shape{c.r, in}, "lora_A"}, std::tuple{ab.second, Shape{out, c.r}, "lora_B"}})
      check(t.shape() == want, wfile, ": '", path, ".", name, ".weight' has shape ", shape_str(t.shape()),
            ", module '", path, "' (in ", in, ", out ", out, ", r ", c.r, ") needs ", shape_str(want));
    plan.emplace_back(path, c);
  }
  Generator gen(0);
  model.requires_grad_(false);
  NoGradGuard no_grad;
  for (const auto& [path, c] : plan) {
    const auto& [A, B] = found.at(path);
    int64_t row = 0;
    for (const std::string& p : modules.at(path).parts) {
      auto a = LoRAAdapter::attach(*lins.at(p), c, gen);
      const int64_t rows = lins.at(p)->out_features();
      const Tensor Bp = narrow(B, 0, row, rows);
      row += rows;
      a->A().copy_(A.dtype() == a->A().dtype() ? A : A.to(a->A().dtype()));
      a->B().copy_(Bp.dtype() == a->B().dtype() ? Bp : Bp.to(a->B().dtype()));
    }
    info.modules.push_back(path);
  }
  return info;
}

}  // namespace

void save_adapter(const nn::Module& model, const std::string& dir, const LoRAConfig& config,
                  const std::string& base_model_name_or_path, const std::string& naming) {
  config.validate("save_adapter");
  const bool fused = fused_naming(naming);
  const auto adapters = lora_adapters(model, naming);  // xgrad's paths under a fused naming
  check(!adapters.empty(), "save_adapter: the model has no LoRA adapters (inject_lora or load_adapter first)");
  for (const auto& [path, a] : adapters) {
    check(!path.empty(), "save_adapter: the adapter is on the model itself (a bare LoRALinear); PEFT files name ",
          "adapters by their module path inside a model");
    check(a->r() == config.r && a->alpha() == config.alpha && a->dropout() == config.dropout &&
              a->use_rslora() == config.use_rslora,
          "save_adapter: the adapter of '", path, "' has r=", a->r(), ", lora_alpha=", a->alpha(),
          ", lora_dropout=", a->dropout(), ", use_rslora=", a->use_rslora(), " but the config says r=", config.r,
          ", lora_alpha=", config.alpha, ", lora_dropout=", config.dropout, ", use_rslora=", config.use_rslora);
  }
  std::set<std::string> adapted;
  for (const auto& [path, a] : adapters) adapted.insert(path);
  for (const auto& path : match_targets(model, config.targets, "save_adapter", naming)) {
    check(adapted.count(path), "save_adapter: targets '", config.targets, "' select '", path,
          "', which has no adapter");
    adapted.erase(path);
  }
  check(adapted.empty(), "save_adapter: '", adapted.empty() ? "" : *adapted.begin(),
        "' has an adapter but targets '", config.targets, "' do not select it");

  TensorMap tensors;
  json rank_pattern = json::object(), alpha_pattern = json::object(), targets;
  if (fused) {
    std::vector<std::string> paths;
    for (auto& [path, ab] : fused_adapter_tensors(model, naming, config, rank_pattern, alpha_pattern)) {
      tensors.emplace(peft_key(path, 'A'), ab.first);
      tensors.emplace(peft_key(path, 'B'), ab.second);
      paths.push_back(path);
    }
    targets = paths;  // full paths: GPT-2's c_proj names both the attention's and the MLP's
  } else {
    for (const auto& [path, a] : adapters) {
      tensors.emplace(peft_key(path, 'A'), a->A().detach());
      tensors.emplace(peft_key(path, 'B'), a->B().detach());
    }
    if (targets_are_regex(config.targets))
      targets = config.targets;
    else
      targets = peft_target_names(model, config.targets, naming);
  }
  json c = json::object();
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["r"] = config.r;
  c["lora_alpha"] = number(config.alpha);
  c["lora_dropout"] = config.dropout;
  c["target_modules"] = targets;
  c["bias"] = "none";
  c["use_rslora"] = config.use_rslora;
  c["fan_in_fan_out"] = naming == "hf_gpt2";  // PEFT sets it for Conv1D (A and B keep Linear's shapes)
  c["base_model_name_or_path"] = base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path);
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;
  c["use_dora"] = false;
  c["modules_to_save"] = nullptr;
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["rank_pattern"] = rank_pattern;
  c["alpha_pattern"] = alpha_pattern;
  c["revision"] = nullptr;
  const std::string text = c.dump(2) + "\n";

  // Stage both files beside their final names, then rename them into place.
  const fs::path d(dir);
  std::error_code ec;
  const bool existed = fs::exists(d, ec);
  check(!existed || fs::is_directory(d, ec), "save_adapter: '", dir, "' exists and is not a directory");
  if (!existed) {
    fs::create_directories(d, ec);
    check(!ec, "save_adapter: cannot create directory '", dir, "': ", ec.message());
  }
  const std::string tag = str_cat(".staged.", ::getpid());
  const fs::path w_tmp = d / (std::string(kWeightsFile) + tag), c_tmp = d / (std::string(kConfigFile) + tag);
  try {
    io::save_safetensors(w_tmp.string(), tensors, {{"format", "pt"}});
    io::write_file_atomic(c_tmp.string(), text, "save_adapter");
    fs::rename(w_tmp, d / kWeightsFile);
    fs::rename(c_tmp, d / kConfigFile);
  } catch (const std::exception& e) {
    fs::remove(w_tmp, ec);
    fs::remove(c_tmp, ec);
    if (!existed) fs::remove(d, ec);  // only if still empty
    throw Error(str_cat("save_adapter: cannot write the adapter into '", dir, "': ", e.what()));
  }
}

AdapterInfo read_adapter_config(const std::string& dir) {
  const std::string file = (fs::path(dir) / kConfigFile).string();
  std::ifstream in(file);
  check(static_cast<bool>(in), "load_adapter: cannot read ", file);
  std::stringstream ss;
  ss << in.rdbuf();
  json c;
  try {
    c = json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(str_cat(file, ": invalid JSON: ", e.what()));
  }
  check(c.is_object(), file, ": expected a JSON object");
  auto field = [&](const char* k) -> const json* {
    auto it = c.find(k);
    return it == c.end() || it->is_null() ? nullptr : &*it;
  };
  const json* pt = field("peft_type");
  check(pt && pt->is_string(), file, ": peft_type is missing (expected \"LORA\")");
  check(pt->get<std::string>() == "LORA", file, ": peft_type is '", pt->get<std::string>(),
        "', only \"LORA\" adapters are supported");

  AdapterInfo info;
  LoRAConfig& cfg = info.config;
  const json* r = field("r");
  check(r && r->is_number_integer() && r->get<int64_t>() >= 1, file, ": r must be a positive integer",
        r ? str_cat(", got ", r->dump()) : std::string(" (missing)"));
  cfg.r = r->get<int64_t>();
  const json* alpha = field("lora_alpha");
  check(alpha && alpha->is_number(), file, ": lora_alpha must be a number",
        alpha ? str_cat(", got ", alpha->dump()) : std::string(" (missing)"));
  cfg.alpha = alpha->get<double>();
  if (const json* d = field("lora_dropout")) {
    check(d->is_number(), file, ": lora_dropout must be a number, got ", d->dump());
    cfg.dropout = d->get<double>();
  } else {
    cfg.dropout = 0;
  }
  if (const json* rs = field("use_rslora")) {
    check(rs->is_boolean(), file, ": use_rslora must be true or false, got ", rs->dump());
    cfg.use_rslora = rs->get<bool>();
  } else {
    cfg.use_rslora = false;
  }
  const json* tm = field("target_modules");
  check(tm != nullptr, file, ": target_modules is missing");
  if (tm->is_string()) {
    // NOTE: PEFT full-matches a string against the module path; a string of plain name
    // characters is read here as a one-entry list (suffix match), which selects the same
    // modules unless the path is exactly that string.
    cfg.targets = tm->get<std::string>();
  } else {
    check(tm->is_array() && !tm->empty(), file, ": target_modules must be a string or a non-empty list of names, got ",
          tm->dump());
    std::string joined;
    for (const auto& e : *tm) {
      check(e.is_string() && list_entry_ok(e.get<std::string>()), file,
            ": target_modules entries must be module names (letters, digits, '_', '.'), got ", e.dump());
      joined += (joined.empty() ? "" : ",") + e.get<std::string>();
    }
    cfg.targets = joined;
  }
  check(!cfg.targets.empty(), file, ": target_modules is empty");
  if (const json* b = field("bias"))
    check(b->is_string() && b->get<std::string>() == "none", file, ": bias ", b->dump(),
          " is not supported (only \"none\")");
  if (const json* f = field("fan_in_fan_out")) {
    check(f->is_boolean(), file, ": fan_in_fan_out must be true or false, got ", f->dump());
    info.fan_in_fan_out = f->get<bool>();
  }
  if (const json* f = field("use_dora"))
    check(f->is_boolean() && !f->get<bool>(), file, ": use_dora ", f->dump(), " is not supported (only false)");
  for (const char* k : {"rank_pattern", "alpha_pattern"})
    if (const json* p = field(k)) {
      check(p->is_object(), file, ": ", k, " must be an object of module name -> number, got ", p->dump());
      for (const auto& [name, v] : p->items()) {
        check(list_entry_ok(name) && v.is_number(), file, ": ", k, " entry '", name, "': ", v.dump(),
              " (expected a module name and a number)");
        if (std::string(k) == "rank_pattern") {
          check(v.is_number_integer() && v.get<int64_t>() >= 1, file, ": rank_pattern '", name,
                "' must be a positive integer, got ", v.dump());
          info.rank_pattern[name] = v.get<int64_t>();
        } else {
          info.alpha_pattern[name] = v.get<double>();
        }
      }
    }
  for (const char* k : {"modules_to_save", "layers_to_transform"})
    if (const json* p = field(k))
      check(p->is_array() && p->empty(), file, ": ", k, " ", p->dump(), " is not supported (only null)");
  if (const json* n = field("base_model_name_or_path")) {
    check(n->is_string(), file, ": base_model_name_or_path must be a string or null, got ", n->dump());
    info.base_model_name_or_path = n->get<std::string>();
  }
  cfg.validate(file);
  return info;
}

namespace {

// Whether every key of <dir>'s adapter names one of the model's Linears by its xgrad path: the
// adapters xg-finetune wrote for GPT-2 and Phi-3 bases before it wrote PEFT's fused modules.
bool names_xgrad_linears(const nn::Module& model, const std::string& dir) {
  const std::string wfile = (fs::path(dir) / kWeightsFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(wfile, ec)) return false;
  std::set<std::string> lins;
  for (const auto& [path, lin] : linear_modules(model)) lins.insert(path);
  const TensorMap weights = io::load_safetensors(wfile);
  for (const auto& [key, t] : weights) {
    bool is_a = false;
    if (!lins.count(lora_key_module(wfile, key, is_a))) return false;
  }
  return !weights.empty();
}

}  // namespace

AdapterInfo load_adapter(nn::Module& model, const std::string& dir, const std::string& naming) {
  if (fused_naming(naming))
    return names_xgrad_linears(model, dir) ? load_adapter(model, dir, "xgrad") : load_fused_adapter(model, dir, naming);
  AdapterInfo info = read_adapter_config(dir);
  const std::string cfile = (fs::path(dir) / kConfigFile).string();
  check(info.rank_pattern.empty() && info.alpha_pattern.empty(), cfile,
        ": rank_pattern and alpha_pattern are not supported (only {}) but for the fused modules of GPT-2 and Phi-3");
  check(!info.fan_in_fan_out, cfile, ": fan_in_fan_out true is not supported (only false) but for GPT-2's Conv1D");
  const std::string wfile = (fs::path(dir) / kWeightsFile).string();
  const TensorMap weights = io::load_safetensors(wfile);
  const int64_t r = info.config.r;

  std::map<std::string, std::shared_ptr<nn::Linear>> lins;
  for (const auto& [path, lin] : linear_modules(model, naming)) lins.emplace(path, lin);
  // module path -> (A, B) from the file
  std::map<std::string, std::pair<Tensor, Tensor>> found;
  for (const auto& [key, t] : weights) {
    bool is_a = false;
    const std::string path = lora_key_module(wfile, key, is_a);
    auto it = lins.find(path);
    check(it != lins.end(), wfile, ": key '", key, "': the model has no Linear module '", path,
          "' (an adapter for a different base model?)");
    check(is_floating(t.dtype()), wfile, ": key '", key, "' has dtype ", dtype_name(t.dtype()), ", expected a float");
    const Shape want = is_a ? Shape{r, it->second->in_features()} : Shape{it->second->out_features(), r};
    check(t.shape() == want, wfile, ": key '", key, "' has shape ", shape_str(t.shape()), " but module '", path,
          "' (Linear(in_features=", it->second->in_features(), ", out_features=", it->second->out_features(),
          "), r=", r, ") needs ", shape_str(want));
    auto& slot = found[path];
    (is_a ? slot.first : slot.second) = t;
  }
  check(!found.empty(), wfile, ": holds no LoRA weights");
  for (const auto& [path, ab] : found)
    check(ab.first.defined() && ab.second.defined(), wfile, ": module '", path, "' has ",
          ab.first.defined() ? "lora_A but no lora_B" : "lora_B but no lora_A");

  std::vector<std::string> selected;
  try {
    selected = match_targets(model, info.config.targets, cfile + ": target_modules", naming);
  } catch (const Error& e) {
    throw Error(str_cat(e.what(), " (an adapter for a different base model?)"));
  }
  for (const auto& path : selected)
    check(found.count(path), cfile, ": target_modules '", info.config.targets, "' select module '", path,
          "' but ", wfile, " has no weights for it (an adapter for a different base model?)");
  for (const auto& [path, ab] : found)
    check(std::find(selected.begin(), selected.end(), path) != selected.end(), wfile, ": module '", path,
          "' is not selected by target_modules '", info.config.targets, "' of ", cfile);
  for (const auto& path : selected)
    check(lins.at(path)->adapter() == nullptr, "load_adapter: module '", path, "' already has an adapter");

  // All checked: inject (A's random init is overwritten) and copy the weights in.
  Generator gen(0);
  model.requires_grad_(false);
  NoGradGuard no_grad;
  for (const auto& path : selected) {
    auto a = LoRAAdapter::attach(*lins.at(path), info.config, gen);
    const auto& [A, B] = found.at(path);
    const Tensor &dA = a->A(), &dB = a->B();
    dA.copy_(A.dtype() == dA.dtype() ? A : A.to(dA.dtype()));
    dB.copy_(B.dtype() == dB.dtype() ? B : B.to(dB.dtype()));
    info.modules.push_back(path);
  }
  return info;
}

}  // namespace xg::finetune

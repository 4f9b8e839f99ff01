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
#include <set>
#include <sstream>

#include "autograd/graph.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"

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

void save_adapter(const nn::Module& model, const std::string& dir, const LoRAConfig& config,
                  const std::string& base_model_name_or_path, const std::string& naming) {
  config.validate("save_adapter");
  const auto adapters = lora_adapters(model, naming);
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
  for (const auto& [path, a] : adapters) {
    tensors.emplace(peft_key(path, 'A'), a->A().detach());
    tensors.emplace(peft_key(path, 'B'), a->B().detach());
  }
  json c = json::object();
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["r"] = config.r;
  c["lora_alpha"] = number(config.alpha);
  c["lora_dropout"] = config.dropout;
  if (targets_are_regex(config.targets))
    c["target_modules"] = config.targets;
  else
    c["target_modules"] = peft_target_names(model, config.targets, naming);
  c["bias"] = "none";
  c["use_rslora"] = config.use_rslora;
  c["fan_in_fan_out"] = false;
  c["base_model_name_or_path"] = base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path);
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;
  c["use_dora"] = false;
  c["modules_to_save"] = nullptr;
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["rank_pattern"] = json::object();
  c["alpha_pattern"] = json::object();
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
  if (const json* f = field("fan_in_fan_out"))
    check(f->is_boolean() && !f->get<bool>(), file, ": fan_in_fan_out ", f->dump(), " is not supported (only false)");
  if (const json* f = field("use_dora"))
    check(f->is_boolean() && !f->get<bool>(), file, ": use_dora ", f->dump(), " is not supported (only false)");
  for (const char* k : {"rank_pattern", "alpha_pattern"})
    if (const json* p = field(k))
      check(p->is_object() && p->empty(), file, ": ", k, " ", p->dump(), " is not supported (only {})");
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

AdapterInfo load_adapter(nn::Module& model, const std::string& dir, const std::string& naming) {
  AdapterInfo info = read_adapter_config(dir);
  const std::string cfile = (fs::path(dir) / kConfigFile).string();
  const std::string wfile = (fs::path(dir) / kWeightsFile).string();
  const TensorMap weights = io::load_safetensors(wfile);
  const int64_t r = info.config.r;

  std::map<std::string, std::shared_ptr<nn::Linear>> lins;
  for (const auto& [path, lin] : linear_modules(model, naming)) lins.emplace(path, lin);
  // module path -> (A, B) from the file
  std::map<std::string, std::pair<Tensor, Tensor>> found;
  const std::string pre = kPrefix;
  for (const auto& [key, t] : weights) {
    const bool is_a = ends_with(key, ".lora_A.weight"), is_b = ends_with(key, ".lora_B.weight");
    check(key.size() > pre.size() + 14 && key.compare(0, pre.size(), pre) == 0 && (is_a || is_b), wfile, ": key '", key,
          "' is not a LoRA weight (expected base_model.model.<module>.lora_A.weight or .lora_B.weight)");
    const std::string path = key.substr(pre.size(), key.size() - pre.size() - std::string(".lora_A.weight").size());
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

// save_checkpoint / load_checkpoint: one safetensors file with prefixed tensor groups and the
// progress as string metadata.
#include "finetune/checkpoint.hpp"

#include "autograd/error.hpp"

namespace xg::finetune {

namespace {

constexpr const char* kFormat = "xgrad-checkpoint-1";
const char* const kGroups[] = {"model.", "optim.", "sched."};

int64_t parse_int(const std::string& path, const std::string& key, const std::string& text) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw Error(str_cat("load_checkpoint: ", path, ": metadata '", key, "' must be a non-negative integer, got '", text,
                      "'"));
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  TensorMap all;
  const TensorMap* parts[] = {&ckpt.model, &ckpt.optim, &ckpt.sched};
  for (int g = 0; g < 3; ++g)
    for (const auto& [name, t] : *parts[g]) all.emplace(kGroups[g] + name, t);
  const TrainProgress& p = ckpt.progress;
  std::map<std::string, std::string> meta = {{"format", kFormat},
                                             {"step", std::to_string(p.step)},
                                             {"tokens_seen", std::to_string(p.tokens_seen)},
                                             {"skipped_steps", std::to_string(p.skipped)},
                                             {"optim_states", std::to_string(p.optim_states)},
                                             {"data_rng", p.data_rng},
                                             {"global_rng", p.global_rng}};
  for (const auto& [k, v] : p.extra) meta.emplace("extra." + k, v);
  if (ckpt.optim_later.empty()) return io::save_safetensors(path, all, meta);
  std::map<std::string, io::LazyTensor> later;
  for (const auto& [name, t] : ckpt.optim_later) later.emplace(kGroups[1] + name, t);
  io::save_safetensors_streamed(path, all, later, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::map<std::string, std::string> meta;
  TensorMap all = io::load_safetensors(path, &meta);
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = meta.find(key);
    if (it == meta.end()) throw Error(str_cat("load_checkpoint: ", path, ": metadata has no '", key, "'"));
    return it->second;
  };
  if (get("format") != kFormat)
    throw Error(str_cat("load_checkpoint: ", path, ": format is '", get("format"), "', expected '", kFormat, "'"));
  Checkpoint c;
  c.progress.step = parse_int(path, "step", get("step"));
  c.progress.tokens_seen = parse_int(path, "tokens_seen", get("tokens_seen"));
  // Recorded since a later version: an earlier checkpoint has neither.
  if (meta.count("skipped_steps")) c.progress.skipped = parse_int(path, "skipped_steps", get("skipped_steps"));
  if (meta.count("optim_states") && get("optim_states") != "-1")
    c.progress.optim_states = parse_int(path, "optim_states", get("optim_states"));
  c.progress.data_rng = get("data_rng");
  c.progress.global_rng = get("global_rng");
  for (const auto& [k, v] : meta)
    if (k.rfind("extra.", 0) == 0) c.progress.extra.emplace(k.substr(6), v);
  TensorMap* parts[] = {&c.model, &c.optim, &c.sched};
  for (auto& [name, t] : all) {
    int g = 0;
    while (g < 3 && name.rfind(kGroups[g], 0) != 0) ++g;
    if (g == 3) throw Error(str_cat("load_checkpoint: ", path, ": tensor '", name, "' is not model.*, optim.* or sched.*"));
    parts[g]->emplace(name.substr(6), t);
  }
  return c;
}

}  // namespace xg::finetune

// ModelSource::open: a path told apart once, by its files; the weight index validated; the
// tensors' stored dtypes read from the safetensors headers or the GGUF's tensor table.
#include "io/model_source.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "autograd/error.hpp"
#include "io/read_file.hpp"
#include "io/safetensors.hpp"

namespace xg::io {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::ordered_json;

// A Hub cache folder (models--<org>--<name>) holds refs/<branch> (a commit hash) and
// snapshots/<hash>/ (the repository's files as links into blobs/): the snapshot of refs/main,
// else the only snapshot there is.
std::string hub_snapshot(const fs::path& folder, const std::string& who) {
  const fs::path snapshots = folder / "snapshots";
  std::string rev;
  if (std::ifstream ref(folder / "refs" / "main"); ref && std::getline(ref, rev) && !rev.empty()) {
    const fs::path snap = snapshots / rev;
    check(fs::is_directory(snap), who, ": ", folder.string(), " is a Hugging Face Hub cache folder whose refs/main names ",
          rev, ", which is not in snapshots/");
    return snap.string();
  }
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(snapshots, ec))
    if (e.is_directory()) found.push_back(e.path());
  check(found.size() == 1, who, ": ", folder.string(), " is a Hugging Face Hub cache folder with no refs/main and ",
        found.size(), " snapshots (give the snapshot's folder)");
  return found[0].string();
}

void read_index(ModelSource& s, const std::string& who) {
  const json j = [&] {
    try {
      return json::parse(read_file(s.index_file, who));
    } catch (const json::exception& e) {
      throw Error(str_cat(s.index_file, ": not valid JSON (", e.what(), ")"));
    }
  }();
  check(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), s.index_file,
        ": expected an object with a \"weight_map\" object of tensor name -> shard file");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    check(it.value().is_string(), s.index_file, ": weight_map entry '", it.key(), "' must be a file name, got ",
          it.value().dump());
    const std::string file = it.value().get<std::string>();
    check(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..", s.index_file,
          ": weight_map entry '", it.key(), "' names '", file, "', not a file name inside the folder");
    const std::string path = (fs::path(s.dir) / file).string();
    s.weight_map[it.key()] = path;
    s.shards[path].insert(it.key());
  }
  check(!s.shards.empty(), s.index_file, ": weight_map is empty");
  for (const auto& [path, names] : s.shards)
    check(fs::is_regular_file(path), s.index_file, ": shard '", fs::path(path).filename().string(), "' (holding '",
          *names.begin(), "') is not in the folder ", s.dir);
}

// What config.json says the folder is: HF's "architectures"[0] (else its "model_type"), "xgrad"
// for LMConfig's keys ("n_layers" and "block"), "" for anything else.
std::string config_architecture(const std::string& config_text) {
  const json j = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    return j["architectures"][0].get<std::string>();
  if (j.contains("model_type")) return j["model_type"].is_string() ? j["model_type"].get<std::string>() : "?";
  if (j.contains("architectures")) return "?";
  return j.contains("n_layers") && j.contains("block") ? "xgrad" : "";
}

}  // namespace

const char* model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::HuggingFace: return "Hugging Face folder";
    case ModelFormat::Xgrad: return "xgrad folder";
    case ModelFormat::Gguf: return "GGUF file";
  }
  return "?";
}

ModelSource ModelSource::open(const std::string& path, const std::string& who) {
  ModelSource s;
  s.path = path;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    check(is_gguf_file(path), who, ": ", path, " is a file but not a GGUF file (no GGUF magic); a model is a ",
          "Hugging Face or xgrad folder, or a .gguf file");
    s.format = ModelFormat::Gguf;
    s.dir = path;
    s.gguf = std::make_shared<GgufReader>(path);
    s.architecture = s.gguf->has("general.architecture") ? s.gguf->get_string("general.architecture") : "";
    s.shards[path] = {};
    for (const GgufTensorInfo& t : s.gguf->tensors()) s.dtypes[t.name] = ggml_type_name(t.type);
    return s;
  }
  check(fs::is_directory(path, ec), who, ": ", path, " is not a folder or a GGUF file (it does not exist)");
  s.dir = path;
  if (fs::is_directory(fs::path(path) / "snapshots") && fs::is_directory(fs::path(path) / "refs"))
    s.dir = hub_snapshot(path, who);
  const fs::path dir(s.dir);
  const auto present = [&](const char* name) { return fs::exists(dir / name) ? (dir / name).string() : std::string(); };
  s.config_file = present("config.json");
  s.tokenizer_file = present("tokenizer.json");
  s.tokenizer_config_file = present("tokenizer_config.json");
  s.chat_template_file = present("chat_template.jinja");
  check(!s.config_file.empty() || !s.tokenizer_file.empty(), who, ": ", path,
        " has neither tokenizer.json (a Hugging Face folder) nor config.json (an xgrad folder), and is not a GGUF file");
  // NOTE: a config.json that is not a Hugging Face one (no "architectures" nor "model_type") is
  // taken for an xgrad folder's (its architecture "" unless it has LMConfig's keys), so that its
  // loader names the key it lacks.
  s.architecture = s.config_file.empty() ? "" : config_architecture(read_file(s.config_file, who));
  const bool xgrad = !s.config_file.empty() && (s.architecture.empty() || s.architecture == "xgrad");
  s.format = xgrad ? ModelFormat::Xgrad : ModelFormat::HuggingFace;
  if (s.format == ModelFormat::HuggingFace && fs::exists(dir / kHfIndexFile)) {
    s.index_file = (dir / kHfIndexFile).string();
    read_index(s, who);
  } else if (fs::exists(dir / kHfWeightsFile)) {
    s.shards[(dir / kHfWeightsFile).string()] = {};
  }
  for (const auto& [file, names] : s.shards) {
    const SafetensorsReader header(file);
    for (const auto& [name, entry] : header.entries()) s.dtypes[name] = entry.dtype;
  }
  return s;
}

std::string ModelSource::describe() const {
  std::map<std::string, int64_t> counts;
  for (const auto& [name, dtype] : dtypes) ++counts[dtype];
  std::string d;
  for (const auto& [dtype, n] : counts) d += str_cat(d.empty() ? "" : ", ", dtype, " x ", n);
  const std::string weights = shards.empty() ? "no weights" : sharded() ? str_cat(shards.size(), " shards") : "";
  std::string what = architecture;
  for (const std::string& part : {weights, d})
    if (!part.empty()) what += (what.empty() ? "" : ", ") + part;
  return str_cat(model_format_name(format), " ", path, what.empty() ? "" : " (" + what + ")");
}

}  // namespace xg::io

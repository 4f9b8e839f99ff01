// Hugging Face model folders: load_hf (config.json, then the weights tensor by tensor from one
// file or the shards of model.safetensors.index.json into the parameters), save_hf (a temporary
// folder renamed into place) and load_model (a model of any source, io::ModelSource).
#include "nn/hf.hpp"
#include "nn/init.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/graph.hpp"
#include "autograd/shape.hpp"
#include "io/atomic_file.hpp"
#include "io/read_file.hpp"
#include "nn/gguf_model.hpp"
#include "nn/naming.hpp"
#include "nn/weight_dtype.hpp"

namespace xg::nn {

namespace fs = std::filesystem;

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                           "generation_config.json"};

// A tensor stored packed (GPT-2's c_attn: q, k and v side by side) or transposed (its Conv1D
// weights, [in, out]): read whole in float32, then each part copied into its parameter.
void read_packed(io::SafetensorsReader& reader, const std::string& stored, const ExternalTensor& e,
                 const TensorMap& own) {
  Tensor whole = empty(e.shape, kFloat32);
  reader.read_into(stored, whole);
  NoGradGuard no_grad;
  if (e.transposed) whole = transpose(whole, 0, 1);
  int64_t offset = 0;
  for (const std::string& p : e.parts) {
    const Tensor& dst = own.at(p);
    const int64_t len = dst.size(e.dim);
    Tensor part = e.parts.size() == 1 ? whole : narrow(whole, e.dim, offset, len);
    offset += len;
    dst.copy_(part.dtype() == dst.dtype() ? part : part.to(dst.dtype()));
  }
}

std::string first_few(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 4; ++i) s += (s.empty() ? "'" : ", '") + names[i] + "'";
  if (names.size() > 4) s += str_cat(" and ", names.size() - 4, " more");
  return s;
}

}  // namespace

std::shared_ptr<DecoderLM> load_hf(const std::string& folder, HFConfig* config_out, const LoadOptions& options) {
  return load_hf(io::ModelSource::open(folder, "load_hf"), config_out, options);
}

std::shared_ptr<DecoderLM> load_hf(const io::ModelSource& source, HFConfig* config_out, const LoadOptions& options) {
  const std::string& folder = source.path;
  check(source.format == io::ModelFormat::HuggingFace, "load_hf: ", folder, " is a ",
        io::model_format_name(source.format), ", not a Hugging Face folder");
  check(!source.config_file.empty(), "load_hf: ", folder, " has no config.json");
  const std::string& config_path = source.config_file;
  const HFConfig config = HFConfig::from_json(io::read_file(config_path, "load_hf"), config_path);
  check(!source.shards.empty(), "load_hf: ", folder, " has neither model.safetensors nor model.safetensors.index.json");
  // Every parameter is read below (a missing one is an error), so none is drawn at random first:
  // the random init would cost more than reading the weights.
  // The matrices in the dtype asked for (auto: the folder's torch_dtype), allocated before any is
  // read, so that a bf16 or q8_0 base never exists as a whole float32 copy.
  const Dtype stored = options.weights != WeightDtype::Auto ? weight_dtype_tensor(options.weights)
                       : config.torch_dtype == "bfloat16"   ? kBFloat16
                       : config.torch_dtype == "float16"    ? kF16
                                                            : kFloat32;
  std::shared_ptr<DecoderLM> model;
  try {
    init::SkipInitGuard skip;
    StoredWeightsGuard planned(stored, config.lm.dtype);
    model = std::make_shared<DecoderLM>(config.lm);
  } catch (const Error& e) {  // a model too large for this machine: say which file asked for it
    throw Error(str_cat(config_path, ": ", e.what()));
  }
  if (stored != kFloat32) store_weights_in(*model, stored, /*values=*/false);
  const NamingScheme& scheme = NamingScheme::get(hf_naming_scheme(config.architecture));
  const std::map<std::string, ExternalTensor> expected = external_tensors(*model, scheme);
  const TensorMap own = model->state_dict();  // handles to the parameters' storage
  std::vector<std::string> expected_names;
  for (const auto& [n, e] : expected) expected_names.push_back(n);
  const char* arch = hf_architecture_name(config.architecture);

  std::set<std::string> loaded;
  std::string tied_head_file;  // the file holding lm_head.weight of a tied model
  for (const auto& [path, names] : source.shards) {
    const std::string file = fs::path(path).filename().string();
    io::SafetensorsReader reader(path);
    if (source.sharded())
      for (const std::string& n : names)
        check(reader.contains(n), source.index_file, ": weight_map puts '", n, "' in ", file, ", which does not hold it");
    std::vector<std::pair<uint64_t, std::string>> order;  // file order: one pass over the file
    for (const auto& [name, e] : reader.entries()) order.emplace_back(e.begin, name);
    std::sort(order.begin(), order.end());
    for (const auto& [begin, stored] : order) {
      const std::string name = scheme.canonical(stored);  // GPT-2's names may lack "transformer."
      if (scheme.ignores(name)) continue;
      if (source.sharded()) {
        auto w = source.weight_map.find(stored);
        check(w != source.weight_map.end() && w->second == path, path, ": tensor '", stored, "' is ",
              w == source.weight_map.end()
                  ? std::string("not in the weight_map of ") + source.index_file
                  : "put in " + fs::path(w->second).filename().string() + " by " + source.index_file);
      }
      if (name == "lm_head.weight" && config.lm.tie_embeddings) {
        tied_head_file = path;
        continue;
      }
      auto it = expected.find(name);
      check(it != expected.end(), path, ": tensor '", stored, "' is not part of a ", arch,
            " with this config.json (closest expected: '", closest_name(name, expected_names), "')");
      check(loaded.insert(name).second, path, ": tensor '", stored, "' is stored in more than one file");
      const ExternalTensor& e = it->second;
      const io::SafetensorsEntry& entry = reader.entry(stored);
      check(entry.shape == e.shape, path, ": tensor '", stored, "' has shape ", shape_str(entry.shape), ", config.json ",
            "gives ", shape_str(e.shape));
      // The model is built in HF's rotate-half layout: no rows to permute.
      check(!e.rope_permuted, "load_hf: internal error: '", name, "' is permuted");
      if (e.parts.size() == 1 && !e.transposed) {
        reader.read_into(stored, own.at(e.parts[0]));
        continue;
      }
      read_packed(reader, stored, e, own);
    }
  }
  std::vector<std::string> missing;
  for (const auto& n : expected_names)
    if (!loaded.count(n)) missing.push_back(n);
  check(missing.empty(), "load_hf: ", folder, ": missing tensor", missing.size() > 1 ? "s " : " ", first_few(missing),
        " (", arch, " with this config.json; weights from ",
        source.sharded() ? source.index_file : source.shards.begin()->first, ")");
  if (!tied_head_file.empty()) {  // a tied model's copy of the embeddings must be that copy
    io::SafetensorsReader reader(tied_head_file);
    const Tensor emb = model->tok_embeddings()->weight();
    check(reader.entry("lm_head.weight").shape == emb.shape(), tied_head_file, ": tensor 'lm_head.weight' has shape ",
          shape_str(reader.entry("lm_head.weight").shape), ", the tied embeddings ", shape_str(emb.shape()));
    Tensor head = empty(emb.shape(), emb.dtype());  // read as the embeddings are stored, then compared
    reader.read_into("lm_head.weight", head);
    if (std::memcmp(head.raw_data(), emb.raw_data(), storage_bytes(emb.dtype(), emb.numel())) != 0) {
      const std::vector<double> a = head.to_vector(), b = emb.to_vector();
      std::size_t i = 0;
      while (i + 1 < a.size() && a[i] == b[i]) ++i;
      throw Error(str_cat(tied_head_file, ": tensor 'lm_head.weight' differs from model.embed_tokens.weight at element ",
                          i, " (", a[i], " vs ", b[i], ") but config.json has tie_word_embeddings true"));
    }
  }
  if (config_out) *config_out = config;
  return model;
}

// ---------------------------------------------------------------------------------------------
// save_hf

void save_hf(const DecoderLM& model, const std::string& folder, const SaveHFOptions& options) {
  check(!folder.empty(), "save_hf: the folder name is empty");
  const Dtype dtype = model.tok_embeddings()->weight().dtype();
  check(dtype == kFloat32 || options.dtype == io::StoredFloat::BFloat16, "save_hf: the model is ", dtype_name(dtype),
        "; Hugging Face folders are float32 or bfloat16 here (convert with to(kFloat32) or save as bfloat16)");
  check(options.max_shard_bytes > 0, "save_hf: max_shard_bytes must be positive");
  HFConfig config = options.config ? *options.config : HFConfig::from_lm(model.config());
  if (options.config) {
    HFConfig inferred = HFConfig::from_lm(model.config());
    check(inferred.lm.to_json() == HFConfig::from_lm(config.lm).lm.to_json(),
          "save_hf: options.config describes another model than the one saved");
  }
  // The source's config.json, when it describes this architecture: its keys that do not change
  // the forward (pad_token_id, Phi-3's original_max_position_embeddings, use_cache ...) are
  // written back beside the ones computed here, which win where both have a key.
  json source_config;
  if (!options.source.empty()) {
    check(fs::is_directory(options.source), "save_hf: source folder ", options.source, " does not exist");
    const io::ModelSource source = io::ModelSource::open(options.source, "save_hf");
    if (!options.config && source.format == io::ModelFormat::HuggingFace && !source.config_file.empty()) {
      const std::string& path = source.config_file;
      const HFConfig src = HFConfig::from_json(io::read_file(path, "save_hf"), path);
      // The source's architecture name when it computes the same model (Mistral and Phi-3 are
      // Llama without biases, with or without a window).
      const bool llama_like = config.architecture == HFArchitecture::Llama || config.architecture == HFArchitecture::Mistral;
      const bool same = src.architecture == config.architecture ||
                        ((src.architecture == HFArchitecture::Mistral || src.architecture == HFArchitecture::Phi3) &&
                         llama_like && !config.attention().qkv_bias);
      if (same) {
        config.architecture = src.architecture;
        source_config = json::parse(io::read_file(path, "save_hf"));
      }
      config.bos_token_id = src.bos_token_id;
      config.eos_token_ids = src.eos_token_ids;
      config.eos_is_list = src.eos_is_list;
    }
  }
  config.torch_dtype = options.dtype == io::StoredFloat::BFloat16 ? "bfloat16" : "float32";
  const TensorMap tensors = model.state_dict(NamingScheme::get(hf_naming_scheme(config.architecture)));

  // Shards as the Hub fills them: tensors in order, a new shard when the next would overflow.
  std::vector<TensorMap> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = io::safetensors_data_bytes({{name, t}}, options.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().emplace(name, t);
    shard_bytes += bytes;
    total += bytes;
  }

  const fs::path target = fs::path(folder).lexically_normal();
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  check(!ec, "save_hf: cannot create ", parent.string(), " (", ec.message(), ")");
  check(!fs::exists(target) || fs::is_directory(target), "save_hf: ", folder, " exists and is not a folder");
  const std::string tag = str_cat(".", target.filename().string(), ".tmp.", ::getpid());
  const fs::path tmp = parent / tag;
  const fs::path old = parent / str_cat(".", target.filename().string(), ".old.", ::getpid());
  fs::remove_all(tmp, ec);
  std::set<std::string> written;
  try {
    fs::create_directories(tmp);
    std::string config_text = config.to_json();
    if (source_config.is_object()) {
      json merged = json::parse(config_text);
      for (const auto& [key, value] : source_config.items())
        if (!merged.contains(key)) merged[key] = value;
      config_text = merged.dump(2) + "\n";
    }
    io::write_file_atomic((tmp / "config.json").string(), config_text, "save_hf");
    written.insert("config.json");
    const std::map<std::string, std::string> metadata{{"format", "pt"}};
    if (shards.size() == 1) {
      io::save_safetensors((tmp / io::kHfWeightsFile).string(), shards[0], metadata, options.dtype);
      written.insert(io::kHfWeightsFile);
    } else {
      json index;
      index["metadata"] = {{"total_size", total}};
      json map = json::object();
      const std::size_t n = shards.size();
      for (std::size_t i = 0; i < n; ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
        io::save_safetensors((tmp / name).string(), shards[i], metadata, options.dtype);
        written.insert(name);
        for (const auto& [t, v] : shards[i]) map[t] = name;
      }
      index["weight_map"] = map;
      io::write_file_atomic((tmp / io::kHfIndexFile).string(), index.dump(2) + "\n", "save_hf");
      written.insert(io::kHfIndexFile);
    }
    if (!options.source.empty())
      for (const char* f : kTokenizerFiles) {
        const fs::path src = fs::path(options.source) / f;
        if (!fs::is_regular_file(src)) continue;
        io::write_file_atomic((tmp / f).string(), io::read_file(src.string(), "save_hf"), "save_hf");
        written.insert(f);
      }
    if (fs::exists(target)) {
      // Files of the old folder that are not weights of a model (a README, an adapter) are
      // carried over as hard links (copies where links fail).
      for (const auto& entry : fs::directory_iterator(target)) {
        const std::string n = entry.path().filename().string();
        const bool weights = n == io::kHfIndexFile || (n.rfind("model", 0) == 0 && entry.path().extension() == ".safetensors");
        if (written.count(n) || weights || !entry.is_regular_file()) continue;
        fs::create_hard_link(entry.path(), tmp / n, ec);
        if (ec) fs::copy_file(entry.path(), tmp / n);
      }
      fs::rename(target, old);
      try {
        fs::rename(tmp, target);
      } catch (...) {
        fs::rename(old, target, ec);
        throw;
      }
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, target);
    }
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    throw Error(str_cat("save_hf: writing ", folder, " failed: ", e.what()));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::shared_ptr<DecoderLM> load_model(const io::ModelSource& source, const LoadOptions& options) {
  switch (source.format) {
    case io::ModelFormat::HuggingFace: return load_hf(source, nullptr, options);
    case io::ModelFormat::Gguf: return load_gguf_model(*source.gguf, options);
    case io::ModelFormat::Xgrad: break;
  }
  std::shared_ptr<DecoderLM> model = load_pretrained(source.dir);
  // An xgrad folder's weights are float32 (or what save_pretrained wrote): auto keeps them.
  if (options.weights != WeightDtype::Auto && options.weights != WeightDtype::F32)
    store_weights_in(*model, weight_dtype_tensor(options.weights));
  return model;
}

std::shared_ptr<DecoderLM> load_model(const std::string& path, const LoadOptions& options) {
  return load_model(io::ModelSource::open(path), options);
}

}  // namespace xg::nn

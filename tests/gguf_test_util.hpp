// What the GGUF tests share: llama.cpp's values (tests/fixtures/gguf/expected.json, made by
// tests/fixtures/gen_gguf.sh), the model folders those were made from (assembled in a scratch
// folder as the script assembles them), xgrad's next-token log-probs over the same windows,
// greedy tokens, and the FNV-1a 64 of a file (gen_gguf.mjs's hash).
#pragma once

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autograd/graph.hpp"
#include "nn/decoder.hpp"
#include "tests/cli_run.hpp"

namespace xg::test {

inline const nlohmann::json& gguf_expected() {
  static const nlohmann::json j = nlohmann::json::parse(slurp(std::string(XGRAD_FIXTURE_DIR) + "/gguf/expected.json"));
  return j;
}
inline const nlohmann::json& gguf_case(const std::string& name) { return gguf_expected().at("cases").at(name); }
inline std::filesystem::path gguf_fixture(const std::string& name) {
  return std::filesystem::path(XGRAD_FIXTURE_DIR) / "gguf" / name;
}

// The HF folders gen_gguf.sh exports: "llama3" and "qwen2" (tests/fixtures/hf/<name> with the
// byte256 tokenizer) and "qwen3" (hf/qwen3_vocab with the real Qwen3 tokenizer); "trained" is
// the committed xgrad folder itself.
inline std::filesystem::path gguf_source_folder(const std::string& name, const std::filesystem::path& scratch) {
  namespace fs = std::filesystem;
  const fs::path fx = XGRAD_FIXTURE_DIR;
  if (name == "trained") return fx / "gguf" / "trained";
  const fs::path out = scratch / name;
  fs::create_directories(out);
  const auto copy = [&](const fs::path& from) { fs::copy_file(from, out / from.filename(), fs::copy_options::overwrite_existing); };
  if (name == "llama3" || name == "qwen2") {
    for (const auto& e : fs::directory_iterator(fx / "hf" / name))
      if (e.path().filename() != "special_tokens_map.json") copy(e.path());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) copy(fx / "gguf" / "byte256" / f);
  } else {
    for (const char* f : {"config.json", "model.safetensors"}) copy(fx / "hf" / "qwen3_vocab" / f);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) copy(fx / "tokenizers" / "qwen3" / f);
  }
  return out;
}

// log p(ids[t+1] | ids[..t]) over the windows llama.cpp was given: consecutive chunks of
// `window` ids, each evaluated from an empty context, until `positions` values.
inline std::vector<double> gguf_logprobs(nn::DecoderLM& model, const std::vector<int64_t>& ids, int64_t window,
                                         int64_t positions) {
  NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  std::vector<double> out;
  for (std::size_t start = 0; static_cast<int64_t>(out.size()) < positions && start < ids.size(); start += window) {
    const std::vector<int64_t> w(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                 ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), start + window)));
    const Tensor logits = model(from_vector(w, {1, static_cast<int64_t>(w.size())}));
    const int64_t V = logits.size(2);
    const float* l = logits.data<float>();
    for (std::size_t t = 0; t + 1 < w.size() && static_cast<int64_t>(out.size()) < positions; ++t) {
      const float* row = l + t * V;
      double m = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(row[v]));
      for (int64_t v = 0; v < V; ++v) s += std::exp(row[v] - m);
      out.push_back(row[w[t + 1]] - m - std::log(s));
    }
  }
  return out;
}

// Greedy continuation of `prompt` (KV-cached generate, temperature 0).
inline std::vector<int64_t> gguf_greedy(nn::DecoderLM& model, const std::vector<int64_t>& prompt, int64_t n) {
  nn::GenerateOptions g;
  g.temperature = 0;
  const Tensor out = model.generate(from_vector(prompt, {1, static_cast<int64_t>(prompt.size())}), n, g);
  const int64_t* p = out.data<int64_t>();
  return std::vector<int64_t>(p + prompt.size(), p + out.numel());
}

// The largest |a - b| and where it is.
struct GgufWorst {
  double diff = 0;
  std::size_t at = 0;
};
inline GgufWorst gguf_worst(const std::vector<double>& a, const std::vector<double>& b) {
  GgufWorst w;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (std::fabs(a[i] - b[i]) > w.diff) w = {std::fabs(a[i] - b[i]), i};
  return w;
}

inline std::string gguf_fnv1a64(const std::filesystem::path& file) {
  const std::string bytes = slurp(file.string());
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace xg::test

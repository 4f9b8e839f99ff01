// libFuzzer target: Hugging Face folders (nn/hf.cpp). The first byte picks what the rest is:
//   0: config.json text (HFConfig::from_json; a config that parses must write and parse again
//      to the same model)
//   1: model.safetensors.index.json of a folder with a tiny valid config.json and one shard
//   2: model.safetensors of that folder (read tensor by tensor into the model, F16/BF16 widened),
//      with one of its F32 / F16 / BF16 values set to NaN, Inf or a huge value (see
//      fuzz/low_precision.hpp), loaded with its matrices stored in float32, bfloat16 or q8_0:
//      a model that loads never holds a NaN or Inf.
#include <filesystem>

#include "autograd/elementwise.hpp"
#include "fuzz/fuzz_util.hpp"
#include "fuzz/low_precision.hpp"
#include "io/safetensors.hpp"
#include "nn/hf.hpp"

namespace {

// A 1-layer Llama with vocab 8, hidden 4, 2 heads of 2, intermediate 4.
const char* kTinyConfig = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 4,
  "intermediate_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
  "max_position_embeddings": 16, "tie_word_embeddings": true})";

// `body` with one float value of one tensor poked (when it opens as a safetensors file).
std::string poked(std::string body, uint64_t h) {
  try {
    xg::io::SafetensorsReader r(xg::fuzz::scratch_file("hf/model.safetensors", body));
    if (r.entries().empty()) return body;
    auto it = r.entries().begin();
    std::advance(it, static_cast<long>(xg::fuzz::pick(h, 24, r.entries().size())));
    xg::fuzz::poke(body, xg::fuzz::safetensors_data_start(body) + it->second.begin, it->second.end - it->second.begin,
                   xg::fuzz::stored(it->second.dtype), h);
  } catch (const xg::Error&) {
  }
  return body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string body = xg::fuzz::as_string(data + 1, size - 1);
  const uint64_t h = xg::fuzz::input_hash(data, size);
  return xg::fuzz::expect_only_xg_errors([&] {
    namespace fs = std::filesystem;
    if (data[0] % 3 == 0) {
      const xg::nn::HFConfig c = xg::nn::HFConfig::from_json(body, "config.json");
      const xg::nn::HFConfig again = xg::nn::HFConfig::from_json(c.to_json(), "again");
      if (again.lm.to_json() != c.lm.to_json()) __builtin_trap();
      return;
    }
    const fs::path dir = xg::fuzz::scratch_dir() / "hf";
    fs::remove_all(dir);
    fs::create_directories(dir);
    xg::fuzz::scratch_file("hf/config.json", kTinyConfig);
    if (data[0] % 3 == 1) {
      xg::fuzz::scratch_file("hf/model.safetensors.index.json", body);
      xg::fuzz::scratch_file("hf/model-00001-of-00001.safetensors", std::string(8, '\0'));
    } else {
      xg::fuzz::scratch_file("hf/model.safetensors", poked(body, h));
    }
    const auto model = xg::nn::load_hf(dir.string(), nullptr, xg::fuzz::load_options(h));
    for (const auto& [name, p] : model->named_parameters())
      if (!xg::isfinite_all(p.dtype() == xg::kFloat32 ? p : p.to(xg::kFloat32))) __builtin_trap();
  });
}

// nn/hf.cpp's refusals: each config.json key or value xgrad would compute differently, and each
// malformed weight folder (a missing shard, unknown / missing / misshapen tensors, offsets out of
// range, a tied head that differs), each an xg::Error naming the file, the key or the tensor.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/settings.hpp"
#include "nn/hf.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace {

using test::fixture;
using test::fresh_test_dir;
using test::tensors_close;

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

std::string hferr_fixture(const std::string& name) { return std::string(XGRAD_FIXTURE_DIR) + "/hf/" + name; }

ojson hferr_config(const std::string& name) {
  std::ifstream in(hferr_fixture(name) + "/config.json");
  return ojson::parse(in);
}

// HFConfig::from_json of the fixture's config.json with `edit` applied.
void hferr_parse(const std::string& name, const std::function<void(ojson&)>& edit) {
  ojson j = hferr_config(name);
  edit(j);
  nn::HFConfig::from_json(j.dump(), "cfg.json");
}

// A copy of a fixture folder to break.
fs::path hferr_copy(const std::string& name) {
  const fs::path dir = fresh_test_dir(name);
  fs::remove(dir);
  fs::copy(hferr_fixture(name), dir, fs::copy_options::recursive);
  return dir;
}

void hferr_write(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(NnHfErrors, RefusedConfigsNameTheKeyAndValue) {
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["architectures"] = {"FalconForCausalLM"}; }),
                  "cfg.json: key 'architectures' = [\"FalconForCausalLM\"] is not supported (xgrad reads LlamaForCausalLM, "
                  "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j.erase("architectures"); j["model_type"] = "falcon"; }),
                  "key 'model_type' = \"falcon\" is not supported");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["model_type"] = "llama"; }),
                  "key 'model_type' = \"llama\" is not supported (it disagrees with architectures Qwen2ForCausalLM)");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["hidden_act"] = "gelu_pytorch_tanh"; }),
                  "key 'hidden_act' = \"gelu_pytorch_tanh\" is not supported");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["rope_scaling"]["rope_type"] = "longrope"; }),
                  "key 'rope_scaling.rope_type' = \"longrope\" is not supported");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["rope_scaling"] = {{"type", "su"}, {"factor", 2.0}}; }),
                  "key 'rope_scaling.type' = \"su\" is not supported");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}, {"low_freq_factor", 1.0}}; }),
                  "key 'rope_scaling.low_freq_factor' = 1.0 is not supported (rope_type \"linear\" takes factor only)");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["rope_scaling"] = {{"type", "dynamic"}}; }),
                  "key 'rope_scaling.factor' must be given for rope_type \"dynamic\", got nothing");
  // Dynamic NTK with a shorter original length would change the base inside max_position_embeddings.
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) {
                    j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 64}};
                  }),
                  "key 'rope_scaling.original_max_position_embeddings' = 64 is not supported");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["rope_scaling"].erase("low_freq_factor"); }),
                  "key 'rope_scaling.low_freq_factor' must be given for rope_type \"llama3\", got nothing");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["mlp_bias"] = true; }), "key 'mlp_bias' = true is not supported");
  EXPECT_XG_ERROR(hferr_parse("mistral", [](ojson& j) { j["sliding_window"] = 0; }),
                  "key 'sliding_window' must be a positive integer, got 0");
  EXPECT_XG_ERROR(hferr_parse("qwen3", [](ojson& j) {
                    j["use_sliding_window"] = true;
                    j["sliding_window"] = 32;
                    j["layer_types"] = {"full_attention", "chunked_attention"};
                  }),
                  "key 'layer_types' = [\"full_attention\",\"chunked_attention\"] is not supported");
  EXPECT_XG_ERROR(hferr_parse("qwen3", [](ojson& j) {
                    j["use_sliding_window"] = true;
                    j["sliding_window"] = 32;
                    j["layer_types"] = {"full_attention"};
                  }),
                  "key 'layer_types' must be a list of 2 layer types (num_hidden_layers)");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["attention_dropout"] = 0.1; }),
                  "key 'attention_dropout' = 0.1 is not supported");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["quantization_config"] = {{"quant_method", "gptq"}}; }),
                  "key 'quantization_config' = {\"quant_method\":\"gptq\"} is not supported");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["torch_dtype"] = "float8_e4m3fn"; }),
                  "key 'torch_dtype' = \"float8_e4m3fn\" is not supported");
  EXPECT_XG_ERROR(hferr_parse("llama3", [](ojson& j) { j["partial_rotary_factor"] = 0.5; }),
                  "key 'partial_rotary_factor' = 0.5 is not supported");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["num_key_value_heads"] = 3; }),
                  "key 'num_key_value_heads' must be a divisor of num_attention_heads (4), got 3");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["hidden_size"] = "32"; }),
                  "key 'hidden_size' must be an integer, got \"32\"");
  EXPECT_XG_ERROR(hferr_parse("qwen2", [](ojson& j) { j["eos_token_id"] = {1, "x"}; }),
                  "key 'eos_token_id' must be an integer, a list of integers or null");
  // Sliding windows: on every layer (Mistral), from max_window_layers on or by layer_types (Qwen2/3);
  // one that covers every position is no window.
  EXPECT_EQ(nn::HFConfig::from_json(R"({"model_type": "mistral", "sliding_window": 64, "max_position_embeddings": 128,
                                        "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                                        "num_key_value_heads": 1})").lm.layer_windows,
            (std::vector<int64_t>{64, 64}));
  EXPECT_TRUE(nn::HFConfig::from_json(R"({"model_type": "mistral", "sliding_window": 128, "max_position_embeddings": 128,
                                         "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                                         "num_key_value_heads": 1})")
                  .lm.layer_windows.empty());
  EXPECT_EQ(nn::HFConfig::from_json(R"({"model_type": "qwen2", "use_sliding_window": true, "sliding_window": 32,
                                        "max_window_layers": 1, "max_position_embeddings": 128,
                                        "num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                                         "num_key_value_heads": 1})")
                .lm.layer_windows,
            (std::vector<int64_t>{0, 32}));
  EXPECT_NO_THROW(hferr_parse("qwen2", [](ojson& j) { j["use_sliding_window"] = true; }));  // max_window_layers 2
  // Through load_hf the message names the file.
  const fs::path dir = hferr_copy("qwen2");
  ojson j = hferr_config("qwen2");
  j["hidden_act"] = "relu";
  hferr_write(dir / "config.json", j.dump());
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), (dir / "config.json").string() + ": key 'hidden_act' = \"relu\"");
}

// A config.json asking for more layers than the machine can hold is refused before they are
// allocated, naming the file and the size (num_hidden_layers is xgrad's n_layers).
TEST(NnHfErrors, AModelTooLargeForTheMachineNamesTheFile) {
  const fs::path dir = hferr_copy("qwen2");
  ojson j = hferr_config("qwen2");
  j["num_hidden_layers"] = 100000000;
  hferr_write(dir / "config.json", j.dump());
  Settings one_gb = settings();
  one_gb.memory_limit = "1073741824";  // a machine of 1 GB
  SettingsGuard guard(one_gb);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), (dir / "config.json").string() + ": DecoderLM: field 'n_layers' 100000000 (");
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "more than this machine's 1 GB of memory");
}

TEST(NnHfErrors, MissingShardNamesTheFile) {
  const fs::path dir = hferr_copy("llama3");
  fs::remove(dir / "model-00002-of-00003.safetensors");
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "model.safetensors.index.json: shard 'model-00002-of-00003.safetensors'");
  hferr_write(dir / "model.safetensors.index.json", R"({"weight_map": {"lm_head.weight": "../x.safetensors"}})");
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "names '../x.safetensors', not a file name inside the folder");
  fs::remove(dir / "model.safetensors.index.json");
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "has neither model.safetensors nor model.safetensors.index.json");
}

TEST(NnHfErrors, IndexAndShardsMustAgree) {
  const fs::path dir = hferr_copy("llama3");
  std::ifstream in(dir / "model.safetensors.index.json");
  ojson index = ojson::parse(in);
  in.close();
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  hferr_write(dir / "model.safetensors.index.json", index.dump());
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "weight_map puts 'model.norm.weight' in model-00001-of-00003.safetensors, which does not hold it");
}

TEST(NnHfErrors, UnknownMissingAndMisshapenTensors) {
  const fs::path dir = hferr_copy("mistral");
  const std::string file = (dir / "model.safetensors").string();
  const TensorMap good = io::load_safetensors(hferr_fixture("mistral") + "/model.safetensors");
  TensorMap t = good;
  t.emplace("model.layers.0.mlp.extra_proj.weight", zeros({2, 2}));
  io::save_safetensors(file, t);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), file + ": tensor 'model.layers.0.mlp.extra_proj.weight' is not part of a MistralForCausalLM");
  t = good;
  t.erase("model.norm.weight");
  io::save_safetensors(file, t);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "missing tensor 'model.norm.weight'");
  t = good;
  t.at("model.layers.1.self_attn.k_proj.weight") = zeros({8, 32});
  io::save_safetensors(file, t);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()),
                  "tensor 'model.layers.1.self_attn.k_proj.weight' has shape [8,32], config.json gives [16,32]");
  t = good;
  t.at("model.norm.weight") = from_vector(std::vector<int64_t>(32, 1), {32});
  io::save_safetensors(file, t);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "tensor 'model.norm.weight' is I64, not a float dtype");
}

TEST(NnHfErrors, TiedHeadMustEqualTheEmbeddings) {
  const fs::path dir = hferr_copy("qwen2");  // tied, with lm_head.weight stored
  const std::string file = (dir / "model.safetensors").string();
  TensorMap t = io::load_safetensors(file);
  t.at("lm_head.weight") = t.at("lm_head.weight") * 2.0;
  io::save_safetensors(file, t);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "tensor 'lm_head.weight' differs from model.embed_tokens.weight");
  t.erase("lm_head.weight");  // absent is fine when tied
  io::save_safetensors(file, t);
  EXPECT_NO_THROW(nn::load_hf(dir.string()));
}

TEST(NnHfErrors, MalformedWeightFiles) {
  const fs::path dir = hferr_copy("mistral");
  const std::string file = (dir / "model.safetensors").string();
  auto with_header = [&](const std::string& header, std::size_t data_bytes) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    hferr_write(file, bytes + header + std::string(data_bytes, '\0'));
  };
  with_header(R"({"model.norm.weight": {"dtype": "BF16", "shape": [32], "data_offsets": [0, 640]}})", 64);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), file + ": tensor 'model.norm.weight': data_offsets span 640 bytes");
  with_header(R"({"model.norm.weight": {"dtype": "BF16", "shape": [32], "data_offsets": [64, 128]}})", 128);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), file + ": tensor 'model.norm.weight' starts at byte 64 of the data, expected 0");
  with_header(R"({"model.norm.weight": {"dtype": "BF16", "shape": [32], "data_offsets": [0, 64]}})", 10);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), file + ": tensors cover 64 bytes of data but the file holds 10");
  with_header(R"({"model.norm.weight": {"dtype": "bf16", "shape": [32], "data_offsets": [0, 64]}})", 64);
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), file + ": tensor 'model.norm.weight': unsupported dtype bf16");
  hferr_write(file, std::string("\x10\0\0\0\0\0\0\0{\"a\":", 13));
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), file + ": header length 16 runs past the end");
}

TEST(NnHfErrors, SaveLeavesNoHalfWrittenFolder) {
  const fs::path dir = fresh_test_dir();
  auto model = nn::load_hf(hferr_fixture("qwen3"));
  nn::SaveHFOptions o;
  o.source = (dir / "no-such-folder").string();
  EXPECT_XG_ERROR(nn::save_hf(*model, (dir / "out").string(), o), "source folder");
  EXPECT_FALSE(fs::exists(dir / "out"));
  // A target that is a file is refused before anything is written, and nothing is left beside it.
  hferr_write(dir / "file", "x");
  EXPECT_XG_ERROR(nn::save_hf(*model, (dir / "file").string()), "exists and is not a folder");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename() != "file";
  EXPECT_EQ(entries, 0);
}

}  // namespace
}  // namespace xg

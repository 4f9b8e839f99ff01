// PEFT adapters on the fused projections of GPT-2 (c_attn) and Phi-3 (qkv_proj, gate_up_proj)
// (finetune/peft.hpp, namings hf_gpt2 / hf_phi3): xgrad's per-part adapters written as PEFT's
// one LoRA per fused Linear have xgrad's delta W within float rounding and read back to the same
// logits; adapter folders written as PEFT does (tests/fixtures/gen_peft_fused.py) load to
// PyTorch's float64 logits.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
#include "finetune/lora.hpp"
#include "finetune/peft.hpp"
#include "io/safetensors.hpp"
#include "nn/hf.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace peft_fused_test {

namespace fs = std::filesystem;
using test::tensors_close;

std::string hf_folder(const std::string& name) { return std::string(XGRAD_FIXTURE_DIR) + "/hf/" + name; }

Tensor logits_of(nn::DecoderLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  return model(tokens);
}

// scaling * B A of a module's adapter, [out, in] (zeros when it has none).
Tensor delta_of(const nn::Linear& lin) {
  NoGradGuard no_grad;
  const auto a = finetune::lora_of(lin);
  if (!a) return zeros({lin.out_features(), lin.in_features()});
  return matmul(a->B().detach(), a->A().detach()) * a->scaling();
}

// Injects adapters on `targets` with B drawn at random (B starts at zeros).
void inject_random(nn::DecoderLM& model, const finetune::LoRAConfig& c) {
  Generator gen(5);
  finetune::inject_lora(model, c, gen);
  NoGradGuard no_grad;
  for (const auto& [path, a] : finetune::lora_adapters(model)) a->B().copy_(randn(a->B().shape(), kFloat32, &gen) * 0.3);
}

struct Case {
  const char* name;
  const char* naming;
  const char* targets;
  const char* fused;                     // the fused module of block 0 checked below
  std::vector<const char*> parts;        // its parts, xgrad's paths under layers.0
  int64_t k;                             // how many parts
};

TEST(FinetunePeftFused, WrittenAdapterHasXgradsDeltaAndReadsBack) {
  const Case cases[] = {
      {"gpt2", "hf_gpt2", "q,v,o,up", "transformer.h.0.attn.c_attn", {"attention.w_q", "attention.w_k", "attention.w_v"}, 3},
      {"phi3", "hf_phi3", "q,v,o,gate,up", "model.layers.0.self_attn.qkv_proj",
       {"attention.w_q", "attention.w_k", "attention.w_v"}, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = nn::load_hf(hf_folder(c.name));
    finetune::LoRAConfig cfg;
    cfg.r = 4;
    cfg.alpha = 8;
    cfg.targets = c.targets;
    inject_random(*model, cfg);
    const fs::path dir = test::fresh_test_dir(c.name);
    finetune::save_adapter(*model, dir.string(), cfg, "", c.naming);

    const TensorMap w = io::load_safetensors((dir / "adapter_model.safetensors").string());
    const nlohmann::json j = nlohmann::json::parse(test::slurp((dir / "adapter_config.json").string()));
    const std::string leaf = std::string(c.fused).substr(std::string(c.fused).rfind('.') + 1);
    EXPECT_EQ(j.at("rank_pattern").at(leaf), c.k * cfg.r);
    EXPECT_EQ(j.at("alpha_pattern").at(leaf), c.k * cfg.alpha);
    EXPECT_EQ(j.at("fan_in_fan_out"), std::string(c.name) == "gpt2");
    const Tensor A = w.at(str_cat("base_model.model.", c.fused, ".lora_A.weight"));
    const Tensor B = w.at(str_cat("base_model.model.", c.fused, ".lora_B.weight"));
    EXPECT_EQ(A.size(0), c.k * cfg.r);
    EXPECT_EQ(B.size(1), c.k * cfg.r);
    // The fused delta (alpha' / r') B A against xgrad's parts' deltas stacked.
    std::map<std::string, std::shared_ptr<nn::Linear>> lins;
    for (const auto& [p, l] : finetune::linear_modules(*model)) lins.emplace(p, l);
    std::vector<Tensor> parts;
    for (const char* p : c.parts) parts.push_back(delta_of(*lins.at(str_cat("layers.0.", p))));
    NoGradGuard no_grad;
    const Tensor fused = matmul(B, A) * (static_cast<double>(c.k * cfg.alpha) / static_cast<double>(c.k * cfg.r));
    EXPECT_TRUE(tensors_close(fused, cat(parts, 0), 1e-6, 1e-6));

    // Read back into a fresh model: the same logits.
    auto fresh = nn::load_hf(hf_folder(c.name));
    const finetune::AdapterInfo info = finetune::load_adapter(*fresh, dir.string(), c.naming);
    EXPECT_TRUE(std::find(info.modules.begin(), info.modules.end(), c.fused) != info.modules.end());
    const Tensor tokens = test::ids({3, 9, 200, 17, 64, 1, 5, 250}, {1, 8});
    EXPECT_TRUE(tensors_close(logits_of(*fresh, tokens), logits_of(*model, tokens), 1e-5, 1e-5));
  }
}

TEST(FinetunePeftFused, PeftFoldersLoadToTorchLogits) {
  const TensorMap& fx = test::fixture("peft_fused");
  for (const auto& [name, naming] : {std::pair{"gpt2", "hf_gpt2"}, std::pair{"phi3", "hf_phi3"}}) {
    SCOPED_TRACE(name);
    auto model = nn::load_hf(hf_folder(name));
    finetune::load_adapter(*model, std::string(XGRAD_FIXTURE_DIR) + "/peft_fused/" + name, naming);
    const Tensor logits = logits_of(*model, fx.at(std::string(name) + ".tokens"));
    EXPECT_TRUE(tensors_close(logits.to(kFloat64), fx.at(std::string(name) + ".logits"), 1e-5, 1e-5));
  }
  // A fused module's B of the wrong height is refused by name before the model changes.
  const fs::path dir = test::fresh_test_dir();
  const std::string src = std::string(XGRAD_FIXTURE_DIR) + "/peft_fused/phi3";
  fs::copy_file(src + "/adapter_config.json", dir / "adapter_config.json");
  TensorMap w = io::load_safetensors(src + "/adapter_model.safetensors");
  const std::string key = "base_model.model.model.layers.0.mlp.gate_up_proj.lora_B.weight";
  w[key] = zeros({48, 4});
  io::save_safetensors((dir / "adapter_model.safetensors").string(), w);
  auto model = nn::load_hf(hf_folder("phi3"));
  EXPECT_XG_ERROR(finetune::load_adapter(*model, dir.string(), "hf_phi3"),
                  "'model.layers.0.mlp.gate_up_proj.lora_B.weight' has shape [48,4], module "
                  "'model.layers.0.mlp.gate_up_proj' (in 32, out 96, r 4) needs [96,4]");
  EXPECT_TRUE(finetune::lora_adapters(*model).empty());
}

}  // namespace peft_fused_test
}  // namespace xg

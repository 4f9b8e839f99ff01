// PEFT adapters on the fused projections of GPT-2 (c_attn) and Phi-3 (qkv_proj, gate_up_proj)
// (finetune/peft.hpp, namings hf_gpt2 / hf_phi3): xgrad's per-part adapters written as PEFT's
// one LoRA per fused Linear have xgrad's delta W within float rounding and read back to the same
// logits; adapter folders written as PEFT does (tests/fixtures/gen_peft_fused.py) load to
// PyTorch's float64 logits; targets are matched as PEFT matches them; xg-finetune's GPT-2 and
// Phi-3 adapters are PEFT's fused modules and reload to the trained logits.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/graph.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
#include "finetune/checkpoint.hpp"
#include "finetune/lora.hpp"
#include "finetune/peft.hpp"
#include "io/safetensors.hpp"
#include "nn/hf.hpp"
#include "tests/cli_run.hpp"
#include "tests/hf_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace peft_fused_test {

namespace fs = std::filesystem;
using test::tensors_close;


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
    auto model = nn::load_hf(test::hf_fixture_folder(c.name));
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
    auto fresh = nn::load_hf(test::hf_fixture_folder(c.name));
    const finetune::AdapterInfo info = finetune::load_adapter(*fresh, dir.string(), c.naming);
    EXPECT_TRUE(std::find(info.modules.begin(), info.modules.end(), c.fused) != info.modules.end());
    const Tensor tokens = test::ids({3, 9, 200, 17, 64, 1, 5, 250}, {1, 8});
    EXPECT_TRUE(tensors_close(test::eval_logits(*fresh, tokens), test::eval_logits(*model, tokens), 1e-5, 1e-5));
  }
}

TEST(FinetunePeftFused, PeftFoldersLoadToTorchLogits) {
  const TensorMap& fx = test::fixture("peft_fused");
  for (const auto& [name, naming] : {std::pair{"gpt2", "hf_gpt2"}, std::pair{"phi3", "hf_phi3"}}) {
    SCOPED_TRACE(name);
    auto model = nn::load_hf(test::hf_fixture_folder(name));
    finetune::load_adapter(*model, std::string(XGRAD_FIXTURE_DIR) + "/peft_fused/" + name, naming);
    const Tensor logits = test::eval_logits(*model, fx.at(std::string(name) + ".tokens"));
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
  auto model = nn::load_hf(test::hf_fixture_folder("phi3"));
  EXPECT_XG_ERROR(finetune::load_adapter(*model, dir.string(), "hf_phi3"),
                  "'model.layers.0.mlp.gate_up_proj.lora_B.weight' has shape [48,4], module "
                  "'model.layers.0.mlp.gate_up_proj' (in 32, out 96, r 4) needs [96,4]");
  EXPECT_TRUE(finetune::lora_adapters(*model).empty());
}

// The module paths `targets` selects under `naming`, each as "<xgrad path>".
std::vector<std::string> selected(const nn::DecoderLM& model, const std::string& targets, const std::string& naming) {
  return finetune::match_targets(model, targets, "test", naming);
}

TEST(FinetunePeftFused, TargetsAreMatchedAsPeftMatchesTheFusedModules) {
  auto gpt2 = nn::load_hf(test::hf_fixture_folder("gpt2"));
  const std::vector<std::string> qkv = {"layers.0.attention.w_q", "layers.0.attention.w_k", "layers.0.attention.w_v",
                                        "layers.1.attention.w_q", "layers.1.attention.w_k", "layers.1.attention.w_v"};
  // PEFT's list rule on PEFT's module paths: the name, a dotted suffix or the whole path selects
  // every part of c_attn.
  EXPECT_EQ(selected(*gpt2, "c_attn", "hf_gpt2"), qkv);
  EXPECT_EQ(selected(*gpt2, "attn.c_attn", "hf_gpt2"), qkv);
  EXPECT_EQ(selected(*gpt2, "transformer.h.1.attn.c_attn", "hf_gpt2"),
            (std::vector<std::string>{"layers.1.attention.w_q", "layers.1.attention.w_k", "layers.1.attention.w_v"}));
  // A regex matches whole PEFT module paths.
  EXPECT_EQ(selected(*gpt2, "transformer\\.h\\.0\\..*", "hf_gpt2"),
            (std::vector<std::string>{"layers.0.attention.w_q", "layers.0.attention.w_k", "layers.0.attention.w_v",
                                      "layers.0.attention.w_o", "layers.0.ffn.fc1", "layers.0.ffn.fc2"}));
  // c_proj names the attention's output and the MLP's down projection, as in PEFT; a part's own
  // name selects that part alone.
  EXPECT_EQ(selected(*gpt2, "c_proj", "hf_gpt2"), (std::vector<std::string>{"layers.0.attention.w_o", "layers.0.ffn.fc2",
                                                                            "layers.1.attention.w_o", "layers.1.ffn.fc2"}));
  EXPECT_EQ(selected(*gpt2, "mlp.c_proj", "hf_gpt2"), (std::vector<std::string>{"layers.0.ffn.fc2", "layers.1.ffn.fc2"}));
  EXPECT_EQ(selected(*gpt2, "q_proj,v", "hf_gpt2"),
            (std::vector<std::string>{"layers.0.attention.w_q", "layers.0.attention.w_v", "layers.1.attention.w_q",
                                      "layers.1.attention.w_v"}));
  // xgrad's own paths are not PEFT's names here; the error lists PEFT's modules and their parts.
  EXPECT_XG_ERROR(selected(*gpt2, "attention.w_q", "hf_gpt2"),
                  "test: target module 'attention.w_q' matches no Linear module in the model; available Linear modules: "
                  "transformer.h.0.attn.c_attn (w_q, w_k, w_v), transformer.h.0.attn.c_proj, ");
  EXPECT_XG_ERROR(selected(*gpt2, ".*qkv_proj", "hf_gpt2"), "test: target regex '.*qkv_proj' matches no Linear module path");

  auto phi3 = nn::load_hf(test::hf_fixture_folder("phi3"));
  const auto all = selected(*phi3, "qkv_proj,gate_up_proj,o_proj,down_proj", "hf_phi3");
  EXPECT_EQ(all.size(), 14u);  // 7 Linears a block
  const auto gate_up = selected(*phi3, "gate_up_proj", "hf_phi3");
  ASSERT_EQ(gate_up.size(), 4u);
  EXPECT_EQ(gate_up[0].substr(0, 15), "layers.0.ffn.W_");
  EXPECT_EQ(selected(*phi3, "model.layers.0.self_attn.qkv_proj", "hf_phi3"),
            (std::vector<std::string>{"layers.0.attention.w_q", "layers.0.attention.w_k", "layers.0.attention.w_v"}));
  EXPECT_EQ(selected(*phi3, "k_proj", "hf_phi3"), (std::vector<std::string>{"layers.0.attention.w_k", "layers.1.attention.w_k"}));
}

TEST(FinetunePeftFused, AnAdapterUnderXgradsNamesStillLoads) {
  // What xg-finetune wrote for GPT-2 and Phi-3 bases before it wrote PEFT's fused modules.
  auto model = nn::load_hf(test::hf_fixture_folder("gpt2"));
  finetune::LoRAConfig cfg;
  cfg.r = 2;
  cfg.alpha = 4;
  cfg.targets = "q,v";
  inject_random(*model, cfg);
  const fs::path dir = test::fresh_test_dir();
  finetune::save_adapter(*model, dir.string(), cfg, "", "xgrad");
  auto fresh = nn::load_hf(test::hf_fixture_folder("gpt2"));
  finetune::load_adapter(*fresh, dir.string(), "hf_gpt2");
  const Tensor tokens = test::ids({3, 9, 200, 17, 64, 1, 5, 250}, {1, 8});
  EXPECT_TRUE(tensors_close(test::eval_logits(*fresh, tokens), test::eval_logits(*model, tokens), 1e-6, 1e-6));
}

test::CliRun run_tool(const std::string& tool, const std::string& args) {
  return test::run_cli(std::string(XGRAD_TOOL_DIR) + "/" + tool, args);
}

TEST(XgFinetuneFused, Gpt2AndPhi3AdaptersArePeftsFusedModulesAndReloadToTheTrainedLogits) {
  struct Run {
    const char* name;
    const char* naming;
    const char* targets;
    std::vector<const char*> modules;  // PEFT's adapted modules of block 0
  };
  const Run runs[] = {{"gpt2", "hf_gpt2", "c_attn,mlp.c_proj", {"transformer.h.0.attn.c_attn", "transformer.h.0.mlp.c_proj"}},
                      {"phi3", "hf_phi3", "qkv_proj,gate_up_proj,o_proj",
                       {"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj", "model.layers.0.self_attn.o_proj"}}};
  const fs::path d = test::fresh_test_dir();
  {
    std::ofstream f(d / "train.jsonl");
    for (const char* w : {"apple", "river", "stone", "cloud"})
      f << nlohmann::json{{"prompt", std::string("Is ") + w + " a word?"}, {"response", "yes"}}.dump() << "\n";
  }
  for (const Run& c : runs) {
    SCOPED_TRACE(c.name);
    const fs::path base = test::byte_tokenizer_folder(d, c.name), out = d / (std::string(c.name) + "_out");
    test::CliRun r = run_tool("xg-finetune", "--base " + base.string() + " --data " + (d / "train.jsonl").string() +
                                                 " --out " + out.string() + " --lora-targets " + c.targets +
                                                 " --lora-r 2 --lora-alpha 4 --steps 4 --warmup 1 --lr 2e-2 --batch 2"
                                                 " --max-len 32 --threads 1 --merge");
    ASSERT_EQ(r.status, 0) << r.err << r.out;
    // PEFT's names: one lora_A / lora_B per fused module, in both blocks.
    std::set<std::string> keys, want;
    for (const auto& [k, t] : io::load_safetensors((out / "adapter_model.safetensors").string())) keys.insert(k);
    for (const char* m : c.modules)
      for (const char* block : {"0", "1"}) {
        std::string path = m;
        path.replace(path.find(".0."), 3, std::string(".") + block + ".");
        for (char w : {'A', 'B'}) want.insert(finetune::peft_key(path, w));
      }
    EXPECT_EQ(keys, want);
    const nlohmann::json cfg = nlohmann::json::parse(test::slurp((out / "adapter_config.json").string()));
    const std::string fused_leaf = std::string(c.modules[0]).substr(std::string(c.modules[0]).rfind('.') + 1);
    EXPECT_EQ(cfg.at("rank_pattern").at(fused_leaf), 6);  // three parts of rank 2
    EXPECT_EQ(cfg.at("alpha_pattern").at(fused_leaf), 12);

    // The adapter as the run held it (its checkpoint's A and B on xgrad's parts), the folder read
    // back by PEFT's names, and the merged folder: the same logits.
    auto trained = nn::load_hf(base.string());
    finetune::LoRAConfig lc;
    lc.r = 2;
    lc.alpha = 4;
    lc.targets = c.targets;
    Generator gen(0);
    finetune::inject_lora(*trained, lc, gen, c.naming);
    const finetune::Checkpoint ckpt = finetune::load_checkpoint((out / "checkpoint.safetensors").string());
    {
      NoGradGuard no_grad;
      for (auto& [name, p] : finetune::named_lora_parameters(*trained)) p.copy_(ckpt.model.at(name));
    }
    auto reread = nn::load_hf(base.string());
    finetune::load_adapter(*reread, out.string(), c.naming);
    auto merged = nn::load_hf((out / "merged").string());
    const Tensor tokens = test::ids({73, 115, 32, 114, 105, 118, 101, 114, 63, 10}, {1, 10});
    nn::EvalModeGuard e1(*trained), e2(*reread), e3(*merged);
    const Tensor want_logits = test::eval_logits(*trained, tokens);
    EXPECT_TRUE(tensors_close(test::eval_logits(*reread, tokens), want_logits, 1e-5, 1e-5));
    EXPECT_TRUE(tensors_close(test::eval_logits(*merged, tokens), want_logits, 1e-5, 1e-5));
    EXPECT_FALSE(tensors_close(test::eval_logits(*nn::load_hf(base.string()), tokens), want_logits, 1e-4, 1e-4));

    // xg-generate with the adapter and on the merged folder: the same greedy ids.
    const std::string flags = " --prompt 'Is lemon a word?' --temperature 0 --max-new-tokens 6 --ids";
    test::CliRun g = run_tool("xg-generate", "--base " + base.string() + " --adapter " + out.string() + flags);
    ASSERT_EQ(g.status, 0) << g.err;
    test::CliRun m = run_tool("xg-generate", "--base " + (out / "merged").string() + flags);
    ASSERT_EQ(m.status, 0) << m.err;
    EXPECT_EQ(g.out, m.out);
  }
}

}  // namespace peft_fused_test
}  // namespace xg

// xg-finetune --full, run as a user would on the tiny GPT-2 and Phi-3 folders of
// tests/fixtures/hf (with the byte-level tokenizer of tests/fixtures/gguf/byte256): SFT lowers the
// held-out loss and its <out>/model folder reloads to the trained model's logits, a killed run
// resumes to the same folder bit for bit, gradient checkpointing changes no bit, early stopping
// writes the best model, DPO starts at ln 2 against its frozen reference copy (GRPO loads one for
// its KL term only), a bf16 folder trains in float32, the memory check counts 16 bytes a trained
// parameter, and what cannot train is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "autograd/graph.hpp"
#include "autograd/memory.hpp"
#include "finetune/checkpoint.hpp"
#include "io/read_file.hpp"
#include "io/safetensors.hpp"
#include "nn/hf.hpp"
#include "tests/cli_run.hpp"
#include "tests/hf_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace full_finetune_test {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CliRun;

CliRun run(const std::string& tool, const std::string& args) {
  return test::run_cli(std::string(XGRAD_TOOL_DIR) + "/" + tool, args);
}

// A failed run: exit status `status` and one line of stderr that says `text`.
void expect_one_line_error(const CliRun& r, int status, const std::string& text) {
  EXPECT_EQ(r.status, status) << r.out;
  EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
  EXPECT_EQ(test::count_lines(r.err), 1) << r.err;
}

const char* kTrainWords[] = {"apple", "river", "stone", "cloud", "glass", "tiger", "bread", "flute", "plant", "chair"};
const char* kHeldOutWords[] = {"lemon", "ocean", "brick", "piano"};

// SFT rows "Is <w> a word?" answered "yes".
fs::path write_rows(const fs::path& path, const std::vector<const char*>& words) {
  std::ofstream f(path);
  for (const char* w : words) f << json{{"prompt", std::string("Is ") + w + " a word?"}, {"response", "yes"}}.dump() << "\n";
  return path;
}

// DPO pairs over the same words: chosen "yes", rejected "no".
fs::path write_pairs(const fs::path& path, const std::vector<const char*>& words) {
  std::ofstream f(path);
  for (const char* w : words)
    f << json{{"prompt", std::string("Is ") + w + " a word?"}, {"chosen", "yes"}, {"rejected", "no"}}.dump() << "\n";
  return path;
}

// The `key` of each record of `kind` ("eval", "train") in log.jsonl, in order.
std::vector<double> log_values(const fs::path& log, const std::string& kind, const std::string& key) {
  std::vector<double> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    const json j = json::parse(line);
    if (j["kind"] == kind) out.push_back(j[key].get<double>());
  }
  return out;
}

// The trained model as the run held it in memory: the base with the checkpoint's tensors (the
// run's last checkpoint is written after its last step).
std::shared_ptr<nn::DecoderLM> trained_model(const fs::path& base, const fs::path& out) {
  auto model = nn::load_hf(base.string());
  const finetune::Checkpoint ckpt = finetune::load_checkpoint((out / "checkpoint.safetensors").string());
  NoGradGuard no_grad;
  int64_t loaded = 0;
  for (auto& [name, p] : model->named_parameters()) {
    auto it = ckpt.model.find(name);
    if (it == ckpt.model.end()) continue;
    p.copy_(it->second);
    ++loaded;
  }
  EXPECT_EQ(loaded, static_cast<int64_t>(model->named_parameters().size())) << "every parameter is in the checkpoint";
  return model;
}

Tensor logits_of(const nn::DecoderLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  return model(tokens);
}

int64_t parameter_count(const fs::path& folder) { return nn::load_hf(folder.string())->num_parameters(); }

TEST(XgFinetuneFull, SftLowersHeldOutLossAndItsFolderReloadsToTheTrainedModel) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "gpt2"), out = d / "out", model_dir = out / "model";
  const fs::path train = write_rows(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  const fs::path heldout = write_rows(d / "heldout.jsonl", {std::begin(kHeldOutWords), std::end(kHeldOutWords)});
  CliRun r = run("xg-finetune", "--full --base " + base.string() + " --data " + train.string() + " --eval-data " +
                                    heldout.string() + " --out " + out.string() +
                                    " --steps 30 --warmup 2 --lr 2e-3 --batch 4 --max-len 32 --eval-every 10 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const int64_t P = parameter_count(base);
  EXPECT_NE(r.out.find(str_cat("full finetune: all ", P, " parameters train; weights, gradients and AdamW's two moments (float32) ",
                               byte_size(16.0 * static_cast<double>(P)))),
            std::string::npos)
      << r.out;
  const std::vector<double> loss = log_values(out / "log.jsonl", "eval", "loss");
  ASSERT_EQ(loss.size(), 4u);  // steps 0, 10, 20, 30
  EXPECT_LT(loss.back(), 0.5 * loss.front()) << loss.front() << " -> " << loss.back();
  EXPECT_FALSE(fs::exists(out / "adapter_model.safetensors"));

  // An HF folder of the base's architecture with its tokenizer files, float32, under the names
  // transformers' GPT2LMHeadModel writes (the fixture's are the Hub's prefix-less ones, which it
  // also reads; the causal-mask buffers h.N.attn.bias and masked_bias are not weights).
  EXPECT_EQ(io::ModelSource::open(model_dir.string()).format, io::ModelFormat::HuggingFace);
  EXPECT_EQ(json::parse(test::slurp((model_dir / "config.json").string()))["architectures"], json::array({"GPT2LMHeadModel"}));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_EQ(test::slurp((model_dir / f).string()), test::slurp((base / f).string())) << f;
  std::set<std::string> in_names, out_names;
  for (const auto& [k, t] : io::load_safetensors((base / "model.safetensors").string()))
    if (!std::regex_search(k, std::regex("\\.attn\\.(masked_)?bias$"))) in_names.insert(k.rfind("lm_head", 0) == 0 ? k : "transformer." + k);
  for (const auto& [k, t] : io::load_safetensors((model_dir / "model.safetensors").string())) {
    out_names.insert(k);
    EXPECT_EQ(t.dtype(), kFloat32) << k;
  }
  EXPECT_EQ(out_names, in_names);

  // The folder reloads to the logits of the model the run trained, and they moved.
  const auto reloaded = nn::load_hf(model_dir.string());
  const auto trained = trained_model(base, out);
  const Tensor tokens = test::ids({73, 115, 32, 108, 101, 109, 111, 110, 32, 97}, {1, 10});
  nn::EvalModeGuard e1(*reloaded), e2(*trained);
  const Tensor want = logits_of(*trained, tokens);
  EXPECT_TRUE(test::tensors_close(logits_of(*reloaded, tokens), want, 0, 0));
  EXPECT_FALSE(test::tensors_close(logits_of(*nn::load_hf(base.string()), tokens), want, 1e-3, 1e-3));

  // xg-generate takes it as a base and answers the held-out prompt as trained.
  CliRun g = run("xg-generate", "--base " + model_dir.string() + " --prompt 'Is piano a word?' --temperature 0 --max-new-tokens 4");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(g.out.substr(0, 3), "yes") << g.out;
}

TEST(XgFinetuneFull, AKilledRunResumesToBitwiseTheSameModel) {
  // GPT-2's dropout (resid_pdrop 0.1) draws from the generators the checkpoint restores; --bf16's
  // products are cut by their shapes alone, so they resume bitwise too.
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "gpt2");
  const fs::path train = write_rows(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  for (const std::string extra : {"", " --bf16"}) {
    SCOPED_TRACE(extra);
    const std::string flags = "--full --base " + base.string() + " --data " + train.string() +
                              " --steps 60 --warmup 2 --batch 4 --max-len 32 --checkpoint-every 4 --seed 9 --threads 1" + extra;
    const fs::path straight = d / ("straight" + extra.substr(std::min<std::size_t>(extra.size(), 3)));
    const fs::path out = d / ("killed" + extra.substr(std::min<std::size_t>(extra.size(), 3)));
    CliRun full = run("xg-finetune", flags + " --out " + straight.string());
    ASSERT_EQ(full.status, 0) << full.err;
    ASSERT_TRUE(test::kill_when_file_appears(std::string(XGRAD_TOOL_DIR) + "/xg-finetune " + flags + " --out " +
                                                 out.string() + " >/dev/null 2>&1",
                                             (out / "checkpoint.safetensors").string()))
        << "the run finished before a checkpoint appeared, or none did";
    EXPECT_FALSE(fs::exists(out / "model"));
    CliRun resumed = run("xg-finetune", flags + " --out " + out.string() + " --resume");
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_NE(resumed.out.find("resume step"), std::string::npos) << resumed.out;
    const std::string want = test::slurp((straight / "model" / "model.safetensors").string());
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(test::slurp((out / "model" / "model.safetensors").string()), want);
  }
  // A LoRA run does not resume from it.
  CliRun lora = run("xg-finetune", "--base " + base.string() + " --data " + train.string() +
                                       " --steps 60 --warmup 2 --batch 4 --max-len 32 --checkpoint-every 4 --seed 9 "
                                       "--threads 1 --out " + (d / "killed").string() + " --resume");
  EXPECT_EQ(lora.status, 2);
  EXPECT_NE(lora.err.find("--resume: --full was true in " + (d / "killed" / "args.json").string() + ", now false"),
            std::string::npos)
      << lora.err;
}

TEST(XgFinetuneFull, GradientCheckpointingAndEarlyStoppingWorkOnEveryWeight) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "gpt2");
  const fs::path train = write_rows(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  const fs::path heldout = write_rows(d / "heldout.jsonl", {std::begin(kHeldOutWords), std::end(kHeldOutWords)});
  const std::string flags = "--full --base " + base.string() + " --data " + train.string() +
                            " --steps 12 --warmup 2 --batch 4 --max-len 32 --seed 5 --threads 1 --out ";
  // Recomputed blocks replay dropout's masks: the same model, bit for bit.
  CliRun plain = run("xg-finetune", flags + (d / "plain").string());
  ASSERT_EQ(plain.status, 0) << plain.err;
  CliRun ckpt = run("xg-finetune", flags + (d / "ckpt").string() + " --gradient-checkpointing");
  ASSERT_EQ(ckpt.status, 0) << ckpt.err;
  EXPECT_EQ(test::slurp((d / "ckpt" / "model" / "model.safetensors").string()),
            test::slurp((d / "plain" / "model" / "model.safetensors").string()));
  // A learning rate that overshoots after the first evaluations: the model written is the best
  // one evaluated, the whole of it, not the last.
  CliRun es = run("xg-finetune", flags + (d / "es").string() +
                                     " --eval-data " + heldout.string() + " --eval-every 2 --lr 0.3 --early-stopping-patience 2");
  ASSERT_EQ(es.status, 0) << es.err << es.out;
  EXPECT_NE(es.out.find("the model written is the best evaluated: step"), std::string::npos) << es.out;
  const TensorMap best = io::load_safetensors((d / "es" / "best.safetensors").string());
  auto written = nn::load_hf((d / "es" / "model").string());
  int64_t compared = 0;
  for (const auto& [name, p] : written->named_parameters()) {
    ASSERT_TRUE(best.count(name)) << name;
    EXPECT_TRUE(test::tensors_close(p, best.at(name), 0, 0)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int64_t>(best.size()));
  const auto trained = trained_model(base, d / "es");  // the last step's
  const Tensor tokens = test::ids({73, 115, 32, 108, 101, 109, 111, 110}, {1, 8});
  nn::EvalModeGuard e1(*written), e2(*trained);
  EXPECT_FALSE(test::tensors_close(logits_of(*written, tokens), logits_of(*trained, tokens), 1e-4, 1e-4));
}

TEST(XgFinetuneFull, DpoStartsAtLn2AgainstItsReferenceCopyAndRaisesThePreference) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "gpt2"), out = d / "out";
  const fs::path train = write_pairs(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  const fs::path heldout = write_pairs(d / "heldout.jsonl", {std::begin(kHeldOutWords), std::end(kHeldOutWords)});
  CliRun r = run("xg-finetune", "--full --objective dpo --base " + base.string() + " --data " + train.string() +
                                    " --eval-data " + heldout.string() + " --out " + out.string() +
                                    " --steps 20 --warmup 2 --lr 1e-3 --batch 4 --max-len 32 --eval-every 10 --threads 1");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const int64_t P = parameter_count(base);
  EXPECT_NE(r.out.find(str_cat("the reference copy ", byte_size(4.0 * static_cast<double>(P)))), std::string::npos) << r.out;
  // At step 0 the policy is the reference: every margin is 0.
  const std::vector<double> loss = log_values(out / "log.jsonl", "eval", "loss");
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_NEAR(loss.front(), std::log(2.0), 1e-6);
  EXPECT_LT(loss.back(), loss.front() - 0.1) << loss.back();
  EXPECT_GT(log_values(out / "log.jsonl", "eval", "reward_margin").back(), 0.0);
  EXPECT_TRUE(fs::exists(out / "model" / "model.safetensors"));
}

TEST(XgFinetuneFull, GrpoLoadsAReferenceCopyOnlyForItsKlTerm) {
  // Phi-3's fixture has no dropout, so the policy's first step computes what its reference does.
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "phi3");
  {
    std::ofstream f(d / "say.jsonl");
    for (const char* w : kTrainWords) f << json{{"prompt", std::string("Say ") + w + "."}, {"answers", {w}}}.dump() << "\n";
  }
  // A reward that differs between completions (the length of the row the program reads), so
  // the policy moves away from the reference and the KL to it grows.
  std::ofstream(d / "reward.sh") << "while read -r line; do echo ${#line}; done\n";
  const std::string flags = "--full --objective grpo --base " + base.string() + " --data " + (d / "say.jsonl").string() +
                            " --reward-cmd 'sh " + (d / "reward.sh").string() +
                            "' --steps 3 --warmup 0 --lr 1e-2 --grad-accum 2 --group-size 4 --max-new-tokens 4 --threads 1 "
                            "--log-every 1";
  const std::string copy = str_cat("the reference copy ", byte_size(4.0 * static_cast<double>(parameter_count(base))));
  CliRun kl = run("xg-finetune", flags + " --out " + (d / "kl").string());
  ASSERT_EQ(kl.status, 0) << kl.err << kl.out;
  EXPECT_NE(kl.out.find(copy), std::string::npos) << kl.out;
  EXPECT_TRUE(fs::exists(d / "kl" / "model" / "model.safetensors"));
  const std::vector<double> kls = log_values(d / "kl" / "log.jsonl", "train", "kl");
  ASSERT_EQ(kls.size(), 3u);
  EXPECT_EQ(kls.front(), 0.0);  // step 1 samples from the model as loaded: the reference
  EXPECT_GT(kls.back(), 0.0);
  CliRun no_kl = run("xg-finetune", flags + " --beta 0 --out " + (d / "no_kl").string());
  ASSERT_EQ(no_kl.status, 0) << no_kl.err << no_kl.out;
  EXPECT_EQ(no_kl.out.find("the reference copy"), std::string::npos) << no_kl.out;
  EXPECT_TRUE(fs::exists(d / "no_kl" / "model" / "model.safetensors"));
}

TEST(XgFinetuneFull, ABf16FolderTrainsAndIsWrittenInFloat32) {
  // Phi-3's fixture stores BF16 (torch_dtype bfloat16).
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "phi3"), out = d / "out";
  const fs::path train = write_rows(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  CliRun r = run("xg-finetune", "--full --base " + base.string() + " --data " + train.string() + " --out " + out.string() +
                                    " --steps 3 --warmup 1 --batch 2 --max-len 32 --threads 1 --bf16");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find(base.string() + " stores BF16: the weights train in float32"), std::string::npos) << r.out;
  std::set<std::string> in_names, out_names;
  for (const auto& [k, t] : io::load_safetensors((base / "model.safetensors").string())) in_names.insert(k);
  for (const auto& [k, t] : io::load_safetensors((out / "model" / "model.safetensors").string())) {
    out_names.insert(k);
    EXPECT_EQ(t.dtype(), kFloat32) << k;
  }
  EXPECT_EQ(out_names, in_names);  // Phi-3's names as the folder has them (qkv_proj, gate_up_proj)
  EXPECT_EQ(json::parse(test::slurp((out / "model" / "config.json").string()))["torch_dtype"], "float32");
}

TEST(XgFinetuneFull, TheMemoryCheckCountsGradientsAndAdamWMomentsOfEveryWeight) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "gpt2");
  const fs::path train = write_rows(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  const double P = static_cast<double>(parameter_count(base));
  // A machine with less than 16 bytes a parameter: LoRA fits, --full does not.
  const std::string limit = std::to_string(static_cast<int64_t>(15.0 * P));
  const std::string exe = std::string(XGRAD_TOOL_DIR) + "/xg-finetune";
  const std::string args = " --base " + base.string() + " --data " + train.string() + " --steps 1 --warmup 0 --batch 1 --max-len 8";
  CliRun lora = test::run_cli("/usr/bin/env", "XGRAD_MEMORY_LIMIT=" + limit + " " + exe + args + " --out " + (d / "lora").string());
  EXPECT_EQ(lora.status, 0) << lora.err;
  CliRun full = test::run_cli("/usr/bin/env", "XGRAD_MEMORY_LIMIT=" + limit + " " + exe + args + " --full --out " + (d / "full").string());
  expect_one_line_error(full, 2, "--full (float32 weights, their gradients and AdamW's two moments) with --batch 1 rows of --max-len 8 needs about");
  EXPECT_FALSE(fs::exists(d / "full"));
  // DPO also holds the reference copy: 20 bytes a parameter.
  const fs::path pairs = write_pairs(d / "pairs.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  const std::string dpo_limit = std::to_string(static_cast<int64_t>(19.0 * P));
  CliRun dpo = test::run_cli("/usr/bin/env", "XGRAD_MEMORY_LIMIT=" + dpo_limit + " " + exe + " --full --objective dpo --base " +
                                                 base.string() + " --data " + pairs.string() +
                                                 " --steps 1 --warmup 0 --batch 1 --max-len 8 --out " + (d / "dpo").string());
  expect_one_line_error(dpo, 2, "and a frozen copy of the base as the reference) with --batch 1 rows of --max-len 8 needs about");
  EXPECT_FALSE(fs::exists(d / "dpo"));
}

TEST(XgFinetuneFull, WhatCannotTrainWholeIsRefusedByName) {
  const fs::path d = test::fresh_test_dir();
  const fs::path base = test::byte_tokenizer_folder(d, "gpt2");
  const fs::path train = write_rows(d / "train.jsonl", {std::begin(kTrainWords), std::end(kTrainWords)});
  const std::string out = (d / "out").string();
  const std::string common = "--full --base " + base.string() + " --data " + train.string() + " --out " + out;
  expect_one_line_error(run("xg-finetune", common + " --base-dtype q8_0"), 2,
                        "--full trains every weight in float32: --base-dtype q8_0 stores frozen 8-bit blocks, which cannot train");
  expect_one_line_error(run("xg-finetune", common + " --base-dtype bf16"), 2,
                        "--full trains every weight in float32: --base-dtype bf16 would store them in bf16");
  expect_one_line_error(run("xg-finetune", common + " --merge"), 2,
                        "--merge is for LoRA adapters: --full writes the whole model into <out>/model");
  expect_one_line_error(run("xg-finetune", common + " --lora-r 4"), 2, "--lora-r is for LoRA adapters, not --full");
  expect_one_line_error(run("xg-finetune", common + " --lora-targets c_attn"), 2, "--lora-targets is for LoRA adapters, not --full");
  const std::string gguf = std::string(XGRAD_FIXTURE_DIR) + "/gguf/trained_llamacpp_f32.gguf";
  expect_one_line_error(run("xg-finetune", "--full --base " + gguf + " --data " + train.string() + " --out " + out), 1,
                        "xg-finetune: --full: " + gguf + " is a GGUF file; --full trains a Hugging Face or xgrad folder");
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace full_finetune_test
}  // namespace xg

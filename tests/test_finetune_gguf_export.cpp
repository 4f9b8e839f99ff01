// GGUF adapters and xg-export (finetune/gguf_export.hpp, tools/xg_export.cpp): the LoRA
// adapter xgrad writes is the file llama.cpp applied (tests/fixtures/gguf/expected.json), and
// xgrad's logits with the adapter equal llama.cpp's with it.
#include "finetune/gguf_export.hpp"

#include "finetune/base_model.hpp"
#include "finetune/lora.hpp"
#include "finetune/peft.hpp"
#include "tests/gguf_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace {

namespace fs = std::filesystem;

// LoRA r 2 on `targets` of the base's model.
void inject_r2(finetune::BaseModel& base, const char* targets) {
  finetune::LoRAConfig lora;
  lora.r = 2;
  lora.targets = targets;
  Generator gen(7);
  finetune::inject_lora(*base.model, lora, gen, base.naming);
}

TEST(FinetuneGgufExport, AdapterIsTheFileLlamaCppAppliedAndMatchesItsLogprobs) {
  const fs::path dir = test::fresh_test_dir();
  const nlohmann::json& c = test::gguf_case("adapter");
  const fs::path folder = test::gguf_source_folder("llama3", dir);
  finetune::BaseModel base = finetune::load_base(folder.string(), "test");
  const std::vector<int64_t> ids = c.at("ids").get<std::vector<int64_t>>();
  const std::vector<double> plain = test::gguf_logprobs(*base.model, ids, c.at("window"), 256);
  finetune::load_adapter(*base.model, test::gguf_fixture("adapter").string(), base.naming);
  const fs::path gguf = dir / "adapter.gguf";
  finetune::save_gguf_adapter(*base.model, gguf.string(), io::GgmlType::F32, "llama3 LoRA adapter");
  EXPECT_EQ(test::gguf_fnv1a64(gguf), c.at("lora_fnv1a64").get<std::string>()) << "not the adapter llama.cpp applied";
  io::GgufReader f(gguf.string());
  EXPECT_EQ(f.get_string("general.type"), "adapter");
  EXPECT_EQ(f.get_string("adapter.type"), "lora");
  EXPECT_EQ(f.get_float("adapter.lora.alpha"), 8.0);
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight.lora_a").shape, (Shape{4, 32}));   // A [r, in]: ne {in, r}
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight.lora_b").shape, (Shape{32, 4}));   // B [out, r]: ne {r, out}

  const std::vector<double> want = c.at("logprobs").get<std::vector<double>>();
  const std::vector<double> got = test::gguf_logprobs(*base.model, ids, c.at("window"), 256);
  const test::GgufWorst w = test::gguf_worst(got, want);
  EXPECT_LE(w.diff, 1e-4) << "position " << w.at << ": xgrad " << got[w.at] << ", llama.cpp " << want[w.at];
  std::printf("  adapter vs llama.cpp: max |d log p| = %.2e; the adapter moves log p by up to %.2f\n", w.diff,
              test::gguf_worst(plain, want).diff);
  EXPECT_GT(test::gguf_worst(plain, want).diff, 0.1) << "the adapter must change the logits for this check to bite";
  EXPECT_EQ(test::gguf_greedy(*base.model, c.at("prompt").get<std::vector<int64_t>>(), 32),
            c.at("greedy").get<std::vector<int64_t>>());
}

TEST(FinetuneGgufExport, XgExportWritesWhatTheLibraryWrites) {
  const fs::path dir = test::fresh_test_dir();
  const std::string exe = std::string(XGRAD_TOOL_DIR) + "/xg-export";
  const fs::path trained = test::gguf_fixture("trained");
  test::CliRun r = test::run_cli(exe, "--base " + trained.string() + " --to gguf --out " + (dir / "t.gguf").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(test::gguf_fnv1a64(dir / "t.gguf"), test::gguf_case("trained").at("model_fnv1a64").get<std::string>());
  // F16 and Q8_0 weights; norms stay F32.
  r = test::run_cli(exe, "--base " + trained.string() + " --to gguf --dtype q8_0 --out " + (dir / "q.gguf").string());
  ASSERT_EQ(r.status, 0) << r.err;
  io::GgufReader q((dir / "q.gguf").string());
  EXPECT_EQ(q.tensor("blk.0.attn_q.weight").type, io::GgmlType::Q8_0);
  EXPECT_EQ(q.tensor("blk.0.attn_norm.weight").type, io::GgmlType::F32);
  EXPECT_EQ(q.get_int("general.file_type"), 7);
  // Q4_0: the file llama.cpp evaluated (gen_gguf.sh), LLAMA_FTYPE_MOSTLY_Q4_0; xg-generate reads its
  // blocks as stored (--dtype auto) and continues a prompt as it does from their float32 values.
  const std::string q4 = (dir / "q4.gguf").string();
  r = test::run_cli(exe, "--base " + trained.string() + " --to gguf --dtype q4_0 --out " + q4);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(test::gguf_fnv1a64(q4), test::gguf_case("trained_q4_0").at("model_fnv1a64").get<std::string>());
  EXPECT_EQ(io::GgufReader(q4).get_int("general.file_type"), 2);
  const std::string gen = std::string(XGRAD_TOOL_DIR) + "/xg-generate";
  const std::string flags = " --format raw --prompt 'the ' --temperature 0 --max-new-tokens 24 --ids --threads 1";
  const test::CliRun as_blocks = test::run_cli(gen, "--base " + q4 + flags + " --dtype auto");
  const test::CliRun as_f32 = test::run_cli(gen, "--base " + q4 + flags + " --dtype f32");
  ASSERT_EQ(as_blocks.status, 0) << as_blocks.err;
  ASSERT_EQ(as_f32.status, 0) << as_f32.err;
  EXPECT_FALSE(as_blocks.out.empty());
  EXPECT_EQ(as_blocks.out, as_f32.out);
  // The GGUF as a base again, and to an HF folder.
  r = test::run_cli(exe, "--base " + (dir / "t.gguf").string() + " --name trained --to gguf --out " + (dir / "t2.gguf").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(test::gguf_fnv1a64(dir / "t2.gguf"), test::gguf_fnv1a64(dir / "t.gguf")) << "GGUF -> GGUF is the identity";
  r = test::run_cli(exe, "--base " + trained.string() + " --to hf --out " + (dir / "hf").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir / "hf" / "model.safetensors"));
  // Usage errors.
  r = test::run_cli(exe, "--base " + trained.string() + " --to onnx --out x");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--to: expected one of gguf, hf, got 'onnx'"), std::string::npos) << r.err;
  r = test::run_cli(exe, "--base " + (dir / "t.gguf").string() + " --to hf --out " + (dir / "x").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--to hf from a GGUF base is not written"), std::string::npos) << r.err;
}

// A GGUF adapter on a part of a fused projection (gpt2's attn_qkv) has no tensor to apply to:
// llama.cpp refuses such a file ("LoRA tensor 'blk.0.attn_k.weight' does not exist in base
// model"), so the export refuses it by name; adapters on the unfused projections are written.
TEST(FinetuneGgufExport, AdapterOnAFusedProjectionIsRefusedByName) {
  const fs::path dir = test::fresh_test_dir();
  const fs::path fx = XGRAD_FIXTURE_DIR, folder = dir / "gpt2", gguf = dir / "gpt2.gguf";
  fs::create_directories(folder);
  for (const fs::path& f : {fx / "hf" / "gpt2" / "config.json", fx / "hf" / "gpt2" / "model.safetensors",
                           fx / "gguf" / "byte256" / "tokenizer.json", fx / "gguf" / "byte256" / "tokenizer_config.json"})
    fs::copy_file(f, folder / f.filename());
  finetune::BaseModel src = finetune::load_base(folder.string(), "test");
  finetune::save_gguf_model(*src.model, src.source, gguf.string());
  for (const char* targets : {"q,v", "o,down"}) {
    SCOPED_TRACE(targets);
    finetune::BaseModel base = finetune::load_base(gguf.string(), "test");
    inject_r2(base, targets);
    const std::string out = (dir / "lora.gguf").string();
    if (std::string(targets) == "q,v") {
      EXPECT_XG_ERROR(finetune::save_gguf_adapter(*base.model, out, io::GgmlType::F32, "a"),
                      "GGUF adapter export: 'layers.0.attention.w_q' is a part of llama.cpp's fused "
                      "blk.0.attn_qkv.weight in gpt2; adapters on fused projections are not written");
      EXPECT_FALSE(fs::exists(out));
    } else {
      finetune::save_gguf_adapter(*base.model, out, io::GgmlType::F32, "a");
      io::GgufReader f(out);
      EXPECT_TRUE(f.has_tensor("blk.1.attn_output.weight.lora_a") && f.has_tensor("blk.1.ffn_down.weight.lora_b"));
    }
  }
}

// A Phi-3 folder with a sliding window is written as llama.cpp's phi3 (its model alone looks like
// a windowed Llama), and so is its adapter: one on a part of phi3's fused attn_qkv is refused by
// name as gpt2's is, and adapters on o_proj and down_proj are written under phi3's tensor names.
// (The adapter export used to see the model alone and refused every adapter of such a base with
// an error about Llama and sliding windows.)
TEST(FinetuneGgufExport, AWindowedPhi3AdapterIsWrittenForLlamaCppsPhi3) {
  const fs::path dir = test::fresh_test_dir();
  const fs::path fx = XGRAD_FIXTURE_DIR, folder = dir / "phi3";
  fs::create_directories(folder);
  for (const fs::path& f : {fx / "hf" / "phi3" / "config.json", fx / "hf" / "phi3" / "model.safetensors",
                           fx / "gguf" / "byte256" / "tokenizer.json", fx / "gguf" / "byte256" / "tokenizer_config.json"})
    fs::copy_file(f, folder / f.filename());
  for (const char* targets : {"q,v", "o,down"}) {
    SCOPED_TRACE(targets);
    finetune::BaseModel base = finetune::load_base(folder.string(), "test");
    ASSERT_EQ(finetune::gguf_export_architecture(*base.model, base.source), "phi3");
    inject_r2(base, targets);
    const std::string out = (dir / "lora.gguf").string();
    const std::string arch = finetune::gguf_export_architecture(*base.model, base.source);
    if (std::string(targets) == "q,v") {
      EXPECT_XG_ERROR(finetune::save_gguf_adapter(*base.model, out, io::GgmlType::F32, "a", arch),
                      "GGUF adapter export: 'layers.0.attention.w_q' is a part of llama.cpp's fused "
                      "blk.0.attn_qkv.weight in phi3; adapters on fused projections are not written");
      EXPECT_FALSE(fs::exists(out));
    } else {
      finetune::save_gguf_adapter(*base.model, out, io::GgmlType::F32, "a", arch);
      io::GgufReader f(out);
      EXPECT_EQ(f.get_string("general.architecture"), "phi3");
      EXPECT_TRUE(f.has_tensor("blk.1.attn_output.weight.lora_a") && f.has_tensor("blk.1.ffn_down.weight.lora_b"));
    }
  }
}

// Finetuning a GGUF: xg-finetune --base model.gguf trains an adapter (xgrad's module names) and
// merges into a GGUF; xg-generate runs the base with the adapter and the merged file alike.
TEST(FinetuneGgufExport, FinetuneAndGenerateFromAGgufBase) {
  const fs::path dir = test::fresh_test_dir();
  const std::string tools = XGRAD_TOOL_DIR;
  const std::string base = (dir / "base.gguf").string();
  test::CliRun r = test::run_cli(tools + "/xg-export", "--base " + test::gguf_fixture("trained").string() + " --to gguf --out " + base);
  ASSERT_EQ(r.status, 0) << r.err;
  {
    std::ofstream data(dir / "sft.jsonl");
    for (const char* w : {"apple", "river", "stone", "cloud"}) data << "{\"prompt\": \"Spell " << w << ": \", \"response\": \"" << w << "\"}\n";
  }
  r = test::run_cli(tools + "/xg-finetune", "--base " + base + " --data " + (dir / "sft.jsonl").string() + " --out " +
                                                (dir / "ft").string() + " --steps 5 --warmup 1 --lr 1e-2 --lora-r 2 --merge --threads 1");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(fs::exists(dir / "ft" / "merged.gguf")) << r.out;
  const std::string gen = " --format raw --prompt 'Spell apple: ' --temperature 0 --max-new-tokens 12 --ids --threads 1";
  const test::CliRun with_adapter = test::run_cli(tools + "/xg-generate", "--base " + base + " --adapter " + (dir / "ft").string() + gen);
  const test::CliRun merged = test::run_cli(tools + "/xg-generate", "--base " + (dir / "ft" / "merged.gguf").string() + gen);
  ASSERT_EQ(with_adapter.status, 0) << with_adapter.err;
  ASSERT_EQ(merged.status, 0) << merged.err;
  EXPECT_FALSE(with_adapter.out.empty());
  EXPECT_EQ(with_adapter.out, merged.out);
  // The adapter as a GGUF adapter for llama.cpp, from the GGUF base.
  r = test::run_cli(tools + "/xg-export", "--base " + base + " --adapter " + (dir / "ft").string() + " --to gguf --out " +
                                              (dir / "a.gguf").string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(io::GgufReader((dir / "a.gguf").string()).get_string("adapter.type"), "lora");
}

}  // namespace
}  // namespace xg

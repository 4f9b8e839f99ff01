// Tests for finetune/peft.cpp: adapter files with PEFT's names, shapes and config keys (also
// under a Hugging Face model's names), exact save -> load round trips, and errors (wrong base
// model, bad config, failed saves) that name the file and the key and leave nothing behind.
#include "finetune/peft.hpp"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/graph.hpp"
#include "nn/decoder.hpp"
#include "nn/hf.hpp"
#include "tests/lora_test_util.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::finetune;
using xg::test::bitwise_equal;
using xg::test::lora_cfg;
using xg::test::randomize_b;
using xg::test::tiny_llama;
using xg::test::tiny_tokens;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A fresh folder per test (CTest runs tests in parallel), removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / str_cat("xg_peft_", info->name(), "_", ::getpid());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& s) const { return (path / s).string(); }
};

json read_json(const std::string& file) {
  std::ifstream in(file);
  return json::parse(in);
}

void write_text(const std::string& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
}

// Writes `good` to `file` with `key` set to `value` (a discarded value: key left out).
void write_config_with(const std::string& file, const json& good, const std::string& key, const json& value) {
  json c = good;
  if (value.is_discarded())
    c.erase(key);
  else
    c[key] = value;
  write_text(file, c.dump(2));
}

// A model with adapters on q, v (2 layers), B randomized, saved to <tmp>/adapter.
struct Saved {
  TempDir tmp;
  nn::DecoderLM model{tiny_llama()};
  std::string dir;
  Saved(const LoRAConfig& c = lora_cfg(2, 4, "q,v")) {
    Generator gen(1);
    inject_lora(model, c, gen);
    randomize_b(model, 2);
    dir = tmp / "adapter";
    save_adapter(model, dir, c, "xg/tiny-llama");
  }
};

}  // namespace

TEST(FinetunePeft, FileHasPeftNamesShapesAndConfig) {
  Saved s;
  EXPECT_TRUE(fs::exists(s.dir + "/adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(s.dir + "/adapter_config.json"));
  EXPECT_EQ(std::distance(fs::directory_iterator(s.dir), fs::directory_iterator()), 2);  // no staged files left
  std::map<std::string, std::string> meta;
  TensorMap w = io::load_safetensors(s.dir + "/adapter_model.safetensors", &meta);
  EXPECT_EQ(meta["format"], "pt");
  std::map<std::string, Shape> shapes;
  for (const auto& [k, t] : w) shapes[k] = t.shape();
  // d_model 8, GQA with 1 kv head of 4: w_q [8, 8], w_v [4, 8].
  const std::map<std::string, Shape> want = {
      {"base_model.model.layers.0.attention.w_q.lora_A.weight", {2, 8}},
      {"base_model.model.layers.0.attention.w_q.lora_B.weight", {8, 2}},
      {"base_model.model.layers.0.attention.w_v.lora_A.weight", {2, 8}},
      {"base_model.model.layers.0.attention.w_v.lora_B.weight", {4, 2}},
      {"base_model.model.layers.1.attention.w_q.lora_A.weight", {2, 8}},
      {"base_model.model.layers.1.attention.w_q.lora_B.weight", {8, 2}},
      {"base_model.model.layers.1.attention.w_v.lora_A.weight", {2, 8}},
      {"base_model.model.layers.1.attention.w_v.lora_B.weight", {4, 2}},
  };
  EXPECT_EQ(shapes, want);
  for (const auto& [path, a] : lora_adapters(s.model)) {
    EXPECT_TRUE(bitwise_equal(w.at(peft_key(path, 'A')), a->A())) << path;
    EXPECT_TRUE(bitwise_equal(w.at(peft_key(path, 'B')), a->B())) << path;
  }

  json c = read_json(s.dir + "/adapter_config.json");
  EXPECT_EQ(c["peft_type"], "LORA");
  EXPECT_EQ(c["task_type"], "CAUSAL_LM");
  EXPECT_EQ(c["r"], 2);
  EXPECT_TRUE(c["r"].is_number_integer());
  EXPECT_EQ(c["lora_alpha"], 4);
  EXPECT_EQ(c["lora_dropout"], 0.0);
  EXPECT_EQ(c["target_modules"], json({"w_q", "w_v"}));  // the model's names, so PEFT's matching finds them
  EXPECT_EQ(c["bias"], "none");
  EXPECT_EQ(c["use_rslora"], false);
  EXPECT_EQ(c["fan_in_fan_out"], false);
  EXPECT_EQ(c["base_model_name_or_path"], "xg/tiny-llama");
  EXPECT_EQ(c["inference_mode"], true);
  // Sorted keys, indent 2, as PEFT's json.dumps(sort_keys=True, indent=2).
  std::ifstream in(s.dir + "/adapter_config.json");
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_EQ(first, "{");
  EXPECT_EQ(second, "  \"alpha_pattern\": {},");
}

TEST(FinetunePeft, RoundTripIsExact) {
  Saved s;
  nn::DecoderLM fresh(tiny_llama());
  fresh.load_state_dict(s.model.state_dict(), /*strict=*/false);  // the same base weights
  AdapterInfo info = load_adapter(fresh, s.dir);
  EXPECT_EQ(info.config.r, 2);
  EXPECT_EQ(info.config.alpha, 4.0);
  EXPECT_EQ(info.config.targets, "w_q,w_v");
  EXPECT_EQ(info.base_model_name_or_path, "xg/tiny-llama");
  EXPECT_EQ(info.modules, (std::vector<std::string>{"layers.0.attention.w_q", "layers.0.attention.w_v",
                                                    "layers.1.attention.w_q", "layers.1.attention.w_v"}));
  Tensor t = tiny_tokens(3);
  EXPECT_TRUE(bitwise_equal(fresh(t), s.model(t)));
  auto a = named_lora_parameters(s.model), b = named_lora_parameters(fresh);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(bitwise_equal(a[i].second, b[i].second)) << a[i].first;
  }
  // Loaded adapters train like injected ones: only A and B require grad.
  for (const auto& [n, p] : fresh.named_parameters())
    EXPECT_EQ(p.requires_grad(), n.find(".lora_") != std::string::npos) << n;
  // Loading twice is an error naming the module.
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), "module 'layers.0.attention.w_q' already has an adapter");
}

TEST(FinetunePeft, RegexTargetsAndRsLoraRoundTrip) {
  Saved s(lora_cfg(3, 6, R"(layers\.1\..*W_(up|down))", true, 0.1));
  json c = read_json(s.dir + "/adapter_config.json");
  EXPECT_EQ(c["target_modules"], R"(layers\.1\..*W_(up|down))");
  EXPECT_EQ(c["use_rslora"], true);
  EXPECT_EQ(c["lora_dropout"], 0.1);
  nn::DecoderLM fresh(tiny_llama());
  fresh.load_state_dict(s.model.state_dict(), false);
  AdapterInfo info = load_adapter(fresh, s.dir);
  EXPECT_EQ(info.modules, (std::vector<std::string>{"layers.1.ffn.W_up", "layers.1.ffn.W_down"}));
  EXPECT_TRUE(info.config.use_rslora);
  EXPECT_DOUBLE_EQ(lora_adapters(fresh)[0].second->scaling(), 6 / std::sqrt(3.0));
  s.model.eval();
  fresh.eval();  // dropout off
  Tensor t = tiny_tokens(4);
  EXPECT_TRUE(bitwise_equal(fresh(t), s.model(t)));
}

TEST(FinetunePeft, ShortNamesInConfigLoad) {
  Saved s;
  json c = read_json(s.dir + "/adapter_config.json");
  c["target_modules"] = {"q", "v"};  // xgrad's short names also work in a config
  write_text(s.dir + "/adapter_config.json", c.dump());
  nn::DecoderLM fresh(tiny_llama());
  EXPECT_EQ(load_adapter(fresh, s.dir).modules.size(), 4u);
}

TEST(FinetunePeft, DifferentBaseModelIsAnError) {
  Saved s;
  const std::string wfile = s.dir + "/adapter_model.safetensors";
  // Wrong shapes: d_model 12 instead of 8.
  nn::DecoderLM wide(tiny_llama(2, 12));
  EXPECT_XG_ERROR(load_adapter(wide, s.dir),
                  wfile + ": key 'base_model.model.layers.0.attention.w_q.lora_A.weight' has shape [2,8] but module "
                          "'layers.0.attention.w_q' (Linear(in_features=12, out_features=12), r=2) needs [2,12]");
  EXPECT_TRUE(lora_adapters(wide).empty());
  for (const auto& [n, p] : wide.named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;
  // Missing modules: one layer instead of two.
  nn::DecoderLM shallow(tiny_llama(1));
  EXPECT_XG_ERROR(load_adapter(shallow, s.dir),
                  wfile + ": key 'base_model.model.layers.1.attention.w_q.lora_A.weight': the model has no Linear "
                          "module 'layers.1.attention.w_q'");
  EXPECT_TRUE(lora_adapters(shallow).empty());
  // Deeper model: target_modules select modules the file has no weights for.
  nn::DecoderLM deep(tiny_llama(3));
  EXPECT_XG_ERROR(load_adapter(deep, s.dir), "select module 'layers.2.attention.w_q' but " + wfile + " has no weights");
  EXPECT_TRUE(lora_adapters(deep).empty());
  // Same names, other shapes: the teaching block's MHA has w_v [8, 8] where GQA had [4, 8].
  nn::LMConfig teach = tiny_llama();
  teach.block = nn::BlockConfig{};
  teach.block.d_model = 8;
  std::get<nn::MHASpec>(teach.block.attention).n_heads = 2;
  std::get<nn::MLPSpec>(teach.block.ffn).d_ff = 16;
  teach.block.max_seq_len = 16;
  nn::DecoderLM other(teach);  // w_q, w_k, w_v, w_o, fc1, fc2
  EXPECT_XG_ERROR(load_adapter(other, s.dir),
                  wfile + ": key 'base_model.model.layers.0.attention.w_v.lora_B.weight' has shape [4,2] but module "
                          "'layers.0.attention.w_v' (Linear(in_features=8, out_features=8), r=2) needs [8,2]");
  EXPECT_TRUE(lora_adapters(other).empty());
}

TEST(FinetunePeft, KeysThatAreNotLoRAWeights) {
  Saved s;
  const std::string wfile = s.dir + "/adapter_model.safetensors";
  TensorMap w = io::load_safetensors(wfile);
  TensorMap extra = w;
  extra.emplace("base_model.model.layers.0.attention.w_q.lora_magnitude_vector", zeros({8}));
  io::save_safetensors(wfile, extra);
  nn::DecoderLM fresh(tiny_llama());
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir),
                  wfile + ": key 'base_model.model.layers.0.attention.w_q.lora_magnitude_vector' is not a LoRA weight");
  TensorMap half = w;
  half.erase("base_model.model.layers.1.attention.w_v.lora_B.weight");
  io::save_safetensors(wfile, half);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), wfile + ": module 'layers.1.attention.w_v' has lora_A but no lora_B");
  EXPECT_TRUE(lora_adapters(fresh).empty());
}

TEST(FinetunePeft, MalformedConfigNamesTheFile) {
  Saved s;
  const std::string cfile = s.dir + "/adapter_config.json";
  const json good = read_json(cfile);
  nn::DecoderLM fresh(tiny_llama());
  auto with = [&](const std::string& key, const json& value) { write_config_with(cfile, good, key, value); };
  write_text(cfile, "{\"peft_type\": \"LORA\", \"r\": ");
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": invalid JSON");
  with("peft_type", "PREFIX_TUNING");
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": peft_type is 'PREFIX_TUNING', only \"LORA\"");
  with("r", "8");
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": r must be a positive integer, got \"8\"");
  with("r", json::value_t::discarded);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": r must be a positive integer (missing)");
  with("lora_alpha", json::array());
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": lora_alpha must be a number, got []");
  with("lora_dropout", 1.5);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": lora_dropout must be in [0, 1), got 1.5");
  with("target_modules", 3);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": target_modules must be a string or a non-empty list");
  with("target_modules", {"W_q", "W_(v"});
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": target_modules entries must be module names");
  with("target_modules", {"w_q"});  // the file also has w_v weights
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir),
                  "module 'layers.0.attention.w_v' is not selected by target_modules 'w_q' of " + cfile);
  with("target_modules", {"w_q", "nope"});
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": target_modules: target module 'nope' matches no Linear");
  with("use_dora", true);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": use_dora true is not supported");
  with("bias", "all");
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": bias \"all\" is not supported");
  with("r", 3);  // the weights have r = 2
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), "has shape [2,8] but module 'layers.0.attention.w_q'");
  EXPECT_TRUE(lora_adapters(fresh).empty());
  fs::remove(cfile);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), "load_adapter: cannot read " + cfile);
}

TEST(FinetunePeft, FailedSaveWritesNothing) {
  TempDir tmp;
  nn::DecoderLM model(tiny_llama(1));
  const std::string dir = tmp / "out";
  EXPECT_XG_ERROR(save_adapter(model, dir, lora_cfg(2, 4, "q")), "save_adapter: the model has no LoRA adapters");
  EXPECT_FALSE(fs::exists(dir));
  Generator gen(1);
  inject_lora(model, lora_cfg(2, 4, "q,v"), gen);
  EXPECT_XG_ERROR(save_adapter(model, dir, lora_cfg(4, 4, "q,v")),
                  "save_adapter: the adapter of 'layers.0.attention.w_q' has r=2, lora_alpha=4");
  EXPECT_XG_ERROR(save_adapter(model, dir, lora_cfg(2, 4, "q")), "'layers.0.attention.w_v' has an adapter but targets 'q' do not select it");
  EXPECT_XG_ERROR(save_adapter(model, dir, lora_cfg(2, 4, "q,v,o")), "select 'layers.0.attention.w_o', which has no adapter");
  LoRALinear bare(4, 3, lora_cfg(2, 4, "q"), gen);
  EXPECT_XG_ERROR(save_adapter(bare, dir, lora_cfg(2, 4, "q")), "save_adapter: the adapter is on the model itself");
  EXPECT_FALSE(fs::exists(dir));
  // The target folder is a file / below a file.
  fs::create_directories(tmp.path);
  write_text(dir, "x");
  EXPECT_XG_ERROR(save_adapter(model, dir, lora_cfg(2, 4, "q,v")), "save_adapter: '" + dir + "' exists and is not a directory");
  EXPECT_XG_ERROR(save_adapter(model, dir + "/sub", lora_cfg(2, 4, "q,v")), "save_adapter: cannot create directory");
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()), 1);
  // A folder where the weights file cannot be written: nothing is left and the folder is removed.
  fs::remove(dir);
  fs::create_directories(dir + "/adapter_model.safetensors");  // a directory in the way of the rename
  EXPECT_XG_ERROR(save_adapter(model, dir, lora_cfg(2, 4, "q,v")), "save_adapter: cannot write the adapter into");
  EXPECT_FALSE(fs::exists(dir + "/adapter_config.json"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // only the obstacle
}

TEST(FinetunePeft, HfBaseAdaptersHavePeftsNamesForThatModelAndLoadBack) {
  // Qwen2 (q/k/v biases) read by load_hf: modules are named as transformers names them.
  const std::string folder = std::string(XGRAD_FIXTURE_DIR) + "/hf/qwen2";
  auto model = nn::load_hf(folder);
  Generator gen(4);
  const std::vector<std::string> paths = inject_lora(*model, lora_cfg(2, 4, "q_proj,v_proj"), gen, "hf_llama");
  EXPECT_EQ(paths, (std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                             "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}));
  randomize_b(*model, 5);
  TempDir d;
  save_adapter(*model, d / "a", lora_cfg(2, 4, "q_proj,v_proj"), "Qwen/Qwen2-0.5B", "hf_llama");
  std::set<std::string> keys;
  for (const auto& [k, t] : io::load_safetensors(d / "a/adapter_model.safetensors")) keys.insert(k);
  std::set<std::string> want;
  for (const char* l : {"0", "1"})
    for (const char* m : {"q_proj", "v_proj"})
      for (const char* w : {"A", "B"}) want.insert(str_cat("base_model.model.model.layers.", l, ".self_attn.", m, ".lora_", w, ".weight"));
  EXPECT_EQ(keys, want);
  const json c = read_json(d / "a/adapter_config.json");
  EXPECT_EQ(c["target_modules"], json::array({"q_proj", "v_proj"}));
  EXPECT_EQ(c["base_model_name_or_path"], "Qwen/Qwen2-0.5B");
  EXPECT_EQ(c["task_type"], "CAUSAL_LM");

  auto fresh = nn::load_hf(folder);
  const AdapterInfo info = load_adapter(*fresh, d / "a", "hf_llama");
  EXPECT_EQ(info.modules, paths);
  const Tensor tokens = tiny_tokens(6);
  NoGradGuard ng;
  EXPECT_TRUE(bitwise_equal((*fresh)(tokens), (*model)(tokens)));
  // Under xgrad's own names the same file names modules the model does not have.
  auto plain = nn::load_hf(folder);
  EXPECT_XG_ERROR(load_adapter(*plain, d / "a"), "the model has no Linear module 'model.layers.0.self_attn.q_proj'");

  // Short names and regexes over HF's paths select the same modules and write HF's names.
  auto short_names = nn::load_hf(folder);
  EXPECT_EQ(inject_lora(*short_names, lora_cfg(2, 4, "q,v"), gen, "hf_llama"), paths);
  EXPECT_EQ(peft_target_names(*short_names, "q,v", "hf_llama"), (std::vector<std::string>{"q_proj", "v_proj"}));
  auto regex = nn::load_hf(folder);
  EXPECT_EQ(inject_lora(*regex, lora_cfg(2, 4, "model\\.layers\\.\\d+\\.self_attn\\.(q|v)_proj"), gen, "hf_llama"), paths);
  EXPECT_XG_ERROR(match_targets(*regex, "w_q", "inject_lora", "hf_llama"),
                  "target module 'w_q' matches no Linear module in the model; available Linear modules: "
                  "model.layers.0.self_attn.q_proj");
}

namespace peft_numbers {

// An adapter's numbers are bounded where they are read, naming the key: a lora_alpha of 1e308
// is finite but its scale overflows every product (generation failed later, in sampling, naming
// no file), and an r of 2^40 would size the adapters' matrices.
TEST(FinetunePeft, AbsurdNumbersInTheConfigAreRefusedByKey) {
  Saved s;
  const std::string cfile = s.dir + "/adapter_config.json";
  const json good = read_json(cfile);
  nn::DecoderLM fresh(tiny_llama());
  auto with = [&](const std::string& key, const json& value) { write_config_with(cfile, good, key, value); };
  with("lora_alpha", 1e308);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": lora_alpha 1e+308 with r 2 scales the adapter by 5e+307");
  with("lora_alpha", -1e300);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": lora_alpha -1e+300 with r 2 scales the adapter by -5e+299");
  with("r", int64_t{1} << 40);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": r must be at most 65536, got 1099511627776");
  with("lora_dropout", -0.25);
  EXPECT_XG_ERROR(load_adapter(fresh, s.dir), cfile + ": lora_dropout must be in [0, 1), got -0.25");
  EXPECT_TRUE(lora_adapters(fresh).empty());
  // The same bounds hold for a config made in code (xg-finetune's --lora-alpha).
  EXPECT_XG_ERROR(lora_cfg(2, 1e308, "q").validate("xg-finetune"), "xg-finetune: lora_alpha 1e+308 with r 2 scales");
}

}  // namespace peft_numbers

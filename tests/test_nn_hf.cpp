// nn/hf.cpp: Hugging Face folders (tests/fixtures/hf/, made by gen_hf.py) load to PyTorch's
// logits and greedy generations; save_hf -> load_hf round trips (F32, BF16, sharded); the
// config.json mapping and Llama 3.1's RoPE frequency scaling.
#include "nn/hf.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/index.hpp"
#include "autograd/shape.hpp"
#include "nn/naming.hpp"
#include "tests/cli_run.hpp"
#include "tests/hf_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace {

using test::fixture;
using test::fresh_test_dir;
using test::tensors_close;

namespace fs = std::filesystem;

std::string hf_fixture(const std::string& name) { return std::string(XGRAD_FIXTURE_DIR) + "/hf/" + name; }

const char* const kHFFolders[] = {"llama3", "mistral", "qwen2", "qwen3", "llama3_vocab", "qwen3_vocab"};

Tensor hf_logits(nn::DecoderLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  return model(tokens);
}

// The fixture's logits columns (all of them unless it lists some).
Tensor hf_columns(const std::string& name, const Tensor& logits) {
  const TensorMap& fx = fixture("hf");
  auto it = fx.find(name + ".columns");
  return it == fx.end() ? logits : index_select(logits, 2, it->second);
}

std::string hf_slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(NnHf, LogitsMatchPyTorch) {
  for (const char* name : kHFFolders) {
    SCOPED_TRACE(name);
    const TensorMap& fx = fixture("hf");
    auto model = nn::load_hf(hf_fixture(name));
    const Tensor logits = hf_logits(*model, fx.at(std::string(name) + ".tokens"));
    EXPECT_TRUE(tensors_close(hf_columns(name, logits), fx.at(std::string(name) + ".logits"), 1e-5, 1e-6));
    // logsumexp over the whole vocabulary (the real-vocabulary folders store only some columns)
    const Tensor lse = fx.at(std::string(name) + ".lse");
    const int64_t T = logits.size(1), V = logits.size(2);
    const float* l = logits.data<float>();
    for (int64_t t = 0; t < T; ++t) {
      double m = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, static_cast<double>(l[t * V + v]));
      for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(l[t * V + v]) - m);
      EXPECT_NEAR(m + std::log(s), lse.data<double>()[t], 1e-5 * std::abs(lse.data<double>()[t]) + 1e-6) << "t=" << t;
    }
  }
}

TEST(NnHf, GreedyGenerationMatchesPyTorchFor32Tokens) {
  for (const char* name : kHFFolders) {
    SCOPED_TRACE(name);
    const TensorMap& fx = fixture("hf");
    auto model = nn::load_hf(hf_fixture(name));
    test::expect_greedy_like_torch(*model, fx, name);
  }
}

TEST(NnHf, ConfigMapsEachArchitecture) {
  nn::HFConfig c;
  nn::load_hf(hf_fixture("llama3"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Llama);
  EXPECT_EQ(c.lm.block.rope_scaling.kind, RopeScalingKind::Llama3);
  EXPECT_EQ(c.lm.block.rope_scaling.original_max_seq_len, 64);
  EXPECT_EQ(c.lm.block.rope_layout, RopeLayout::RotateHalf);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(c.eos_is_list);
  EXPECT_EQ(*c.bos_token_id, 1);
  EXPECT_FALSE(c.lm.tie_embeddings);

  auto qwen3 = nn::load_hf(hf_fixture("qwen3"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Qwen3);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  const nn::GQASpec& g3 = std::get<nn::GQASpec>(c.lm.block.attention);
  EXPECT_EQ(g3.head_dim, 16);
  EXPECT_TRUE(g3.qk_norm);
  EXPECT_EQ(qwen3->state_dict().at("layers.0.attention.q_norm.weight").shape(), (Shape{16}));
  EXPECT_EQ(qwen3->state_dict().at("layers.0.attention.w_q.weight").shape(), (Shape{64, 32}));
  EXPECT_EQ(qwen3->tok_embeddings()->weight().dtype(), kFloat32);

  nn::load_hf(hf_fixture("qwen2"), &c);
  const nn::GQASpec& g2 = std::get<nn::GQASpec>(c.lm.block.attention);
  EXPECT_TRUE(g2.qkv_bias);
  EXPECT_FALSE(g2.out_bias);
  EXPECT_TRUE(c.lm.tie_embeddings);
}

TEST(NnHf, LoadModelTellsTheFolderKindsApart) {
  const fs::path dir = fresh_test_dir();
  EXPECT_EQ(xg::io::ModelSource::open(hf_fixture("mistral")).format, xg::io::ModelFormat::HuggingFace);
  auto hf = nn::load_model(hf_fixture("mistral"));
  nn::save_pretrained(*hf, (dir / "xgrad").string());
  EXPECT_EQ(xg::io::ModelSource::open((dir / "xgrad").string()).format, xg::io::ModelFormat::Xgrad);
  auto back = nn::load_model((dir / "xgrad").string());
  const Tensor tokens = fixture("hf").at("mistral.tokens");
  EXPECT_TRUE(tensors_close(hf_logits(*back, tokens), hf_logits(*hf, tokens), 0, 0));
}

TEST(NnHf, SaveLoadRoundTripF32GivesIdenticalLogits) {
  const fs::path dir = fresh_test_dir();
  for (const char* name : {"qwen3", "qwen2", "llama3"}) {
    SCOPED_TRACE(name);
    auto model = nn::load_hf(hf_fixture(name));
    nn::SaveHFOptions o;
    o.source = hf_fixture(name);
    nn::save_hf(*model, (dir / name).string(), o);
    ASSERT_TRUE(fs::exists(dir / name / "model.safetensors"));
    EXPECT_FALSE(fs::exists(dir / name / "model.safetensors.index.json"));
    io::SafetensorsReader r((dir / name / "model.safetensors").string());
    EXPECT_EQ(r.metadata().at("format"), "pt");
    EXPECT_EQ(r.entry("model.norm.weight").dtype, "F32");
    EXPECT_EQ(r.contains("lm_head.weight"), !model->config().tie_embeddings);
    nn::HFConfig c;
    auto back = nn::load_hf((dir / name).string(), &c);
    EXPECT_EQ(c.torch_dtype, "float32");
    const Tensor tokens = fixture("hf").at(std::string(name) + ".tokens");
    EXPECT_TRUE(tensors_close(hf_logits(*back, tokens), hf_logits(*model, tokens), 0, 0));
  }
  const auto cfg = nlohmann::json::parse(hf_slurp(dir / "qwen3" / "config.json"));
  EXPECT_EQ(cfg["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(cfg["head_dim"], 16);
  EXPECT_EQ(cfg["torch_dtype"], "float32");
  const auto llama = nlohmann::json::parse(hf_slurp(dir / "llama3" / "config.json"));
  EXPECT_EQ(llama["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(llama["eos_token_id"], nlohmann::json::array({2, 3}));
  // The tokenizer files of the source folder come along, byte for byte.
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"})
    EXPECT_EQ(hf_slurp(dir / "llama3" / f), hf_slurp(fs::path(hf_fixture("llama3")) / f)) << f;
  EXPECT_FALSE(fs::exists(dir / "qwen3" / "tokenizer_config.json"));
}

TEST(NnHf, SavingWithASourceKeepsItsConfigKeysThatDoNotChangeTheModel) {
  const fs::path dir = fresh_test_dir();
  fs::copy(hf_fixture("llama3"), dir / "src", fs::copy_options::recursive);
  auto cfg = nlohmann::ordered_json::parse(hf_slurp(dir / "src" / "config.json"));
  cfg["pad_token_id"] = 5;  // transformers reads it; the forward does not
  { std::ofstream(dir / "src" / "config.json") << cfg.dump(2); }
  auto model = nn::load_hf((dir / "src").string());
  nn::SaveHFOptions o;
  o.source = (dir / "src").string();
  nn::save_hf(*model, (dir / "out").string(), o);
  const auto out = nlohmann::ordered_json::parse(hf_slurp(dir / "out" / "config.json"));
  EXPECT_EQ(out["pad_token_id"], 5);
  EXPECT_EQ(out["initializer_range"], cfg["initializer_range"]);
  EXPECT_EQ(out["use_cache"], cfg["use_cache"]);
  EXPECT_EQ(out["transformers_version"], cfg["transformers_version"]);
  const Tensor tokens = fixture("hf").at("llama3.tokens");
  EXPECT_TRUE(tensors_close(hf_logits(*nn::load_hf((dir / "out").string()), tokens), hf_logits(*model, tokens), 0, 0));
}

TEST(NnHf, ShardedRoundTripWritesAnIndex) {
  const fs::path dir = fresh_test_dir();
  auto model = nn::load_hf(hf_fixture("qwen3"));
  nn::SaveHFOptions o;
  o.max_shard_bytes = 30000;
  nn::save_hf(*model, (dir / "m").string(), o);
  const auto index = nlohmann::json::parse(hf_slurp(dir / "m" / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [t, f] : index["weight_map"].items()) shards.insert(f.get<std::string>());
  EXPECT_GE(shards.size(), 3u);
  EXPECT_TRUE(shards.count("model-00001-of-0000" + std::to_string(shards.size()) + ".safetensors"));
  uint64_t total = 0;
  for (const std::string& s : shards) {
    io::SafetensorsReader r((dir / "m" / s).string());
    for (const auto& [n, e] : r.entries()) total += e.end - e.begin;
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_FALSE(fs::exists(dir / "m" / "model.safetensors"));
  auto back = nn::load_hf((dir / "m").string());
  const Tensor tokens = fixture("hf").at("qwen3.tokens");
  EXPECT_TRUE(tensors_close(hf_logits(*back, tokens), hf_logits(*model, tokens), 0, 0));

  // Saved again over the folder, unsharded: the old shards go, a file of the user's stays.
  { std::ofstream((dir / "m" / "README.md").string()) << "notes"; }
  nn::save_hf(*model, (dir / "m").string());
  EXPECT_TRUE(fs::exists(dir / "m" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "m" / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "m" / *shards.begin()));
  EXPECT_EQ(hf_slurp(dir / "m" / "README.md"), "notes");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename().string()[0] == '.', false) << e.path();
}

TEST(NnHf, SaveWithAGivenConfigKeepsItsKeys) {
  const fs::path dir = fresh_test_dir();
  nn::HFConfig c;
  auto model = nn::load_hf(hf_fixture("mistral"), &c);
  nn::SaveHFOptions o;
  o.config = c;
  nn::save_hf(*model, (dir / "given").string(), o);
  const auto cfg = nlohmann::json::parse(hf_slurp(dir / "given" / "config.json"));
  EXPECT_EQ(cfg["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(cfg["sliding_window"], nullptr);
  EXPECT_EQ(cfg["bos_token_id"], 1);
  nn::save_hf(*model, (dir / "inferred").string());  // without a source or config: Llama's names
  EXPECT_EQ(nlohmann::json::parse(hf_slurp(dir / "inferred" / "config.json"))["architectures"][0], "LlamaForCausalLM");
  nn::HFConfig other = c;
  other.lm.n_layers = 3;
  o.config = other;
  EXPECT_XG_ERROR(nn::save_hf(*model, (dir / "other").string(), o), "options.config describes another model");
  EXPECT_FALSE(fs::exists(dir / "other"));
}

TEST(NnHf, Bf16IsReadAndWrittenExactly) {
  const fs::path dir = fresh_test_dir();
  // The BF16 fixture's numbers are bfloat16 values: widened, and rounded back, they are unchanged.
  io::SafetensorsReader src(hf_fixture("mistral") + "/model.safetensors");
  EXPECT_EQ(src.entry("model.embed_tokens.weight").dtype, "BF16");
  auto model = nn::load_hf(hf_fixture("mistral"));
  nn::SaveHFOptions o;
  o.dtype = io::StoredFloat::BFloat16;
  nn::save_hf(*model, (dir / "bf16").string(), o);
  nn::HFConfig c;
  auto back = nn::load_hf((dir / "bf16").string(), &c);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  io::SafetensorsReader r((dir / "bf16" / "model.safetensors").string());
  EXPECT_EQ(r.entry("model.embed_tokens.weight").dtype, "BF16");
  // The same data bytes (the header is longer by xgrad's CRC32s).
  uint64_t data = 0, fixture_data = 0;
  for (const auto& [name, e] : r.entries()) data += e.end - e.begin;
  for (const auto& [name, e] : src.entries()) fixture_data += e.end - e.begin;
  EXPECT_EQ(data, fixture_data);
  const Tensor tokens = fixture("hf").at("mistral.tokens");
  EXPECT_TRUE(tensors_close(hf_logits(*back, tokens), hf_logits(*model, tokens), 0, 0));
  // read_into widens BF16 exactly: the same numbers as the whole-file reader.
  const Tensor a = io::load_safetensors(hf_fixture("mistral") + "/model.safetensors").at("model.norm.weight");
  EXPECT_TRUE(tensors_close(model->norm()->named_parameters()[0].second, a, 0, 0));
}

TEST(NnHf, Bfloat16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(bfloat16_to_float(0x3f81)), 0x3f81);
  // 1 + 2^-8 lies halfway between 0x3f80 and 0x3f81: ties go to the even 0x3f80; a bit above goes up.
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // 0x3f81.8: up to even
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(NAN))));
  EXPECT_EQ(float_to_bfloat16(-INFINITY), 0xff80);
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
}

TEST(NnHf, Llama3RopeScalingKeepsDividesAndInterpolates) {
  RopeScaling s;
  s.kind = RopeScalingKind::Llama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_seq_len = 64;  // wavelengths < 16 kept, > 64 divided by 8
  const std::vector<double> plain = rope_frequencies(16, 10000.0), scaled = rope_frequencies(16, 10000.0, s);
  const double two_pi = 2 * 3.14159265358979323846;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const double wavelen = two_pi / plain[i];
    if (wavelen < 16) {
      EXPECT_EQ(scaled[i], plain[i]) << i;
    } else if (wavelen > 64) {
      EXPECT_DOUBLE_EQ(scaled[i], plain[i] / 8) << i;
    } else {
      const double t = (64 / wavelen - 1) / 3;
      EXPECT_DOUBLE_EQ(scaled[i], (1 - t) * plain[i] / 8 + t * plain[i]) << i;
    }
  }
  // The bands are all exercised: freq 1 kept, 10^-0.5 and 10^-1 interpolated, the rest divided.
  EXPECT_EQ(scaled[0], 1.0);
  EXPECT_LT(scaled[1], plain[1]);
  EXPECT_GT(scaled[1], plain[1] / 8);
  EXPECT_DOUBLE_EQ(scaled[7], plain[7] / 8);
  // Default scaling: the unscaled frequencies, and rope_tables uses them.
  EXPECT_EQ(rope_frequencies(16, 10000.0, RopeScaling{}), plain);
  auto [c, sn] = rope_tables(16, 3, 10000.0, kFloat64, s);
  EXPECT_DOUBLE_EQ(c.data<double>()[8 + 3], std::cos(scaled[3]));
  EXPECT_DOUBLE_EQ(sn.data<double>()[2 * 8 + 1], std::sin(2 * scaled[1]));
}

TEST(NnHf, RopeScalingInConfigJson) {
  nn::LMConfig c;
  c.block = nn::BlockConfig::llama(32, 4, 2);
  EXPECT_EQ(c.to_json().find("rope_scaling"), std::string::npos);  // inactive: not written
  c.block.rope_scaling.kind = RopeScalingKind::Llama3;
  c.block.rope_scaling.factor = 32;
  const nn::LMConfig back = nn::LMConfig::from_json(c.to_json());
  EXPECT_EQ(back.block.rope_scaling.kind, RopeScalingKind::Llama3);
  EXPECT_EQ(back.block.rope_scaling.factor, 32);
  EXPECT_EQ(back.to_json(), c.to_json());
  nn::LMConfig mla = c;
  mla.block.attention = nn::MLASpec{};
  EXPECT_XG_ERROR(mla.validate(), "field 'rope_scaling' is supported with gqa and mha attention, not mla");
  nn::LMConfig bad = c;
  bad.block.rope_scaling.high_freq_factor = 0.5;
  EXPECT_XG_ERROR(bad.validate(), "field 'rope_scaling.high_freq_factor' (0.5) must be greater than low_freq_factor (1)");
  EXPECT_XG_ERROR(nn::LMConfig::from_json(R"({"block": {"rope_scaling": {"kind": "longrope"}}})", "cfg"),
                  "field 'block.rope_scaling.kind' must be one of \"none\", \"llama3\", \"linear\", \"dynamic\", \"yarn\", "
                  "got \"longrope\"");
}

TEST(NnHf, NamingSchemeSkipsRotaryInvFreq) {
  auto model = nn::load_hf(hf_fixture("qwen2"));
  const nn::NamingScheme& s = nn::NamingScheme::get("hf_llama");
  TensorMap sd = model->state_dict(s);
  sd.emplace("model.layers.0.self_attn.rotary_emb.inv_freq", zeros({4}));
  EXPECT_NO_THROW(model->load_state_dict(sd, s));
  sd.emplace("model.layers.0.self_attn.rotary.inv_freq", zeros({4}));
  EXPECT_XG_ERROR(model->load_state_dict(sd, s), "unexpected 'model.layers.0.self_attn.rotary.inv_freq'");
}

TEST(NnHf, SaveRefusesModelsHfCannotExpress) {
  nn::LMConfig c;
  c.vocab_size = 16;
  c.block = nn::BlockConfig::teaching(16, 2);
  nn::DecoderLM teaching(c);
  const fs::path dir = fresh_test_dir();
  EXPECT_XG_ERROR(nn::save_hf(teaching, (dir / "t").string()), "norm_position pre (sandwich: Gemma 2), got post");
  EXPECT_FALSE(fs::exists(dir / "t"));
  // An interleaved-RoPE llama-style model is saved with its q/k rows permuted to HF's layout.
  nn::LMConfig l;
  l.vocab_size = 32;
  l.block = nn::BlockConfig::llama(16, 4, 2);
  l.block.max_seq_len = 64;
  nn::DecoderLM inter(l);
  nn::save_hf(inter, (dir / "i").string());
  auto back = nn::load_hf((dir / "i").string());
  const Tensor tokens = test::ids({1, 5, 7, 30, 2}, {1, 5});
  EXPECT_TRUE(tensors_close(hf_logits(*back, tokens), hf_logits(inter, tokens), 1e-5, 1e-6));
  EXPECT_EQ(back->config().block.rope_layout, RopeLayout::RotateHalf);
}

}  // namespace
}  // namespace xg

// Hugging Face folders beyond the Llama family (tests/fixtures/hf/, made by gen_hf_arch.py):
// GPT-2 (packed, transposed Conv1D weights; the Hub's prefix-less names) and Gemma (GeGLU,
// RMSNorm with a unit offset, scaled embeddings) load to PyTorch's float64 logits and greedy
// generations, save and load back bit for bit, and their bad configs are refused by key; the
// new modules pass float64 gradient checks.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/gradcheck.hpp"
#include "nn/gguf_model.hpp"
#include "nn/hf.hpp"
#include "nn/naming.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace hf_arch_test {

using test::fixture;
using test::fresh_test_dir;
using test::tensors_close;

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using V = std::vector<Tensor>;

const char* const kArchFolders[] = {"gpt2", "gpt2_relu", "gemma"};

std::string arch_fixture(const std::string& name) { return std::string(XGRAD_FIXTURE_DIR) + "/hf/" + name; }

Tensor arch_logits(nn::DecoderLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  return model(tokens);
}

ojson arch_config(const std::string& name) {
  std::ifstream in(arch_fixture(name) + "/config.json");
  return ojson::parse(in);
}

void arch_parse(const std::string& name, const std::function<void(ojson&)>& edit) {
  ojson j = arch_config(name);
  edit(j);
  nn::HFConfig::from_json(j.dump(), "cfg.json");
}

TEST(NnHfArch, LogitsMatchPyTorchFloat64) {
  for (const char* name : kArchFolders) {
    SCOPED_TRACE(name);
    const TensorMap& fx = fixture("hf_arch");
    auto model = nn::load_hf(arch_fixture(name));
    const Tensor logits = arch_logits(*model, fx.at(std::string(name) + ".tokens"));
    EXPECT_EQ(logits.dtype(), kFloat32);
    EXPECT_TRUE(tensors_close(logits.to(kFloat64), fx.at(std::string(name) + ".logits"), 1e-5, 1e-6));
  }
}

TEST(NnHfArch, GreedyGenerationMatchesPyTorchFor32Tokens) {
  for (const char* name : kArchFolders) {
    SCOPED_TRACE(name);
    const TensorMap& fx = fixture("hf_arch");
    auto model = nn::load_hf(arch_fixture(name));
    nn::GenerateOptions greedy;
    greedy.temperature = 0;
    const Tensor out = model->generate(fx.at(std::string(name) + ".prompt"), 32, greedy);
    const Tensor expected = fx.at(std::string(name) + ".generated");
    ASSERT_EQ(out.shape(), expected.shape());
    for (int64_t i = 0; i < out.numel(); ++i)
      EXPECT_EQ(out.data<int64_t>()[i], expected.data<int64_t>()[i]) << "position " << i;
  }
}

TEST(NnHfArch, ConfigMapsGpt2AndGemma) {
  nn::HFConfig c;
  auto gpt2 = nn::load_hf(arch_fixture("gpt2"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::GPT2);
  const nn::BlockConfig& b = c.lm.block;
  EXPECT_EQ(b.position, nn::PositionKind::Learned);
  EXPECT_EQ(b.max_seq_len, 64);
  EXPECT_DOUBLE_EQ(std::get<nn::LayerNormSpec>(b.norm).eps, 1e-5);
  EXPECT_EQ(std::get<nn::MHASpec>(b.attention).n_heads, 4);
  EXPECT_TRUE(std::get<nn::MHASpec>(b.attention).bias);
  EXPECT_EQ(std::get<nn::MLPSpec>(b.ffn).activation, nn::Activation::GELUTanh);
  EXPECT_EQ(std::get<nn::MLPSpec>(b.ffn).d_ff, 256);
  EXPECT_DOUBLE_EQ(b.dropout, 0.1);
  EXPECT_TRUE(c.lm.tie_embeddings);
  EXPECT_EQ(*c.bos_token_id, 0);
  EXPECT_EQ(gpt2->state_dict().at("pos.weight").shape(), (Shape{64, 64}));

  nn::load_hf(arch_fixture("gpt2_relu"), &c);
  EXPECT_EQ(std::get<nn::MLPSpec>(c.lm.block.ffn).activation, nn::Activation::ReLU);
  EXPECT_EQ(std::get<nn::MLPSpec>(c.lm.block.ffn).d_ff, 96);
  EXPECT_EQ(c.torch_dtype, "bfloat16");

  auto gemma = nn::load_hf(arch_fixture("gemma"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Gemma);
  EXPECT_TRUE(std::holds_alternative<nn::UnitOffsetRMSNormSpec>(c.lm.block.norm));
  EXPECT_EQ(std::get<nn::GeGLUSpec>(c.lm.block.ffn).activation, nn::Activation::GELUTanh);
  EXPECT_EQ(std::get<nn::GQASpec>(c.lm.block.attention).head_dim, 32);
  EXPECT_DOUBLE_EQ(c.lm.embed_scale, 8.0);
  EXPECT_TRUE(c.lm.tie_embeddings);
  EXPECT_EQ(gemma->state_dict().at("layers.0.attention.w_q.weight").shape(), (Shape{128, 64}));
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1}));
}

// save_hf writes transformers' names and layouts (GPT-2: "transformer." names, c_attn packed
// and transposed), and load_hf reads them back into the same numbers.
TEST(NnHfArch, SaveLoadRoundTripsBitForBit) {
  const fs::path dir = fresh_test_dir();
  for (const char* name : kArchFolders) {
    SCOPED_TRACE(name);
    nn::HFConfig given;
    auto model = nn::load_hf(arch_fixture(name), &given);
    nn::SaveHFOptions o;
    o.source = arch_fixture(name);
    if (given.torch_dtype == "bfloat16") o.dtype = io::StoredFloat::BFloat16;
    nn::save_hf(*model, (dir / name).string(), o);
    nn::HFConfig c;
    auto back = nn::load_hf((dir / name).string(), &c);
    EXPECT_EQ(c.architecture, given.architecture);
    EXPECT_EQ(c.lm.to_json(), given.lm.to_json());
    EXPECT_EQ(c.bos_token_id, given.bos_token_id);
    const TensorMap a = model->state_dict(), b = back->state_dict();
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [n, t] : a) EXPECT_TRUE(tensors_close(b.at(n), t, 0, 0)) << n;
  }
  // GPT-2's c_attn as saved is the Hub file's h.0.attn.c_attn.weight, [in, 3 out], bit for bit.
  io::SafetensorsReader saved((dir / "gpt2" / "model.safetensors").string());
  io::SafetensorsReader hub(arch_fixture("gpt2") + "/model.safetensors");
  EXPECT_FALSE(saved.contains("lm_head.weight"));
  EXPECT_FALSE(saved.contains("transformer.h.0.attn.bias"));
  for (const auto& [ours, theirs] : std::vector<std::pair<std::string, std::string>>{
           {"transformer.h.0.attn.c_attn.weight", "h.0.attn.c_attn.weight"},
           {"transformer.h.1.mlp.c_fc.weight", "h.1.mlp.c_fc.weight"},
           {"transformer.h.1.attn.c_proj.bias", "h.1.attn.c_proj.bias"},
           {"transformer.wpe.weight", "wpe.weight"}}) {
    ASSERT_TRUE(saved.contains(ours)) << ours;
    EXPECT_EQ(saved.entry(ours).shape, hub.entry(theirs).shape) << ours;
    EXPECT_TRUE(tensors_close(saved.read(ours), hub.read(theirs), 0, 0)) << ours;
  }
  EXPECT_EQ(saved.entry("transformer.h.0.attn.c_attn.weight").shape, (Shape{64, 192}));
  // Gemma's config.json names its activation and keeps the norm weights offset-free.
  std::ifstream in(dir / "gemma" / "config.json");
  const ojson j = ojson::parse(in);
  EXPECT_EQ(j["architectures"][0], "GemmaForCausalLM");
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(j["head_dim"], 32);
}

// The hf_gpt2 scheme through Module's state_dict / load_state_dict: packed and transposed.
TEST(NnHfArch, Gpt2NamingSchemeRoundTrips) {
  auto model = nn::load_hf(arch_fixture("gpt2"));
  const nn::NamingScheme& s = nn::NamingScheme::get("hf_gpt2");
  const TensorMap sd = model->state_dict(s);
  EXPECT_EQ(sd.at("transformer.h.1.attn.c_attn.bias").shape(), (Shape{192}));
  EXPECT_EQ(sd.at("transformer.h.1.mlp.c_proj.weight").shape(), (Shape{256, 64}));
  nn::LMConfig cfg = model->config();
  nn::DecoderLM other(cfg);
  other.load_state_dict(sd, s);
  const Tensor tokens = fixture("hf_arch").at("gpt2.tokens");
  EXPECT_TRUE(tensors_close(arch_logits(other, tokens), arch_logits(*model, tokens), 0, 0));
  EXPECT_EQ(s.canonical("h.0.ln_1.weight"), "transformer.h.0.ln_1.weight");
  EXPECT_EQ(s.canonical("lm_head.weight"), "lm_head.weight");
}

// A model built in xgrad with GPT-2's or Gemma's block is saved as that architecture.
TEST(NnHfArch, XgradModelsSaveAsTheirArchitecture) {
  const fs::path dir = fresh_test_dir();
  nn::LMConfig g;
  g.vocab_size = 40;
  g.n_layers = 2;
  g.tie_embeddings = true;
  g.block.d_model = 16;
  g.block.max_seq_len = 32;
  std::get<nn::MHASpec>(g.block.attention).n_heads = 2;
  std::get<nn::MLPSpec>(g.block.ffn).activation = nn::Activation::GELUTanh;
  std::get<nn::MLPSpec>(g.block.ffn).naming = nn::FFNNaming::UpDown;  // w_up, w_down: c_fc, c_proj all the same
  nn::DecoderLM gpt2(g);
  EXPECT_EQ(nn::HFConfig::from_lm(g).architecture, nn::HFArchitecture::GPT2);
  nn::save_hf(gpt2, (dir / "g").string());
  auto back = nn::load_hf((dir / "g").string());
  const Tensor tokens = test::ids({1, 5, 7, 30, 2}, {1, 5});
  EXPECT_TRUE(tensors_close(arch_logits(*back, tokens), arch_logits(gpt2, tokens), 0, 0));

  nn::LMConfig m = nn::HFConfig::from_json(arch_config("gemma").dump()).lm;
  EXPECT_EQ(nn::HFConfig::from_lm(m).architecture, nn::HFArchitecture::Gemma);
  m.embed_scale = 1.0;
  EXPECT_XG_ERROR(nn::HFConfig::from_lm(m), "embed_scale sqrt(d_model) with norm rmsnorm_unit_offset, got 1");
  // llama.cpp's gemma and gpt2 are not written yet: refused by name.
  EXPECT_XG_ERROR(nn::gguf_architecture(g), "GGUF export: a GPT2LMHeadModel model is not supported");
}

// An xgrad folder of a Gemma model keeps embed_scale and the new kinds in its config.json.
TEST(NnHfArch, XgradFolderKeepsGemmaFields) {
  const fs::path dir = fresh_test_dir();
  auto model = nn::load_hf(arch_fixture("gemma"));
  nn::save_pretrained(*model, (dir / "x").string());
  std::ifstream in(dir / "x" / "config.json");
  const ojson j = ojson::parse(in);
  EXPECT_EQ(j["embed_scale"], 8.0);
  EXPECT_EQ(j["block"]["norm"]["kind"], "rmsnorm_unit_offset");
  EXPECT_EQ(j["block"]["ffn"]["kind"], "geglu");
  auto back = nn::load_pretrained((dir / "x").string());
  const Tensor tokens = fixture("hf_arch").at("gemma.tokens");
  EXPECT_TRUE(tensors_close(arch_logits(*back, tokens), arch_logits(*model, tokens), 0, 0));
}

TEST(NnHfArch, RefusedConfigsNameTheKey) {
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["scale_attn_by_inverse_layer_idx"] = true; }),
                  "cfg.json: key 'scale_attn_by_inverse_layer_idx' = true is not supported");
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["scale_attn_weights"] = false; }),
                  "key 'scale_attn_weights' = false is not supported");
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["activation_function"] = "gelu_fast"; }),
                  "key 'activation_function' = \"gelu_fast\" is not supported");
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["attn_pdrop"] = 0.0; }),
                  "key 'attn_pdrop' = 0.0 is not supported (xgrad applies one dropout rate, and resid_pdrop is 0.1)");
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["add_cross_attention"] = true; }),
                  "key 'add_cross_attention' = true is not supported");
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["n_head"] = 5; }),
                  "key 'n_head' must be a divisor of n_embd (64), got 5");
  EXPECT_XG_ERROR(arch_parse("gpt2", [](ojson& j) { j["model_type"] = "gemma"; }),
                  "key 'model_type' = \"gemma\" is not supported (it disagrees with architectures GPT2LMHeadModel)");
  EXPECT_XG_ERROR(arch_parse("gemma", [](ojson& j) { j["hidden_activation"] = "silu"; }),
                  "key 'hidden_activation' = \"silu\" is not supported");
  EXPECT_XG_ERROR(arch_parse("gemma", [](ojson& j) { j["attention_dropout"] = 0.1; }),
                  "key 'attention_dropout' = 0.1 is not supported");
  EXPECT_XG_ERROR(arch_parse("gemma", [](ojson& j) { j["num_key_value_heads"] = 3; }),
                  "key 'num_key_value_heads' must be a divisor of num_attention_heads (4), got 3");
  // Gemma's exact GELU is computed (hidden_activation "gelu").
  nn::HFConfig c;
  EXPECT_NO_THROW(c = nn::HFConfig::from_json([] {
                    ojson j = arch_config("gemma");
                    j["hidden_activation"] = "gelu";
                    return j.dump();
                  }()));
  EXPECT_EQ(std::get<nn::GeGLUSpec>(c.lm.block.ffn).activation, nn::Activation::GELU);
}

TEST(NnHfArch, MisshapenGpt2WeightsNameTheTensor) {
  const fs::path dir = fresh_test_dir() / "gpt2";
  fs::copy(arch_fixture("gpt2"), dir, fs::copy_options::recursive);
  ojson j = arch_config("gpt2");
  j["n_inner"] = 128;
  std::ofstream(dir / "config.json") << j.dump();
  // c_fc.bias is the first of the file's misshapen tensors (files hold tensors in name order).
  EXPECT_XG_ERROR(nn::load_hf(dir.string()), "tensor 'h.0.mlp.c_fc.bias' has shape [256], config.json gives [128]");
}

// --- the new modules: float64 gradient checks -----------------------------------------------

TEST(NnHfArchGradcheck, GeGLU) {
  for (nn::Activation act : {nn::Activation::GELUTanh, nn::Activation::GELU}) {
    nn::GeGLUSpec spec;
    spec.d_ff = 6;
    spec.activation = act;
    spec.bias = true;
    nn::SublayerContext ctx;
    ctx.d_model = 4;
    nn::GeGLU ffn(spec, ctx);
    test::randomize64(ffn, 7);
    EXPECT_GRADCHECK([&](const V& v) { return ffn(v[0]); }, test::with_params(test::randn64({2, 3, 4}, 8), ffn));
  }
}

TEST(NnHfArchGradcheck, UnitOffsetRMSNorm) {
  nn::SublayerContext ctx;
  ctx.d_model = 5;
  nn::RMSNorm norm(nn::UnitOffsetRMSNormSpec{1e-6}, ctx);
  EXPECT_TRUE(norm.unit_offset());
  // Starts as the identity scale: weight zeros.
  EXPECT_TRUE(tensors_close(norm.weight(), zeros({5}), 0, 0));
  test::randomize64(norm, 9);
  EXPECT_GRADCHECK([&](const V& v) { return norm(v[0]); }, test::with_params(test::randn64({3, 5}, 10), norm));
  // (1 + w) scales the plain RMSNorm's output.
  nn::RMSNorm plain(5, 1e-6);
  plain.to(kFloat64);
  NoGradGuard no_grad;
  plain.weight().copy_(norm.weight() + 1.0);
  const Tensor x = test::randn64({3, 5}, 11);
  EXPECT_TRUE(tensors_close(norm(x), plain(x), 1e-15, 1e-15));
}

}  // namespace hf_arch_test
}  // namespace xg

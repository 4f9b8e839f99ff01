// Hugging Face folders beyond the Llama family (tests/fixtures/hf/, made by gen_hf_arch.py):
// GPT-2 (packed, transposed Conv1D weights; the Hub's prefix-less names), Gemma (GeGLU,
// RMSNorm with a unit offset, scaled embeddings), Gemma 2 (sandwich norms, soft-capped scores
// and logits, query_pre_attn_scalar, local layers with a sliding window) and Mistral with its
// sliding window load to PyTorch's float64 logits and greedy generations, save and load back
// bit for bit, and their bad configs are refused by key; the new ops and modules pass float64
// gradient checks.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/gradcheck.hpp"
#include "finetune/lora.hpp"
#include "nn/gguf_model.hpp"
#include "nn/hf.hpp"
#include "nn/naming.hpp"
#include "autograd/elementwise.hpp"
#include "nn/attention_parts.hpp"
#include "tests/cli_run.hpp"
#include "tests/hf_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace hf_arch_test {

using test::fixture;
using test::fresh_test_dir;
using test::tensors_close;

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using V = std::vector<Tensor>;

const char* const kArchFolders[] = {"gpt2",         "gpt2_relu",     "gemma",      "gemma2",
                                    "mistral_window", "gemma3",      "gemma3_swa", "phi3",
                                    "llama_linear", "llama_dynamic", "llama_yarn", "llama_yarn_mscale"};

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
    // Within 1e-5 of the largest logit (float32's rounding over a few layers; Gemma 2's capped
    // logits are small, so a relative bound alone is too tight for them).
    EXPECT_TRUE(tensors_close(logits.to(kFloat64), fx.at(std::string(name) + ".logits"), 1e-5, 1e-5));
  }
}

TEST(NnHfArch, GreedyGenerationMatchesPyTorchFor32Tokens) {
  for (const char* name : kArchFolders) {
    SCOPED_TRACE(name);
    const TensorMap& fx = fixture("hf_arch");
    auto model = nn::load_hf(arch_fixture(name));
    test::expect_greedy_like_torch(*model, fx, name);
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

  auto gemma2 = nn::load_hf(arch_fixture("gemma2"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Gemma2);
  EXPECT_EQ(c.lm.block.norm_position, nn::NormPosition::Sandwich);
  const nn::GQASpec& g2 = std::get<nn::GQASpec>(c.lm.block.attention);
  EXPECT_DOUBLE_EQ(g2.scale, 1 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(g2.softcap, 5.0);
  EXPECT_DOUBLE_EQ(c.lm.final_logit_softcap, 3.0);
  EXPECT_EQ(c.lm.layer_windows, (std::vector<int64_t>{4, 0, 4}));
  EXPECT_EQ(gemma2->state_dict().count("layers.1.post_norm_ffn.weight"), 1u);

  nn::load_hf(arch_fixture("mistral_window"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Mistral);
  EXPECT_EQ(c.lm.layer_windows, (std::vector<int64_t>{5, 5}));

  auto gemma3 = nn::load_hf(arch_fixture("gemma3"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Gemma3);
  EXPECT_TRUE(std::get<nn::GQASpec>(c.lm.block.attention).qk_norm);
  EXPECT_EQ(std::get<nn::GQASpec>(c.lm.block.attention).softcap, 0.0);
  EXPECT_EQ(c.lm.final_logit_softcap, 0.0);
  EXPECT_EQ(c.lm.layer_windows, (std::vector<int64_t>{3, 3, 0}));
  EXPECT_DOUBLE_EQ(c.lm.local_rope_base, 10000.0);
  EXPECT_DOUBLE_EQ(c.lm.block.rope_base, 1e6);
  // The local layers' RoPE base, the global layer's; QK-Norm with Gemma's unit offset.
  EXPECT_DOUBLE_EQ((*gemma3->layers())[0]->config().rope_base, 10000.0);
  EXPECT_DOUBLE_EQ((*gemma3->layers())[2]->config().rope_base, 1e6);
  // Linear RoPE scaling on the global layer only, as Gemma3TextModel's rotary_emb_local is unscaled.
  EXPECT_FALSE((*gemma3->layers())[0]->config().rope_scaling.active());
  EXPECT_EQ((*gemma3->layers())[2]->config().rope_scaling.kind, RopeScalingKind::Linear);
  EXPECT_DOUBLE_EQ((*gemma3->layers())[2]->config().rope_scaling.factor, 8.0);
  for (const auto& [n, child] : (*gemma3->layers())[0]->attention()->named_children())
    if (n == "q_norm" || n == "k_norm") {
      EXPECT_TRUE(std::dynamic_pointer_cast<nn::RMSNorm>(child)->unit_offset()) << n;
    }

  nn::load_hf(arch_fixture("llama_dynamic"), &c);
  EXPECT_EQ(c.lm.block.rope_scaling.kind, RopeScalingKind::Dynamic);
  EXPECT_EQ(ojson::parse(c.to_json())["rope_scaling"], (ojson{{"factor", 2.0}, {"rope_type", "dynamic"}}));

  // YaRN: attention_factor 0.1 ln(factor) + 1, or mscale / mscale_all_dim's ratio; written back
  // resolved, and read back to the same scaling (xgrad's config.json too).
  nn::load_hf(arch_fixture("llama_yarn"), &c);
  EXPECT_EQ(c.lm.block.rope_scaling.kind, RopeScalingKind::Yarn);
  EXPECT_DOUBLE_EQ(c.lm.block.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(c.lm.block.rope_scaling.original_max_seq_len, 16);
  nn::load_hf(arch_fixture("llama_yarn_mscale"), &c);
  const RopeScaling& y = c.lm.block.rope_scaling;
  EXPECT_DOUBLE_EQ(y.attention_factor, (0.1 * std::log(8.0) + 1.0) / (0.05 * std::log(8.0) + 1.0));
  EXPECT_DOUBLE_EQ(y.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(y.beta_slow, 2.0);
  const RopeScaling again = nn::HFConfig::from_json(c.to_json()).lm.block.rope_scaling;
  EXPECT_EQ(nn::LMConfig::from_json(c.lm.to_json()).block.rope_scaling.attention_factor, y.attention_factor);
  EXPECT_EQ(again.attention_factor, y.attention_factor);
  EXPECT_EQ(again.beta_fast, y.beta_fast);
  EXPECT_EQ(again.original_max_seq_len, y.original_max_seq_len);
  EXPECT_XG_ERROR(arch_parse("llama_yarn", [](ojson& j) { j["rope_scaling"]["extrapolation_factor"] = 0.5; }),
                  "key 'rope_scaling.extrapolation_factor' = 0.5 is not supported");

  auto phi3 = nn::load_hf(arch_fixture("phi3"), &c);
  EXPECT_EQ(c.architecture, nn::HFArchitecture::Phi3);
  EXPECT_EQ(c.lm.layer_windows, (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(phi3->state_dict().at("layers.0.attention.w_k.weight").shape(), (Shape{16, 32}));
  EXPECT_EQ(phi3->state_dict().at("layers.0.ffn.W_up.weight").shape(), (Shape{48, 32}));
}

// "linear" divides every frequency by factor; "dynamic" keeps them within max_seq_len (its
// base changes only past max_position_embeddings); GGUF export writes neither.
TEST(NnHfArch, LinearAndDynamicRopeFrequencies) {
  RopeScaling lin, dyn;
  lin.kind = RopeScalingKind::Linear;
  lin.factor = 4.0;
  dyn.kind = RopeScalingKind::Dynamic;
  dyn.factor = 2.0;
  const std::vector<double> plain = rope_frequencies(16, 10000.0), l = rope_frequencies(16, 10000.0, lin),
                            d = rope_frequencies(16, 10000.0, dyn);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_DOUBLE_EQ(l[i], plain[i] / 4.0) << i;
    EXPECT_EQ(d[i], plain[i]) << i;
  }
  nn::LMConfig c = nn::HFConfig::from_json(arch_config("llama_linear").dump()).lm;
  EXPECT_XG_ERROR(nn::gguf_architecture(c), "GGUF export: RoPE scaling linear is not written");
}

// Gemma 2's defaults (transformers' Gemma2Config): caps 50 and 30, query_pre_attn_scalar 256,
// a window of 4096 on the even layers; null keys turn caps and window off; layer_types decides.
TEST(NnHfArch, Gemma2ConfigDefaultsAndNulls) {
  ojson j = arch_config("gemma2");
  for (const char* k : {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "sliding_window"})
    j.erase(k);
  j["max_position_embeddings"] = 8192;
  nn::HFConfig c = nn::HFConfig::from_json(j.dump());
  EXPECT_DOUBLE_EQ(std::get<nn::GQASpec>(c.lm.block.attention).scale, 1.0 / 16);
  EXPECT_DOUBLE_EQ(std::get<nn::GQASpec>(c.lm.block.attention).softcap, 50.0);
  EXPECT_DOUBLE_EQ(c.lm.final_logit_softcap, 30.0);
  EXPECT_EQ(c.lm.layer_windows, (std::vector<int64_t>{4096, 0, 4096}));
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["sliding_window"] = nullptr;
  c = nn::HFConfig::from_json(j.dump());
  EXPECT_EQ(std::get<nn::GQASpec>(c.lm.block.attention).softcap, 0.0);
  EXPECT_EQ(c.lm.final_logit_softcap, 0.0);
  EXPECT_TRUE(c.lm.layer_windows.empty());
  j["sliding_window"] = 16;
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
  EXPECT_EQ(nn::HFConfig::from_json(j.dump()).lm.layer_windows, (std::vector<int64_t>{0, 16, 16}));
  // Written back as read: the integer scalar, null caps, each layer's kind.
  const ojson out = ojson::parse(nn::HFConfig::from_json(j.dump()).to_json());
  EXPECT_EQ(out["query_pre_attn_scalar"], 256);
  EXPECT_TRUE(out["attn_logit_softcapping"].is_null());
  EXPECT_EQ(out["sliding_window"], 16);
  EXPECT_EQ(out["layer_types"], j["layer_types"]);
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
  // Phi-3's fused projections are written fused again, bit for bit.
  io::SafetensorsReader p3((dir / "phi3" / "model.safetensors").string());
  io::SafetensorsReader p3_given(arch_fixture("phi3") + "/model.safetensors");
  for (const char* n : {"model.layers.0.self_attn.qkv_proj.weight", "model.layers.1.mlp.gate_up_proj.weight"})
    EXPECT_TRUE(tensors_close(p3.read(n), p3_given.read(n), 0, 0)) << n;
  EXPECT_FALSE(p3.contains("model.layers.0.self_attn.q_proj.weight"));
  std::ifstream p3_config(dir / "phi3" / "config.json");
  EXPECT_EQ(ojson::parse(p3_config)["architectures"][0], "Phi3ForCausalLM");  // kept from the source folder
  std::ifstream g3_config(dir / "gemma3" / "config.json");
  const ojson g3 = ojson::parse(g3_config);
  EXPECT_EQ(g3["sliding_window_pattern"], 3);  // every 3rd layer global, as the fixture's
  EXPECT_EQ(g3["layer_types"], (ojson{"sliding_attention", "sliding_attention", "full_attention"}));
  // Gemma 2's post-attention norm is the sandwich's, its pre-FFN norm pre_feedforward_layernorm.
  io::SafetensorsReader g2((dir / "gemma2" / "model.safetensors").string());
  io::SafetensorsReader g2_given(arch_fixture("gemma2") + "/model.safetensors");
  for (const char* n : {"model.layers.0.post_attention_layernorm.weight", "model.layers.0.pre_feedforward_layernorm.weight",
                        "model.layers.2.post_feedforward_layernorm.weight"})
    EXPECT_TRUE(tensors_close(g2.read(n), g2_given.read(n), 0, 0)) << n;
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
  // A Llama-family model with a window on every layer is Mistral; a soft cap is Gemma 2's only.
  nn::LMConfig w;
  w.vocab_size = 40;
  w.block = nn::BlockConfig::llama(16, 2, 1);
  w.block.max_seq_len = 32;
  w.block.sliding_window = 3;
  EXPECT_EQ(nn::HFConfig::from_lm(w).architecture, nn::HFArchitecture::Mistral);
  EXPECT_EQ(nn::HFConfig::from_lm(w).lm.layer_windows, (std::vector<int64_t>{3, 3}));
  nn::DecoderLM windowed(w);
  nn::save_hf(windowed, (dir / "w").string());
  auto w_back = nn::load_hf((dir / "w").string());
  const Tensor long_tokens = test::ids({1, 5, 7, 30, 2, 9, 11, 3}, {1, 8});
  EXPECT_TRUE(tensors_close(arch_logits(*w_back, long_tokens), arch_logits(windowed, long_tokens), 1e-5, 1e-6));
  w.final_logit_softcap = 30;
  EXPECT_XG_ERROR(nn::HFConfig::from_lm(w), "the default score scale and no soft-capping (Gemma 2's)");
  w.final_logit_softcap = 0;
  w.layer_windows = {3, 2};
  EXPECT_XG_ERROR(nn::HFConfig::from_lm(w), "one sliding_window for the layers that have one");
  // The same inference names llama.cpp's architecture for a GGUF export.
  EXPECT_EQ(nn::gguf_architecture(g), "gpt2");
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
  EXPECT_XG_ERROR(arch_parse("phi3", [](ojson& j) { j["resid_pdrop"] = 0.1; }), "key 'resid_pdrop' = 0.1 is not supported");
  EXPECT_XG_ERROR(arch_parse("phi3", [](ojson& j) { j["rope_scaling"] = {{"type", "longrope"}}; }),
                  "key 'rope_scaling.type' = \"longrope\" is not supported");
  EXPECT_XG_ERROR(arch_parse("gemma3", [](ojson& j) { j["rope_local_base_freq"] = 0.0; }),
                  "key 'rope_local_base_freq' must be positive, got 0.0");
  EXPECT_XG_ERROR(arch_parse("gemma3", [](ojson& j) { j["sliding_window_pattern"] = 0; }),
                  "key 'sliding_window_pattern' must be a positive integer, got 0");
  EXPECT_XG_ERROR(arch_parse("gemma2", [](ojson& j) { j["query_pre_attn_scalar"] = 0; }),
                  "key 'query_pre_attn_scalar' must be positive, got 0");
  EXPECT_XG_ERROR(arch_parse("gemma2", [](ojson& j) { j["attn_logit_softcapping"] = -1.0; }),
                  "key 'attn_logit_softcapping' must be positive or null, got -1.0");
  EXPECT_XG_ERROR(arch_parse("gemma2", [](ojson& j) { j["layer_types"] = {"sliding_attention"}; }),
                  "key 'layer_types' must be a list of 3 layer types (num_hidden_layers)");
  // An xgrad config.json with a window per layer: one per layer.
  EXPECT_XG_ERROR(nn::LMConfig::from_json(R"({"vocab_size": 8, "n_layers": 2, "tie_embeddings": false, "final_norm": true,
                                             "dtype": "float32", "layer_windows": [4],
                                             "block": {"d_model": 8, "norm_position": "pre", "position": "rope",
                                             "rope_layout": "rotate_half", "rope_base": 10000.0, "max_seq_len": 16,
                                             "dropout": 0.0, "naming": "llama", "norm": {"kind": "rmsnorm", "eps": 1e-6},
                                             "attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1, "head_dim": 0,
                                             "qkv_bias": false, "out_bias": false, "qk_norm": false},
                                             "ffn": {"kind": "swiglu", "d_ff": 16, "bias": false, "naming": "upper"}}})",
                                          "x.json"),
                  "x.json: field 'layer_windows' must list one window per layer (2), got 1");
}

// A windowed GQA (fused kernel) equals full attention under the window's mask, and decoding
// token by token through the KV cache gives the full forward's outputs.
TEST(NnHfArch, SlidingWindowMatchesAnExplicitMaskAndTheCache) {
  for (double cap : {0.0, 2.0}) {
    SCOPED_TRACE(cap);
    nn::GQASpec spec;
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.softcap = cap;
    nn::SublayerContext ctx;
    ctx.d_model = 16;
    ctx.rope = true;
    ctx.max_seq_len = 32;
    ctx.sliding_window = 3;
    nn::GroupedQueryAttention windowed(spec, ctx);
    ctx.sliding_window = 0;
    nn::GroupedQueryAttention full(spec, ctx);
    test::randomize64(windowed, 3);
    full.to(kFloat64);
    full.load_state_dict(windowed.state_dict());
    const Tensor x = test::randn64({2, 7, 16}, 4);
    Tensor keep = zeros({1, 1, 7, 7}, kBool);
    for (int64_t i = 0; i < 7; ++i)
      for (int64_t j = 0; j < 7; ++j) keep.data<bool>()[i * 7 + j] = i - j < 3;
    NoGradGuard no_grad;
    const Tensor y = windowed(x, AttnMask::causal_mask());
    EXPECT_TRUE(tensors_close(y, full(x, AttnMask(keep, true)), 1e-12, 1e-12));
    nn::KVCache cache;
    for (int64_t t = 0; t < 7; ++t) {
      const Tensor step = windowed(narrow(x, 1, t, 1), AttnMask::causal_mask(), &cache);
      EXPECT_TRUE(tensors_close(step, narrow(y, 1, t, 1), 1e-12, 1e-12)) << "t=" << t;
    }
  }
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

// LoRA targets: the fused projections' HF names select their parts' modules.
TEST(NnHfArch, FusedProjectionNamesSelectTheirParts) {
  auto gpt2 = nn::load_hf(arch_fixture("gpt2"));
  std::vector<std::string> qkv = finetune::match_targets(*gpt2, "c_attn");
  std::sort(qkv.begin(), qkv.end());
  EXPECT_EQ(qkv, (std::vector<std::string>{"layers.0.attention.w_k", "layers.0.attention.w_q", "layers.0.attention.w_v",
                                           "layers.1.attention.w_k", "layers.1.attention.w_q", "layers.1.attention.w_v"}));
  EXPECT_EQ(finetune::match_targets(*gpt2, "c_proj,c_fc").size(), 6u);  // w_o, fc2; fc1 of both layers
  auto phi3 = nn::load_hf(arch_fixture("phi3"));
  EXPECT_EQ(finetune::match_targets(*phi3, "gate_up_proj").size(), 4u);  // W_gate, W_up of both layers
  EXPECT_EQ(finetune::match_targets(*phi3, "qkv_proj,o_proj").size(), 8u);
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

// out = cap * tanh(x / cap): values and a float64 gradient check.
TEST(NnHfArchGradcheck, Softcap) {
  const Tensor x = test::randn64({3, 4}, 12) * 6.0;
  const Tensor y = softcap(x, 5.0);
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_NEAR(y.data<double>()[i], 5.0 * std::tanh(x.data<double>()[i] / 5.0), 1e-15);
  EXPECT_GRADCHECK([](const V& v) { return softcap(v[0], 5.0); }, {test::randn64({3, 4}, 13)});
  EXPECT_XG_ERROR(softcap(x, 0.0), "softcap: cap must be a positive number, got 0");
}

// Gemma 2's attention, op by op: scale, soft cap, window and GQA grouping, in float64.
TEST(NnHfArchGradcheck, SoftcappedWindowedAttention) {
  nn::GQASpec spec;
  spec.n_heads = 2;
  spec.n_kv_heads = 1;
  spec.head_dim = 4;
  spec.scale = 0.3;
  spec.softcap = 1.5;
  nn::SublayerContext ctx;
  ctx.d_model = 6;
  ctx.rope = true;
  ctx.max_seq_len = 8;
  ctx.sliding_window = 2;
  nn::GroupedQueryAttention attn(spec, ctx);
  test::randomize64(attn, 14);
  EXPECT_GRADCHECK([&](const V& v) { return attn(v[0], AttnMask::causal_mask()); },
                   test::with_params(test::randn64({2, 4, 6}, 15), attn));
}

TEST(NnHfArchGradcheck, SandwichBlock) {
  nn::BlockConfig b = nn::BlockConfig::llama(8, 2, 1);
  b.norm_position = nn::NormPosition::Sandwich;
  b.norm = nn::UnitOffsetRMSNormSpec{1e-6};
  nn::GeGLUSpec ffn;
  ffn.d_ff = 8;
  b.ffn = ffn;
  b.max_seq_len = 8;
  nn::TransformerBlock blk(b);
  ASSERT_TRUE(blk.post_norm1() && blk.post_norm2());
  test::randomize64(blk, 16);
  EXPECT_GRADCHECK([&](const V& v) { return blk(v[0], AttnMask::causal_mask()).out; },
                   test::with_params(test::randn64({2, 3, 8}, 17), blk));
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

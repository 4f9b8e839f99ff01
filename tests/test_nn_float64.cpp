// Float64 modules with RoPE against PyTorch float64 references made from float64 weights
// (tests/fixtures/gen_nn_float64.py), to 1e-12: grouped-query attention in both RoPE layouts
// with and without QK-Norm, multi-latent attention, the LLaMA block, DecoderLM built from a
// float64 config, and a float64 DecoderLM through save_pretrained / load_pretrained. With RoPE
// tables computed in float32 and widened, these modules were off by 3e-9..4e-8 in their outputs
// and up to 4e-7 in their gradients; with float64 tables they agree to ~1e-14.
#include <filesystem>
#include <string>

#include "nn/attention.hpp"
#include "nn/block.hpp"
#include "nn/decoder.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using test::tensors_close;
using V = std::vector<Tensor>;

namespace {

constexpr double kRtol = 1e-12;
constexpr double kAtol = 1e-12;  // times max(1, max |expected|) (tensors_close)

// The float64 pass of a fixture_util.module_case case: loads PyTorch's parameters into
// `module` (unless it already holds them), runs fn on the case's inputs, backpropagates its
// upstream gradient, and checks the output, the input gradients and every parameter
// gradient to kRtol / kAtol. `module` must already be float64 and is not converted, so the
// check sees it as the path under test built it (to(kFloat64), a float64 config, a file).
void expect_f64_matches_torch(const std::string& case_name, Module& module, const test::Fn& fn,
                              bool load_params = true) {
  const TensorMap& fx = test::fixture("nn_float64");
  const std::string key = case_name + ".f64.";
  SCOPED_TRACE("nn_float64: " + key);
  ASSERT_TRUE(fx.count(key + "out")) << "fixture has no case " << key << " (rerun make_fixtures.py nn_float64)";
  for (const auto& [name, p] : module.named_parameters())
    ASSERT_EQ(p.dtype(), kFloat64) << "parameter " << name << " is not float64";
  module.zero_grad();
  if (load_params) {
    TensorMap params;
    const std::string pre = key + "param.";
    for (const auto& [k, v] : fx)
      if (k.compare(0, pre.size(), pre) == 0) params.emplace(k.substr(pre.size()), v);
    module.load_state_dict(params);
  }
  V inputs;
  for (int i = 0;; ++i) {
    auto it = fx.find(key + "in" + std::to_string(i));
    if (it == fx.end()) break;
    Tensor x = it->second.clone().detach();
    if (fx.count(key + "grad" + std::to_string(i))) x.requires_grad_(true);
    inputs.push_back(x);
  }
  Tensor out = fn(inputs);
  EXPECT_TRUE(tensors_close(out, fx.at(key + "out"), kRtol, kAtol)) << "output";
  ASSERT_TRUE(out.requires_grad());
  out.backward(fx.at(key + "upstream"));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto g = fx.find(key + "grad" + std::to_string(i));
    if (g == fx.end()) continue;
    EXPECT_TRUE(tensors_close(inputs[i].grad(), g->second, kRtol, kAtol)) << "gradient of input " << i;
  }
  int checked = 0;
  for (const auto& [name, p] : module.named_parameters()) {
    auto g = fx.find(key + "pgrad." + name);
    ASSERT_NE(g, fx.end()) << "fixture has no gradient of parameter " << name;
    Tensor actual = p.grad().defined() ? p.grad() : zeros_like(p);
    EXPECT_TRUE(tensors_close(actual, g->second, kRtol, kAtol)) << "gradient of parameter " << name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

GQASpec gqa_rope_spec(bool qk_norm) {
  GQASpec s;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.qk_norm = qk_norm;
  s.qkv_bias = qk_norm;  // the fixture's QK-Norm cases have q/k/v biases
  s.out_bias = true;
  return s;
}

// d_model and RoPE of the fixture's attention modules.
SublayerContext rope_ctx(int64_t d_model, RopeLayout layout) {
  SublayerContext c;
  c.d_model = d_model;
  c.rope = true;
  c.rope_layout = layout;
  c.max_seq_len = 4096;
  return c;
}

// The preset as it is, SwiGLU's default d_ff (256 for d_model 16) included.
BlockConfig llama_block() {
  BlockConfig c = BlockConfig::llama(16, 4, 2);
  c.max_seq_len = 64;
  return c;
}

// The fixture's decoders: vocab 11, 2 LLaMA blocks of d_model 16, final RMSNorm, float64.
LMConfig llama_lm64(bool tie) {
  LMConfig c;
  c.vocab_size = 11;
  c.n_layers = 2;
  c.block = llama_block();
  c.tie_embeddings = tie;
  c.final_norm = true;
  c.dtype = kFloat64;
  return c;
}

}  // namespace

TEST(NNFloat64Torch, GroupedQueryAttentionRope) {
  for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
    for (bool qk_norm : {false, true}) {
      const std::string name = std::string(qk_norm ? "gqa_qknorm_rope_" : "gqa_rope_") +
                               (layout == RopeLayout::RotateHalf ? "rotate_half" : "interleaved");
      GroupedQueryAttention gqa(gqa_rope_spec(qk_norm), rope_ctx(32, layout));
      gqa.to(kFloat64);
      expect_f64_matches_torch(name, gqa, [&](const V& x) { return gqa(x[0], AttnMask(x[1])); });
    }
  }
}

TEST(NNFloat64Torch, MultiLatentAttentionRope) {
  for (bool decoupled : {false, true}) {
    MLASpec o;
    o.n_heads = 4;
    o.head_dim = 4;
    o.latent_dim = 8;
    o.rope_dim = 4;
    o.decoupled_rope_key = decoupled;
    MultiLatentAttention mla(o, rope_ctx(16, RopeLayout::RotateHalf));
    mla.to(kFloat64);
    expect_f64_matches_torch(decoupled ? "mla_rope_decoupled" : "mla_rope", mla,
                             [&](const V& x) { return mla(x[0], AttnMask(x[1])); });
  }
}

TEST(NNFloat64Torch, LlamaBlock) {
  TransformerBlock block(llama_block());
  block.to(kFloat64);
  expect_f64_matches_torch("llama_block", block, [&](const V& x) { return block(x[0], AttnMask(x[1])).out; });
}

TEST(NNFloat64Torch, DecoderLMFromFloat64Config) {
  for (bool tie : {false, true}) {
    DecoderLM lm(llama_lm64(tie));  // built in float64 by its config, never converted here
    expect_f64_matches_torch(tie ? "llama_lm_tied" : "llama_lm", lm, [&](const V& x) { return lm(x[0]); });
  }
}

TEST(NNFloat64Torch, LoadPretrainedFloat64) {
  for (bool tie : {false, true}) {
    const std::string name = tie ? "llama_lm_tied" : "llama_lm";
    DecoderLM lm(llama_lm64(tie));
    TensorMap params;
    const std::string pre = name + ".f64.param.";
    for (const auto& [k, v] : test::fixture("nn_float64"))
      if (k.compare(0, pre.size(), pre) == 0) params.emplace(k.substr(pre.size()), v);
    lm.load_state_dict(params);
    const std::filesystem::path dir = test::fresh_test_dir(name);
    save_pretrained(lm, (dir / "model").string());
    std::shared_ptr<DecoderLM> back = load_pretrained((dir / "model").string());
    EXPECT_EQ(back->config().dtype, kFloat64);
    expect_f64_matches_torch(name, *back, [&](const V& x) { return (*back)(x[0]); }, /*load_params=*/false);
  }
}

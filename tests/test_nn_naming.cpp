// Tests for nn/naming.cpp: state dicts written by PyTorch under each naming scheme
// (tests/fixtures/gen_naming.py: the module trees of torch.nn.MultiheadAttention, tutorial
// code with RMSNorm.gamma, Meta's LLaMA and Hugging Face's LlamaForCausalLM) load strictly,
// give PyTorch's outputs in float64, and come back out under the same names.
#include "nn/naming.hpp"

#include "nn/block.hpp"
#include "nn/decoder.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;

namespace {

constexpr double kNamingRtol = 1e-12, kNamingAtol = 1e-12;

// The "<case>.sd." tensors of naming.safetensors under their PyTorch names.
TensorMap torch_state_dict(const std::string& name) {
  TensorMap out;
  const std::string prefix = name + ".sd.";
  for (const auto& [k, v] : test::fixture("naming"))
    if (k.rfind(prefix, 0) == 0) out.emplace(k.substr(prefix.size()), v);
  return out;
}

const Tensor& fixture_at(const std::string& key) { return test::fixture("naming").at(key); }

// state_dict(scheme) gives back exactly the names and values PyTorch wrote.
void expect_round_trip(const Module& m, const NamingScheme& scheme, const TensorMap& torch) {
  const TensorMap back = m.state_dict(scheme);
  std::vector<std::string> want, got;
  for (const auto& [k, v] : torch) want.push_back(k);
  for (const auto& [k, v] : back) got.push_back(k);
  ASSERT_EQ(got, want);
  for (const auto& [k, v] : torch) EXPECT_TRUE(test::tensors_close(back.at(k), v, 0, 0)) << k;
}

BlockConfig no_positions(BlockConfig c) {
  c.position = PositionKind::None;
  return c;
}

LMConfig llama_lm(RopeLayout layout) {
  LMConfig c;
  c.vocab_size = 50;
  c.n_layers = 2;
  c.block = BlockConfig::llama(16, 4, 2);
  std::get<SwiGLUSpec>(c.block.ffn).d_ff = 32;
  c.block.rope_layout = layout;
  c.block.max_seq_len = 16;
  c.dtype = kFloat64;
  return c;
}

}  // namespace

TEST(NnNamingTorch, TorchMultiheadAttentionTeachingBlock) {
  BlockConfig c = no_positions(BlockConfig::teaching(16, 4));
  std::get<MLPSpec>(c.ffn).d_ff = 32;
  TransformerBlock blk(c);
  blk.to(kFloat64);
  const TensorMap torch = torch_state_dict("torch_teaching");
  const NamingScheme& scheme = NamingScheme::get("torch");
  blk.load_state_dict(torch, scheme);
  EXPECT_TRUE(test::tensors_close(blk(fixture_at("torch_teaching.in0")).out, fixture_at("torch_teaching.out"), kNamingRtol,
                                  kNamingAtol));
  expect_round_trip(blk, scheme, torch);
}

TEST(NnNamingTorch, TutorialLLaMABlockWithGamma) {
  BlockConfig c = no_positions(BlockConfig::llama(16, 4, 4));
  MHASpec mha;  // torch.nn.MultiheadAttention: biases, no RoPE
  mha.n_heads = 4;
  c.attention = mha;
  std::get<SwiGLUSpec>(c.ffn).d_ff = 32;
  TransformerBlock blk(c);
  blk.to(kFloat64);
  const TensorMap torch = torch_state_dict("seed_llama_block");
  const NamingScheme& scheme = NamingScheme::get("gamma");
  blk.load_state_dict(torch, scheme);
  EXPECT_TRUE(test::tensors_close(blk(fixture_at("seed_llama_block.in0")).out, fixture_at("seed_llama_block.out"),
                                  kNamingRtol, kNamingAtol));
  expect_round_trip(blk, scheme, torch);
}

// Meta's checkpoints pair RoPE features as interleaved pairs, Hugging Face's as rotate-half
// halves: each loads into a model of either layout (the q/k rows are permuted on the way in
// and back on the way out) and gives PyTorch's logits.
TEST(NnNamingTorch, MetaLLaMA) {
  const TensorMap torch = torch_state_dict("meta_llama");
  const NamingScheme& scheme = NamingScheme::get("meta_llama");
  for (RopeLayout layout : {RopeLayout::Interleaved, RopeLayout::RotateHalf}) {
    SCOPED_TRACE(rope_layout_name(layout));
    DecoderLM lm(llama_lm(layout));
    lm.load_state_dict(torch, scheme);
    EXPECT_TRUE(test::tensors_close(lm(fixture_at("meta_llama.in0")), fixture_at("meta_llama.out"), kNamingRtol, kNamingAtol));
    expect_round_trip(lm, scheme, torch);
  }
}

TEST(NnNamingTorch, HuggingFaceLlama) {
  const TensorMap torch = torch_state_dict("hf_llama");
  const NamingScheme& scheme = NamingScheme::get("hf_llama");
  for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
    SCOPED_TRACE(rope_layout_name(layout));
    DecoderLM lm(llama_lm(layout));
    lm.load_state_dict(torch, scheme);
    EXPECT_TRUE(test::tensors_close(lm(fixture_at("hf_llama.in0")), fixture_at("hf_llama.out"), kNamingRtol, kNamingAtol));
    expect_round_trip(lm, scheme, torch);
  }
}

TEST(NnNaming, XgradSchemeIsTheIdentity) {
  DecoderLM lm(llama_lm(RopeLayout::Interleaved));
  const TensorMap own = lm.state_dict(), named = lm.state_dict(NamingScheme::get("xgrad"));
  ASSERT_EQ(own.size(), named.size());
  for (const auto& [k, v] : own) EXPECT_EQ(named.at(k).data<double>(), v.data<double>()) << k;  // shares storage
}

TEST(NnNamingErrors, WrongMissingAndUnknownNames) {
  DecoderLM lm(llama_lm(RopeLayout::RotateHalf));
  TensorMap sd = torch_state_dict("hf_llama");
  const NamingScheme& hf = NamingScheme::get("hf_llama");
  Tensor q = sd.at("model.layers.1.self_attn.q_proj.weight");
  sd.erase("model.layers.1.self_attn.q_proj.weight");
  sd.emplace("model.layers.1.self_attn.q_proj.weigth", q);
  EXPECT_XG_ERROR(lm.load_state_dict(sd, hf),
                  "load_state_dict (naming scheme 'hf_llama', DecoderLM): missing 'model.layers.1.self_attn.q_proj.weight' "
                  "(closest given: 'model.layers.1.self_attn.q_proj.weigth'); unexpected "
                  "'model.layers.1.self_attn.q_proj.weigth' (closest expected: 'model.layers.1.self_attn.q_proj.weight')");
  sd = torch_state_dict("hf_llama");
  sd.at("lm_head.weight") = zeros({49, 16}, kFloat64);
  EXPECT_XG_ERROR(lm.load_state_dict(sd, hf), "'lm_head.weight' has shape [49,16], the model needs [50,16]");
  // Nothing was loaded by the failed calls.
  EXPECT_FALSE(test::tensors_close(lm.output()->weight(), torch_state_dict("hf_llama").at("lm_head.weight"), 0, 0));
  EXPECT_XG_ERROR(NamingScheme::get("hf"), "unknown naming scheme 'hf' (known: gamma, hf_gemma2, hf_gpt2, hf_llama, hf_phi3, meta_llama, torch, xgrad)");
  // A complete table has no name for what the model has beyond it.
  LMConfig learned = llama_lm(RopeLayout::RotateHalf);
  learned.block.position = PositionKind::Learned;
  EXPECT_XG_ERROR(DecoderLM(learned).state_dict(hf), "naming scheme 'hf_llama': no name for the model's tensor 'pos.weight'");
  EXPECT_EQ(closest_name("norm.weigth", {"norm.bias", "norm.weight", "output.weight"}), "norm.weight");
  EXPECT_EQ(closest_name("x", {}), "");
}

TEST(NnNaming, RenameTensorAppliesTheRulesToOneName) {
  const NamingScheme& hf = NamingScheme::get("hf_llama");
  EXPECT_EQ(rename_tensor(hf, "layers.3.attention.w_q.weight", "Linear").value_or(""), "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(rename_tensor(hf, "layers.0.ffn.W_down.weight").value_or(""), "model.layers.0.mlp.down_proj.weight");
  EXPECT_FALSE(rename_tensor(hf, "layers.0.attention.w_q.lora_A.weight").has_value());  // complete: no name
  EXPECT_EQ(rename_tensor(NamingScheme::get("xgrad"), "a.b.weight").value_or(""), "a.b.weight");
  // A rule for one module kind only: RMSNorm's weight is gamma, any other weight keeps its name.
  const NamingScheme& gamma = NamingScheme::get("gamma");
  EXPECT_EQ(rename_tensor(gamma, "norm.weight", "RMSNorm").value_or(""), "norm.gamma");
  EXPECT_EQ(rename_tensor(gamma, "norm.weight", "LayerNorm").value_or(""), "norm.weight");
}

TEST(NnNaming, PackedNameIsTheFusedTensorHoldingAPart) {
  const NamingScheme& gpt2 = NamingScheme::get("hf_gpt2");
  EXPECT_EQ(packed_name(gpt2, "layers.2.attention.w_k.weight").value_or(""), "transformer.h.2.attn.c_attn.weight");
  EXPECT_EQ(packed_name(gpt2, "layers.0.attention.w_v.bias").value_or(""), "transformer.h.0.attn.c_attn.bias");
  EXPECT_FALSE(packed_name(gpt2, "layers.0.attention.w_o.weight").has_value());
  EXPECT_FALSE(packed_name(NamingScheme::get("hf_llama"), "layers.0.attention.w_q.weight").has_value());
}

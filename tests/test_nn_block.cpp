// Tests for nn/block.cpp (TransformerBlock): the teaching block (Post-Norm, LayerNorm, ReLU
// FFN), the LLaMA block (Pre-Norm, RMSNorm, RoPE attention, SwiGLU) and the other
// configurations (GQA + QK-Norm + RoPE, DeepNorm, MoE, MLA) against PyTorch with the same
// weights (tests/fixtures/gen_nn_block.py); float64 gradient checks of every configuration;
// child names; DeepNorm's constants and initialisation; dropout only in training; config
// errors.
#include "nn/block.hpp"

#include <cmath>

#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using xg::test::param_names;
using xg::test::randomize64;
using xg::test::with_params;
using test::expect_module_matches_torch;
using V = std::vector<Tensor>;

namespace {

// The configurations of the fixture script's Block cases.
BlockConfig gqa_qknorm_config() {
  BlockConfig c;
  c.d_model = 16;
  GQASpec gqa;
  gqa.n_heads = 4;
  gqa.n_kv_heads = 2;
  gqa.qk_norm = true;
  gqa.qkv_bias = gqa.out_bias = true;
  c.attention = gqa;
  c.norm_position = NormPosition::Pre;
  c.norm = RMSNormSpec{1e-6};
  c.position = PositionKind::RoPE;
  c.rope_layout = RopeLayout::RotateHalf;
  c.max_seq_len = 64;
  MLPSpec mlp;  // GELU
  mlp.d_ff = 24;
  mlp.naming = FFNNaming::UpDown;  // w_up, w_down
  c.ffn = mlp;
  c.naming = BlockNaming::Teaching;
  return c;
}

BlockConfig deepnorm_config() {
  BlockConfig c;
  c.d_model = 16;
  MHASpec mha;
  mha.n_heads = 4;
  c.attention = mha;
  c.norm_position = NormPosition::DeepNorm;
  c.n_layers = 6;
  c.norm = LayerNormSpec{1e-5};
  MLPSpec mlp;
  mlp.activation = Activation::ReLU;
  mlp.d_ff = 32;
  c.ffn = mlp;
  c.position = PositionKind::None;
  c.naming = BlockNaming::Teaching;
  return c;
}

BlockConfig moe_config() {
  BlockConfig c;
  c.d_model = 8;
  MHASpec mha;
  mha.n_heads = 2;
  c.attention = mha;
  c.norm_position = NormPosition::Pre;
  c.norm = RMSNormSpec{1e-6};
  MoESpec moe;
  moe.num_experts = 4;
  moe.top_k = 2;
  moe.aux_loss_coef = 0.01;
  c.ffn = moe;
  c.position = PositionKind::None;
  c.naming = BlockNaming::LLaMA;
  return c;
}

BlockConfig mla_config() {
  BlockConfig c;
  c.d_model = 16;
  MLASpec mla;
  mla.n_heads = 4;
  mla.head_dim = 4;
  mla.latent_dim = 8;
  mla.rope_dim = 4;
  c.attention = mla;
  c.position = PositionKind::RoPE;
  c.rope_layout = RopeLayout::RotateHalf;
  c.max_seq_len = 64;
  c.norm_position = NormPosition::Post;
  c.norm = RMSNormSpec{1e-6};
  SwiGLUSpec swiglu;
  swiglu.d_ff = 24;
  c.ffn = swiglu;
  c.naming = BlockNaming::LLaMA;
  return c;
}

}  // namespace

// --- against PyTorch ------------------------------------------------------------------------

TEST(NnBlockTorch, Teaching) {
  TransformerBlock blk(BlockConfig::teaching(8, 2));  // gen_nn_block.py's TransformerBlock_Old(8, 2)
  expect_module_matches_torch("nn_block", "teaching", blk,
                              [&](const V& x) { return blk(x[0], AttnMask(x[1])).out; });
  BlockConfig c = BlockConfig::teaching(8, 2);
  std::get<MLPSpec>(c.ffn).d_ff = 12;
  TransformerBlock nomask(c);  // no mask: what teaching code that drops its mask computes
  expect_module_matches_torch("nn_block", "teaching_nomask", nomask, [&](const V& x) { return nomask(x[0]).out; });
}

TEST(NnBlockTorch, LLaMA) {
  BlockConfig c = BlockConfig::llama(8, 2, 2);  // gen_nn_block.py's LLaMABlock(8, 2): d_ff = 256
  EXPECT_EQ(std::get<SwiGLUSpec>(c.ffn).d_ff, 0);
  TransformerBlock blk(c);
  expect_module_matches_torch("nn_block", "llama", blk,
                              [&](const V& x) { return blk(x[0], AttnMask::causal_mask()).out; });
  BlockConfig g = BlockConfig::llama(16, 4, 2);
  std::get<SwiGLUSpec>(g.ffn).d_ff = 24;
  TransformerBlock gqa(g);
  expect_module_matches_torch("nn_block", "llama_gqa", gqa,
                              [&](const V& x) { return gqa(x[0], AttnMask::causal_mask()).out; });
}

TEST(NnBlockTorch, GqaQkNormRope) {
  TransformerBlock blk(gqa_qknorm_config());
  expect_module_matches_torch("nn_block", "gqa_qknorm", blk, [&](const V& x) { return blk(x[0], AttnMask(x[1])).out; });
}

TEST(NnBlockTorch, DeepNorm) {
  TransformerBlock blk(deepnorm_config());
  expect_module_matches_torch("nn_block", "deepnorm", blk,
                              [&](const V& x) { return blk(x[0], AttnMask::causal_mask()).out; });
}

TEST(NnBlockTorch, MoE) {
  TransformerBlock blk(moe_config());
  expect_module_matches_torch("nn_block", "moe_out", blk, [&](const V& x) { return blk(x[0], AttnMask(x[1])).out; });
  expect_module_matches_torch("nn_block", "moe_aux", blk,
                              [&](const V& x) { return blk(x[0], AttnMask(x[1])).aux_loss; });
}

TEST(NnBlockTorch, MLAPostNorm) {
  TransformerBlock blk(mla_config());
  expect_module_matches_torch("nn_block", "mla_post", blk,
                              [&](const V& x) { return blk(x[0], AttnMask::causal_mask()).out; });
}

// --- names: state dicts of the PyTorch blocks load by name -----------------------------------

TEST(NnBlock, TeachingNames) {
  TransformerBlock blk(BlockConfig::teaching(8, 2));
  const std::vector<std::string> expected = {
      "attention.w_q.weight", "attention.w_q.bias", "attention.w_k.weight", "attention.w_k.bias",
      "attention.w_v.weight", "attention.w_v.bias", "attention.w_o.weight", "attention.w_o.bias",
      "ffn.fc1.weight",       "ffn.fc1.bias",       "ffn.fc2.weight",       "ffn.fc2.bias",
      "norm1.weight",         "norm1.bias",         "norm2.weight",         "norm2.bias"};
  EXPECT_EQ(param_names(blk), expected);
  EXPECT_EQ(blk.config().norm_position, NormPosition::Post);
  EXPECT_NE(dynamic_cast<MultiHeadAttention*>(blk.attention().get()), nullptr);
  EXPECT_EQ(dynamic_cast<FFN*>(blk.ffn().get())->d_ff(), 32);  // 4 * d_model
  EXPECT_NE(dynamic_cast<LayerNorm*>(blk.norm1().get()), nullptr);
  EXPECT_FALSE(blk(randn({1, 2, 8})).aux_loss.defined());  // no MoE, no auxiliary loss
}

TEST(NnBlock, LLaMANames) {
  TransformerBlock blk(BlockConfig::llama(8, 2, 1));
  const std::vector<std::string> expected = {"norm_attn.weight",     "attention.w_q.weight", "attention.w_k.weight",
                                             "attention.w_v.weight", "attention.w_o.weight", "norm_ffn.weight",
                                             "ffn.W_gate.weight",    "ffn.W_up.weight",      "ffn.W_down.weight"};
  EXPECT_EQ(param_names(blk), expected);
  auto* gqa = dynamic_cast<GroupedQueryAttention*>(blk.attention().get());
  ASSERT_NE(gqa, nullptr);
  EXPECT_EQ(gqa->n_kv_heads(), 1);  // MQA
  EXPECT_TRUE(gqa->context().rope);
  EXPECT_EQ(gqa->context().rope_layout, RopeLayout::Interleaved);
  EXPECT_EQ(dynamic_cast<SwiGLU*>(blk.ffn().get())->d_ff(), 256);  // 8/3 * 8 rounded up to 256
  EXPECT_NE(dynamic_cast<RMSNorm*>(blk.norm1().get()), nullptr);
  EXPECT_DOUBLE_EQ(dynamic_cast<RMSNorm*>(blk.norm1().get())->eps(), 1e-6);
}

TEST(NnBlock, MHAWithRopeIsGQAWithAllHeads) {
  BlockConfig c;
  c.d_model = 8;
  std::get<MHASpec>(c.attention).n_heads = 2;
  c.position = PositionKind::RoPE;
  TransformerBlock blk(c);
  auto* gqa = dynamic_cast<GroupedQueryAttention*>(blk.attention().get());
  ASSERT_NE(gqa, nullptr);
  EXPECT_EQ(gqa->n_kv_heads(), 2);
  EXPECT_TRUE(gqa->spec().out_bias);
  EXPECT_TRUE(gqa->w_q()->bias().defined());
}

// --- DeepNorm ------------------------------------------------------------------------------

TEST(NnBlock, DeepNormConstantsAndInit) {
  EXPECT_DOUBLE_EQ(TransformerBlock::deepnorm_alpha(6), std::pow(12.0, 0.25));
  EXPECT_DOUBLE_EQ(TransformerBlock::deepnorm_beta(6), std::pow(48.0, -0.25));
  BlockConfig c = deepnorm_config();
  c.d_model = 64;
  std::get<MLPSpec>(c.ffn).d_ff = 256;
  TransformerBlock blk(c);
  EXPECT_DOUBLE_EQ(blk.residual_scale(), std::pow(12.0, 0.25));
  const double beta = std::pow(48.0, -0.25);
  // xavier_normal_: std = gain sqrt(2 / (fan_in + fan_out))
  auto sample_std = [](const Tensor& w) {
    const std::vector<double> v = w.to_vector();
    double s = 0, s2 = 0;
    for (double x : v) s += x, s2 += x * x;
    const double n = static_cast<double>(v.size()), m = s / n;
    return std::sqrt(s2 / n - m * m);
  };
  auto* mha = dynamic_cast<MultiHeadAttention*>(blk.attention().get());
  ASSERT_NE(mha, nullptr);
  const double attn_std = std::sqrt(2.0 / 128);
  EXPECT_NEAR(sample_std(mha->w_q()->weight()), attn_std, 0.05 * attn_std);
  EXPECT_NEAR(sample_std(mha->w_k()->weight()), attn_std, 0.05 * attn_std);
  EXPECT_NEAR(sample_std(mha->w_v()->weight()), beta * attn_std, 0.05 * beta * attn_std);
  EXPECT_NEAR(sample_std(mha->w_o()->weight()), beta * attn_std, 0.05 * beta * attn_std);
  auto* ffn = dynamic_cast<FFN*>(blk.ffn().get());
  const double ffn_std = beta * std::sqrt(2.0 / (64 + 256));
  EXPECT_NEAR(sample_std(ffn->up()->weight()), ffn_std, 0.05 * ffn_std);
  EXPECT_NEAR(sample_std(ffn->down()->weight()), ffn_std, 0.05 * ffn_std);
  // Not DeepNorm: nn.Linear's default init (U(+-1/sqrt(64)): std 1/sqrt(3 * 64)).
  c.norm_position = NormPosition::Pre;
  TransformerBlock pre(c);
  EXPECT_DOUBLE_EQ(pre.residual_scale(), 1.0);
  auto* pre_mha = dynamic_cast<MultiHeadAttention*>(pre.attention().get());
  EXPECT_NEAR(sample_std(pre_mha->w_v()->weight()), 1 / std::sqrt(192.0), 0.05 / std::sqrt(192.0));
}

// --- gradient checks (float64, every parameter an input) ----------------------------------

namespace {

void gradcheck_block(const BlockConfig& c, uint64_t seed, bool aux = false) {
  TransformerBlock blk(c);
  randomize64(blk, seed);
  const Tensor x = test::randn64({2, 3, c.d_model}, seed + 1);
  EXPECT_GRADCHECK(
      [&](const V& v) {
        BlockOutput r = blk(v[0], AttnMask::causal_mask());
        return aux ? r.out + r.aux_loss * 10.0 : r.out;
      },
      with_params(x, blk));
}

}  // namespace

TEST(NnBlockGradcheck, Teaching) {
  BlockConfig c = BlockConfig::teaching(8, 2);
  std::get<MLPSpec>(c.ffn).d_ff = 12;
  gradcheck_block(c, 1);
}

TEST(NnBlockGradcheck, LLaMA) {
  BlockConfig c = BlockConfig::llama(8, 4, 2);
  std::get<SwiGLUSpec>(c.ffn).d_ff = 12;
  gradcheck_block(c, 2);
}

TEST(NnBlockGradcheck, GqaQkNorm) {
  BlockConfig c = gqa_qknorm_config();
  c.d_model = 8;
  std::get<GQASpec>(c.attention).n_heads = 2;
  std::get<GQASpec>(c.attention).n_kv_heads = 1;
  std::get<MLPSpec>(c.ffn).d_ff = 12;
  gradcheck_block(c, 3);
}

TEST(NnBlockGradcheck, DeepNorm) {
  BlockConfig c = deepnorm_config();
  c.d_model = 8;
  std::get<MHASpec>(c.attention).n_heads = 2;
  std::get<MLPSpec>(c.ffn).d_ff = 12;
  gradcheck_block(c, 4);
  c.norm = RMSNormSpec{1e-5};
  std::get<MLPSpec>(c.ffn).activation = Activation::GELU;
  gradcheck_block(c, 5);
}

TEST(NnBlockGradcheck, MoE) {
  BlockConfig c = moe_config();
  c.d_model = 6;
  std::get<MoESpec>(c.ffn).d_ff = 8;
  std::get<MoESpec>(c.ffn).num_experts = 3;
  gradcheck_block(c, 6, /*aux=*/true);
}

TEST(NnBlockGradcheck, MLA) {
  BlockConfig c = mla_config();
  c.d_model = 8;
  MLASpec& mla = std::get<MLASpec>(c.attention);
  mla.n_heads = 2;
  mla.head_dim = 4;
  mla.latent_dim = 6;
  mla.rope_dim = 2;
  std::get<SwiGLUSpec>(c.ffn).d_ff = 12;
  gradcheck_block(c, 7);
}

// --- modes ---------------------------------------------------------------------------------

TEST(NnBlock, DropoutOnlyInTraining) {
  BlockConfig c = BlockConfig::teaching(8, 2);
  c.dropout = 0.5;
  TransformerBlock drop(c);
  c.dropout = 0;
  TransformerBlock plain(c);
  plain.load_state_dict(drop.state_dict());
  const Tensor x = randn({2, 4, 8});
  drop.eval();
  EXPECT_TRUE(test::tensors_close(drop(x).out, plain(x).out, 0, 0));
  drop.train();
  EXPECT_FALSE(test::tensors_close(drop(x).out, plain(x).out, 1e-3, 1e-3));
}

// --- errors --------------------------------------------------------------------------------

TEST(NnBlockErrors, BadInput) {
  TransformerBlock blk(BlockConfig::teaching(8, 2));
  EXPECT_XG_ERROR(blk(randn({2, 5, 7})), "TransformerBlock(d_model=8, n_heads=2): expected x [B, T, 8], got [2,5,7]");
  EXPECT_XG_ERROR(blk(randn({5, 8})), "expected x [B, T, 8], got [5,8]");
}

TEST(NnBlockErrors, BadConfig) {
  BlockConfig c = BlockConfig::teaching(16, 3);
  EXPECT_XG_ERROR(TransformerBlock{c}, "TransformerBlock: field 'attention.n_heads' (3) must divide d_model (16)");
  c = BlockConfig::llama(16, 4, 3);
  EXPECT_XG_ERROR(TransformerBlock{c}, "field 'attention.n_kv_heads' (3) must divide n_heads (4)");
  c = moe_config();
  std::get<MoESpec>(c.ffn).top_k = 5;
  EXPECT_XG_ERROR(TransformerBlock{c}, "field 'ffn.top_k' must be in [1, num_experts = 4], got 5");
  c = mla_config();
  std::get<MLASpec>(c.attention).rope_dim = 3;
  EXPECT_XG_ERROR(TransformerBlock{c}, "field 'attention.rope_dim' must give an even RoPE part");
  c = BlockConfig::llama(16, 4, 2);
  std::get<SwiGLUSpec>(c.ffn).d_ff = -1;
  EXPECT_XG_ERROR(TransformerBlock{c}, "TransformerBlock: field 'ffn.d_ff' must be >= 0");
  c.ffn = SwiGLUSpec{};
  c.norm = RMSNormSpec{0.0};
  EXPECT_XG_ERROR(TransformerBlock{c}, "TransformerBlock: field 'norm.eps' must be positive, got 0");
  c = BlockConfig::teaching(8, 2);
  c.dropout = 1.0;
  EXPECT_XG_ERROR(TransformerBlock{c}, "field 'dropout' must be in [0, 1), got 1");
  c = BlockConfig::llama(12, 4, 4);  // head dim 3: RoPE needs pairs
  EXPECT_XG_ERROR(TransformerBlock{c}, "position = rope needs an even head dim, got 3");
}

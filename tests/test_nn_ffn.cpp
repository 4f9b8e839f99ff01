// Tests for nn/ffn.cpp: FFN, SwiGLU and MoE against plain-PyTorch classes with the same
// attribute names (tests/fixtures/gen_nn_ffn.py), float64 gradchecks, the parameter counts of
// a ReLU FFN and a SwiGLU FFN at d_model 512, errors.
#include "nn/ffn.hpp"

#include <algorithm>
#include <cstdio>

#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using xg::test::param_names;
using V = std::vector<Tensor>;

namespace {

// Sets every parameter to 0.5 * N(0, 1) in float64 (fixed per seed), so tests do not depend
// on the global generator's state.
void randomize64_per_tensor(Module& m, uint64_t seed) {
  m.to(kFloat64);
  for (auto& p : m.parameters()) p.copy_((test::randn64(p.shape(), seed++) * 0.5).detach());
}

// The block settings an FFN is built with: its width.
SublayerContext ffn_ctx(int64_t d_model) {
  SublayerContext c;
  c.d_model = d_model;
  return c;
}

// Smallest gap between the k-th and (k+1)-th router logit over the tokens of x.
double router_gap(const MoE& moe, const Tensor& x) {
  NoGradGuard ng;
  const int64_t E = moe.spec().num_experts, K = moe.spec().top_k;
  std::vector<double> l = moe.router()->forward(reshape(x, {-1, moe.d_model()})).to_vector();
  double gap = 1e30;
  for (std::size_t t = 0; t * E < l.size(); ++t) {
    std::vector<double> row(l.begin() + static_cast<std::ptrdiff_t>(t * E), l.begin() + static_cast<std::ptrdiff_t>((t + 1) * E));
    std::sort(row.rbegin(), row.rend());
    gap = std::min(gap, row[K - 1] - row[K]);
  }
  return gap;
}

}  // namespace

// --- values against PyTorch ---------------------------------------------------------------

TEST(NnFfnTorch, FFN) {
  FFN fc(8, 0, Activation::ReLU, 0.0, true, FFNNaming::FC);  // gen_nn_ffn.py's FeedForward_Old(8)
  EXPECT_EQ(fc.d_ff(), 32);
  test::expect_module_matches_torch("nn_ffn", "ffn_relu_fc", fc, [&](const V& x) { return fc(x[0]); });
  FFN relu(6, 24);  // w_up, w_down with the activation between the projections
  test::expect_module_matches_torch("nn_ffn", "ffn_relu", relu, [&](const V& x) { return relu(x[0]); });
  FFN gelu(6, 20, Activation::GELU);
  test::expect_module_matches_torch("nn_ffn", "ffn_gelu", gelu, [&](const V& x) { return gelu(x[0]); });
  FFN gelu_tanh(6, 20, Activation::GELUTanh);
  test::expect_module_matches_torch("nn_ffn", "ffn_gelu_tanh", gelu_tanh, [&](const V& x) { return gelu_tanh(x[0]); });
}

TEST(NnFfnTorch, SwiGLU) {
  SwiGLU def(8);  // gen_nn_ffn.py's FeedForward_SwiGLU(8): d_ff = 256
  EXPECT_EQ(def.d_ff(), 256);
  test::expect_module_matches_torch("nn_ffn", "swiglu_default", def, [&](const V& x) { return def(x[0]); });
  SwiGLU expl(8, 12);
  test::expect_module_matches_torch("nn_ffn", "swiglu_explicit", expl, [&](const V& x) { return expl(x[0]); });
  SwiGLU lower(6, 8, true, SwiGLUNaming::Lowercase);  // gen_nn_ffn.py's SwiGLUFNN(6, 8), with bias
  test::expect_module_matches_torch("nn_ffn", "swiglu_seed2", lower, [&](const V& x) { return lower(x[0]); });
}

TEST(NnFfnTorch, MoE) {
  MoESpec o;
  o.num_experts = 4;
  o.top_k = 2;
  MoE moe(o, ffn_ctx(6));  // gen_nn_ffn.py's MoE(6, 4, 2): nn.Sequential ReLU experts
  test::expect_module_matches_torch("nn_ffn", "moe_out", moe, [&](const V& x) { return moe.forward_with_aux(x[0]).out; });
  test::expect_module_matches_torch("nn_ffn", "moe_aux", moe, [&](const V& x) { return moe.forward_with_aux(x[0]).aux_loss; });

  MoESpec o1;  // top-1 of 5 experts over 3 tokens: unused experts get zero gradients
  o1.num_experts = 5;
  o1.top_k = 1;
  o1.aux_loss_coef = 0.1;
  MoE top1(o1, ffn_ctx(4));
  test::expect_module_matches_torch("nn_ffn", "moe_top1_out", top1, [&](const V& x) { return top1.forward_with_aux(x[0]).out; });
  test::expect_module_matches_torch("nn_ffn", "moe_top1_aux", top1, [&](const V& x) { return top1.forward_with_aux(x[0]).aux_loss; });

  MoESpec os;
  os.d_ff = 10;
  os.num_experts = 4;
  os.top_k = 3;
  os.expert = ExpertKind::SwiGLU;
  os.aux_loss_coef = 0.02;
  MoE sw(os, ffn_ctx(6));
  test::expect_module_matches_torch("nn_ffn", "moe_swiglu_out", sw, [&](const V& x) { return sw.forward_with_aux(x[0]).out; });
  test::expect_module_matches_torch("nn_ffn", "moe_swiglu_aux", sw, [&](const V& x) { return sw.forward_with_aux(x[0]).aux_loss; });
}

// --- names, so that state dicts of PyTorch classes with these names load ---------------------

TEST(NnFfn, ParameterNamesOfEachNaming) {
  EXPECT_EQ(param_names(FFN(4, 8)), (std::vector<std::string>{"w_up.weight", "w_up.bias", "w_down.weight", "w_down.bias"}));
  EXPECT_EQ(param_names(FFN(4, 8, Activation::ReLU, 0.0, false, FFNNaming::FC)),
            (std::vector<std::string>{"fc1.weight", "fc2.weight"}));
  EXPECT_EQ(param_names(SwiGLU(4, 8)), (std::vector<std::string>{"W_gate.weight", "W_up.weight", "W_down.weight"}));
  EXPECT_EQ(param_names(SwiGLU(4, 8, false, SwiGLUNaming::LLaMA)),
            (std::vector<std::string>{"w1.weight", "w3.weight", "w2.weight"}));
  MoESpec o;
  o.num_experts = 2;
  o.top_k = 1;
  EXPECT_EQ(param_names(MoE(o, ffn_ctx(4))),
            (std::vector<std::string>{"router.weight", "experts.0.0.weight", "experts.0.0.bias", "experts.0.2.weight",
                                      "experts.0.2.bias", "experts.1.0.weight", "experts.1.0.bias",
                                      "experts.1.2.weight", "experts.1.2.bias"}));
  o.expert = ExpertKind::SwiGLU;  // Mixtral's expert names w1 (gate), w3 (up), w2 (down)
  o.swiglu_naming = SwiGLUNaming::LLaMA;
  EXPECT_EQ(param_names(MoE(o, ffn_ctx(4))),
            (std::vector<std::string>{"router.weight", "experts.0.w1.weight", "experts.0.w3.weight", "experts.0.w2.weight",
                                      "experts.1.w1.weight", "experts.1.w3.weight", "experts.1.w2.weight"}));
  const std::string repr = FFN(4, 8, Activation::GELU, 0.1).repr();
  EXPECT_EQ(repr.rfind("FFN(d_model=4, d_ff=8, activation=gelu, dropout=0.1, bias=true\n", 0), 0u) << repr;
}

// --- parameter counts ----------------------------------------------------------------------

TEST(NnFfn, ReLUAndSwiGLUParameterCountsAt512) {
  // At d_model = 512: a ReLU FFN fc1(512x2048) + fc2(2048x512) with nn.Linear's biases holds
  // 2,099,712 parameters; a bias-free SwiGLU W_gate(512x1536) + W_up(512x1536) +
  // W_down(1536x512) holds 2,359,296, 1.12x as many (d_ff = 8/3 d rounded up to 256 keeps
  // the two close; Shazeer 2020).
  FFN relu(512, 0, Activation::ReLU, 0.0, true, FFNNaming::FC);
  SwiGLU swiglu(512);
  EXPECT_EQ(relu.d_ff(), 2048);
  EXPECT_EQ(swiglu.d_ff(), 1536);
  EXPECT_EQ(relu.num_parameters(), 2099712);
  EXPECT_EQ(swiglu.num_parameters(), 2359296);
  char ratio[16];
  std::snprintf(ratio, sizeof ratio, "%.2f", static_cast<double>(swiglu.num_parameters()) / relu.num_parameters());
  EXPECT_STREQ(ratio, "1.12");
}

TEST(NnFfn, DefaultDff) {
  EXPECT_EQ(SwiGLU::default_d_ff(512), 1536);    // int(1365.33) -> 1536
  EXPECT_EQ(SwiGLU::default_d_ff(4096), 11008);  // LLaMA-7B's intermediate size
  EXPECT_EQ(SwiGLU::default_d_ff(8), 256);
  EXPECT_EQ(SwiGLU::default_d_ff(768), 2048);    // exactly 8/3 * 768, already a multiple of 256
  EXPECT_EQ(SwiGLU::default_d_ff(512, 1), 1365);
  EXPECT_EQ(SwiGLU::default_d_ff(96, 1), 256);   // Python's int(8 / 3 * 96) is 256
  EXPECT_EQ(SwiGLU::default_d_ff(4096, 128), 11008);
  EXPECT_EQ(SwiGLU::default_d_ff(1000, 100), 2700);
}

// --- behaviour ---------------------------------------------------------------------------

TEST(NnFfn, DropoutOnlyInTraining) {
  FFN f(4, 16, Activation::ReLU, 0.5);
  randomize64_per_tensor(f, 3);
  f.up()->bias().fill_(1.0);  // every hidden unit active, so dropping any changes the output
  Tensor x = test::randn64({8, 4}, 1).detach();
  FFN plain(4, 16);
  plain.to(kFloat64);
  plain.load_state_dict(f.state_dict());
  f.eval();
  EXPECT_TRUE(test::tensors_close(f(x), plain(x), 0, 0));
  f.train();
  EXPECT_FALSE(test::tensors_close(f(x), plain(x), 1e-6, 1e-6));
}

TEST(NnFfn, MoEWithAllExpertsIsTheDenseSoftmaxMixture) {
  // top_k = num_experts: every token uses every expert, weighted by softmax over all logits,
  // and f_i = 1/E, so aux_loss = coef * E * sum_i P_i / E = coef.
  MoESpec o;
  o.d_ff = 6;
  o.num_experts = 3;
  o.top_k = 3;
  o.aux_loss_coef = 0.25;
  MoE moe(o, ffn_ctx(4));
  randomize64_per_tensor(moe, 10);
  Tensor x = test::randn64({2, 3, 4}, 2).detach();
  MoEOutput r = moe.forward_with_aux(x);
  Tensor p = softmax(moe.router()->forward(x), -1);  // [2, 3, E]
  Tensor dense = zeros({2, 3, 4}, kFloat64);
  for (int64_t e = 0; e < 3; ++e)
    dense = dense + narrow(p, -1, e, 1) * (*(*moe.experts())[static_cast<std::size_t>(e)])(x);
  EXPECT_TRUE(test::tensors_close(r.out, dense, 1e-12, 1e-12));
  EXPECT_NEAR(r.aux_loss.item(), 0.25, 1e-12);
  EXPECT_EQ(r.aux_loss.dim(), 0);
}

TEST(NnFfn, MoEAuxLossByHand) {
  // Router weights zero: all logits tie, topk picks experts 0 and 1 for every token
  // (f = [1/2, 1/2, 0, 0]) and P = [1/4] * 4: aux = coef * 4 * (1/2 * 1/4 * 2) = coef.
  // Router weights making expert 3 dominate with top-1: f = [0,0,0,1], P_3 = p:
  // aux = coef * 4 * p.
  MoESpec o;
  o.num_experts = 4;
  o.top_k = 2;
  o.aux_loss_coef = 0.5;
  MoE moe(o, ffn_ctx(2));
  moe.router()->weight().fill_(0.0);
  Tensor x = tensor({{1.0, 2.0}, {-1.0, 0.5}, {3.0, -2.0}});
  EXPECT_NEAR(moe.forward_with_aux(x).aux_loss.item(), 0.5, 1e-6);

  o.top_k = 1;
  MoE one(o, ffn_ctx(2));
  one.to(kFloat64);
  // logits = [0, 0, 0, 2 x_0]; with x_0 = 1 for every token: p_3 = e^2 / (3 + e^2)
  one.router()->weight().copy_(tensor({{0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}, {2.0, 0.0}}, kFloat64));
  Tensor x1 = tensor({{1.0, 5.0}, {1.0, -3.0}}, kFloat64);
  const double p3 = std::exp(2.0) / (3 + std::exp(2.0));
  EXPECT_NEAR(one.forward_with_aux(x1).aux_loss.item(), 0.5 * 4 * p3, 1e-12);
  // top-1: the weight is a softmax over one score, 1: out is expert 3's output
  EXPECT_TRUE(test::tensors_close(one.forward_with_aux(x1).out, (*(*one.experts())[3])(x1), 1e-12, 1e-12));
}

TEST(NnFfn, MoEKeepsTheInputShape) {
  MoESpec o;
  o.num_experts = 3;
  o.top_k = 2;
  MoE moe(o, ffn_ctx(3));
  EXPECT_EQ(moe.forward_with_aux(ones({2, 2, 5, 3})).out.shape(), (Shape{2, 2, 5, 3}));
  EXPECT_EQ(moe.forward_with_aux(ones({3})).out.shape(), (Shape{3}));
  EXPECT_EQ(moe.d_ff(), 12);  // 4 * d_model, the default for FFN experts
}

// --- float64 gradient checks -------------------------------------------------------------

TEST(NnFfnGradcheck, FFN) {
  for (Activation act : {Activation::ReLU, Activation::GELU, Activation::GELUTanh}) {
    SCOPED_TRACE(activation_name(act));
    FFN f(3, 5, act);
    randomize64_per_tensor(f, 20);
    EXPECT_GRADCHECK([&](const V& v) { return f(v[0]); },
                     {test::randn64({2, 2, 3}, 4), f.up()->weight(), f.up()->bias(), f.down()->weight(),
                      f.down()->bias()});
  }
}

TEST(NnFfnGradcheck, SwiGLU) {
  SwiGLU s(3, 4);
  randomize64_per_tensor(s, 30);
  EXPECT_GRADCHECK([&](const V& v) { return s(v[0]); },
                   {test::randn64({2, 2, 3}, 5), s.gate()->weight(), s.up()->weight(), s.down()->weight()});
  SwiGLU b(3, 4, true);
  randomize64_per_tensor(b, 40);
  EXPECT_GRADCHECK([&](const V& v) { return b(v[0]); },
                   {test::randn64({5, 3}, 6), b.gate()->bias(), b.up()->bias(), b.down()->bias()});
}

TEST(NnFfnGradcheck, MoE) {
  // Gradients through the selected experts, the softmax weights and the router; the top-k
  // selection is piecewise constant, so the inputs keep the k-th and (k+1)-th logits apart.
  for (ExpertKind kind : {ExpertKind::FFN, ExpertKind::SwiGLU}) {
    MoESpec o;
    o.d_ff = 4;
    o.num_experts = 3;
    o.top_k = 2;
    o.expert = kind;
    o.aux_loss_coef = 0.3;
    MoE moe(o, ffn_ctx(3));
    randomize64_per_tensor(moe, 50);
    Tensor x = test::randn64({2, 3, 3}, 7);
    ASSERT_GT(router_gap(moe, x), 1e-3);
    V inputs{x};
    for (auto& p : moe.parameters()) inputs.push_back(p);
    EXPECT_GRADCHECK([&](const V& v) { return moe.forward_with_aux(v[0]).out; }, inputs);
    EXPECT_GRADCHECK([&](const V& v) { return moe.forward_with_aux(v[0]).aux_loss; }, {x, moe.router()->weight()});
    // and both together, as training uses them
    EXPECT_GRADCHECK([&](const V& v) { MoEOutput r = moe.forward_with_aux(v[0]); return sum(r.out) * 0.1 + r.aux_loss; }, inputs);
  }
}

// --- errors ------------------------------------------------------------------------------

TEST(NnFfnErrors, WrongLastDim) {
  EXPECT_XG_ERROR(FFN(8, 32)(ones({2, 3, 7})), "FFN(d_model=8, d_ff=32): expected input [..., 8], got [2,3,7]");
  EXPECT_XG_ERROR(SwiGLU(8)(ones({2, 3, 7})), "SwiGLU(d_model=8, d_ff=256): expected input [..., 8], got [2,3,7]");
  MoESpec o;
  o.num_experts = 4;
  o.top_k = 2;
  EXPECT_XG_ERROR(MoE(o, ffn_ctx(6))(ones({2, 5})), "MoE(d_model=6, num_experts=4, top_k=2): expected input [..., 6], got [2,5]");
  EXPECT_XG_ERROR(FFN(8, 32)(scalar_tensor(1.0)), "FFN(d_model=8, d_ff=32): expected input [..., 8], got []");
}

TEST(NnFfnErrors, BadOptions) {
  MoESpec o;
  o.num_experts = 2;
  o.top_k = 3;
  EXPECT_XG_ERROR(MoE(o, ffn_ctx(4)), "MoE: top_k 3 exceeds num_experts 2");
  o.top_k = 0;
  EXPECT_XG_ERROR(MoE(o, ffn_ctx(4)), "MoE: top_k must be positive, got 0");
  o.top_k = 1;
  o.num_experts = 0;
  EXPECT_XG_ERROR(MoE(o, ffn_ctx(4)), "MoE: num_experts must be positive, got 0");
  EXPECT_XG_ERROR(MoE(MoESpec{}, ffn_ctx(0)), "MoE: d_model must be positive, got 0");
  EXPECT_XG_ERROR(FFN(0, 4), "FFN: d_model and d_ff must be positive, got 0 and 4");
  EXPECT_XG_ERROR(FFN(4, 8, Activation::ReLU, 1.5), "FFN: dropout must be in [0, 1], got 1.5");
  EXPECT_XG_ERROR(SwiGLU(4, -1), "SwiGLU: d_model must be positive and d_ff non-negative (0 = default), got 4 and -1");
  EXPECT_XG_ERROR(SwiGLU::default_d_ff(512, 0), "SwiGLU::default_d_ff: d_model and multiple_of must be positive");
}

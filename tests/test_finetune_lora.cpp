// Tests for finetune/lora.cpp: LoRALinear against PyTorch and by float64 gradcheck, output equal to
// the base at init, injection into a DecoderLM (targets, freezing, gradients), merge/unmerge,
// DisableAdapters, adapter scale, dropout, base state dicts, errors.
#include "finetune/lora.hpp"

#include <cstring>

#include "autograd/graph.hpp"
#include "losses/cross_entropy.hpp"
#include "nn/decoder.hpp"
#include "tests/lora_test_util.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::finetune;
using xg::test::bitwise_equal;
using xg::test::lora_cfg;
using xg::test::randomize_b;
using xg::test::tiny_llama;
using xg::test::param_names;
using xg::test::tiny_tokens;
using V = std::vector<Tensor>;

namespace {

std::shared_ptr<nn::Linear> lin_at(const nn::Module& m, const std::string& path) {
  for (const auto& [p, l] : linear_modules(m))
    if (p == path) return l;
  throw Error("no Linear " + path);
}

}  // namespace

TEST(FinetuneLora, ConfigScaling) {
  EXPECT_DOUBLE_EQ(lora_cfg(4, 8).scaling(), 2.0);
  EXPECT_DOUBLE_EQ(lora_cfg(4, 8, "q", true).scaling(), 4.0);  // alpha / sqrt(r)
  EXPECT_XG_ERROR(lora_cfg(0, 8).validate(), "r must be at least 1, got 0");
  EXPECT_XG_ERROR(lora_cfg(2, 8, "q", false, 1.0).validate(), "lora_dropout must be in [0, 1), got 1");
  EXPECT_XG_ERROR(lora_cfg(2, 8, "").validate(), "target modules must not be empty");
}

TEST(FinetuneLora, InitOutputEqualsBaseBitwise) {
  Generator gen(1);
  LoRALinear lin(6, 5, lora_cfg(3, 6), gen);
  EXPECT_EQ(param_names(lin), (std::vector<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"}));
  EXPECT_EQ(lin.lora().A().shape(), (Shape{3, 6}));
  EXPECT_EQ(lin.lora().B().shape(), (Shape{5, 3}));
  EXPECT_EQ(lin.lora().B().to_vector(), std::vector<double>(15, 0.0));
  // A: kaiming_uniform(a = sqrt 5) = U(+-1/sqrt(in)), not all zero.
  double amax = 0;
  for (double v : lin.lora().A().to_vector()) amax = std::max(amax, std::abs(v));
  EXPECT_GT(amax, 0.0);
  EXPECT_LE(amax, 1.0 / std::sqrt(6.0));
  EXPECT_FALSE(lin.weight().requires_grad());
  EXPECT_FALSE(lin.bias().requires_grad());
  EXPECT_TRUE(lin.lora().A().requires_grad());
  Tensor x = randn({2, 4, 6});
  EXPECT_TRUE(bitwise_equal(lin(x), linear(x, lin.weight(), lin.bias())));

  // Injected into a model: the logits are bit-for-bit the base model's.
  nn::DecoderLM model(tiny_llama());
  Tensor t = tiny_tokens(2);
  Tensor before = model(t);
  Generator g2(3);
  inject_lora(model, lora_cfg(2, 4, "q,k,v,o,gate,up,down"), g2);
  EXPECT_TRUE(bitwise_equal(model(t), before));
}

TEST(FinetuneLora, MatchesTorch) {
  Generator gen(0);
  LoRALinear lin(5, 4, lora_cfg(3, 6.0), gen);  // scaling 2
  test::expect_module_matches_torch("lora", "lora", lin, [&](const V& x) { return lin(x[0]); });
  // The frozen base weight gets no gradient; x does (through W and through the adapter).
  EXPECT_FALSE(lin.weight().grad().defined());
  EXPECT_FALSE(lin.bias().grad().defined());
  LoRALinear rs(6, 3, lora_cfg(4, 3.0, "q", true), gen, /*bias=*/false);  // scaling 1.5
  test::expect_module_matches_torch("lora", "lora_rslora_nobias", rs, [&](const V& x) { return rs(x[0]); });
}

TEST(FinetuneLora, GradcheckFloat64) {
  Generator gen(4);
  LoRALinear lin(4, 3, lora_cfg(2, 3.0), gen);
  lin.to(kFloat64);
  {
    NoGradGuard ng;
    Tensor B = lin.lora().B();
    B.copy_(test::randn64({3, 2}, 5).detach());
  }
  EXPECT_GRADCHECK([&](const V& v) { return lin(v[0]); }, {test::randn64({2, 3, 4}, 6), lin.lora().A(), lin.lora().B()});
  LoRALinear rs(3, 5, lora_cfg(3, 2.0, "q", true), gen, false, kFloat64);
  {
    NoGradGuard ng;
    Tensor B = rs.lora().B();
    B.copy_(test::randn64({5, 3}, 7).detach());
  }
  EXPECT_GRADCHECK([&](const V& v) { return rs(v[0]); }, {test::randn64({4, 3}, 8), rs.lora().A(), rs.lora().B()});
}

TEST(FinetuneLora, CopyOfLinearKeepsItsOutput) {
  nn::Linear base(4, 3);
  Generator gen(9);
  LoRALinear lin(base, lora_cfg(2, 2, /*targets=*/""), gen);  // targets matter only for injection
  Tensor x = randn({5, 4});
  EXPECT_TRUE(bitwise_equal(lin(x), base(x)));
  EXPECT_TRUE(base.weight().requires_grad());  // the original is untouched
  EXPECT_EQ(base.adapter(), nullptr);
}

TEST(FinetuneLora, InjectShortNamesIntoDecoder) {
  nn::DecoderLM model(tiny_llama());
  Generator gen(1);
  auto paths = inject_lora(model, lora_cfg(2, 4, "q,k,v,o,gate,up,down"), gen);
  std::vector<std::string> want;
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"attention.w_q", "attention.w_k", "attention.w_v", "attention.w_o", "ffn.W_gate",
                          "ffn.W_up", "ffn.W_down"})
      want.push_back(str_cat("layers.", l, ".", n));
  EXPECT_EQ(paths, want);
  // Adapters sit under the Linear's name; base names are unchanged.
  auto names = param_names(model);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("layers.0.attention.w_q.weight"));
  EXPECT_TRUE(has("layers.0.attention.w_q.lora_A.weight"));
  EXPECT_TRUE(has("layers.1.ffn.W_down.lora_B.weight"));
  EXPECT_FALSE(has("output.lora_A.weight"));
  // Only A and B are trainable, and lora_parameters is exactly them.
  auto lp = named_lora_parameters(model);
  EXPECT_EQ(lp.size(), 2 * want.size());
  std::vector<std::string> trainable;
  for (const auto& [n, p] : model.named_parameters())
    if (p.requires_grad()) trainable.push_back(n);
  std::vector<std::string> lnames;
  for (const auto& [n, p] : lp) lnames.push_back(n);
  std::sort(trainable.begin(), trainable.end());
  std::sort(lnames.begin(), lnames.end());
  EXPECT_EQ(trainable, lnames);
  EXPECT_EQ(lora_parameters(model).size(), lp.size());
}

TEST(FinetuneLora, GradientsReachOnlyAdapters) {
  nn::DecoderLM model(tiny_llama());
  Generator gen(2);
  inject_lora(model, lora_cfg(2, 4, "q,v,down"), gen);
  randomize_b(model, 3);
  Tensor t = tiny_tokens(4);
  Tensor logits = model(t);
  Tensor loss = losses::cross_entropy(logits.reshape({10, 11}), tiny_tokens(5).reshape({10}));
  loss.backward();
  int adapters = 0;
  for (const auto& [n, p] : model.named_parameters()) {
    const bool is_lora = n.find(".lora_A.") != std::string::npos || n.find(".lora_B.") != std::string::npos;
    if (!is_lora) {
      EXPECT_FALSE(p.grad().defined()) << n << " is frozen but got a gradient";
      continue;
    }
    ++adapters;
    ASSERT_TRUE(p.grad().defined()) << n;
    double norm = 0;
    for (double v : p.grad().to_vector()) norm += v * v;
    EXPECT_GT(norm, 0.0) << n;
  }
  EXPECT_EQ(adapters, 2 * 2 * 3);
}

TEST(FinetuneLora, RegexTargetsFullMatchThePath) {
  nn::DecoderLM model(tiny_llama());
  Generator gen(1);
  EXPECT_EQ(match_targets(model, R"(layers\.0\.attention\.w_(q|v))"),
            (std::vector<std::string>{"layers.0.attention.w_q", "layers.0.attention.w_v"}));
  EXPECT_EQ(match_targets(model, ".*w_q"), (std::vector<std::string>{"layers.0.attention.w_q", "layers.1.attention.w_q"}));
  // A full match: a pattern for part of the path selects nothing.
  EXPECT_XG_ERROR(match_targets(model, R"(attention\.w_q)"), "target regex 'attention\\.w_q' matches no Linear module");
  EXPECT_XG_ERROR(match_targets(model, "W_(q"), "invalid target regex 'W_(q'");
  // List entries with dots match a path suffix (PEFT's rule); full names work as entries.
  EXPECT_EQ(match_targets(model, "1.attention.w_k,output"),
            (std::vector<std::string>{"layers.1.attention.w_k", "output"}));
  EXPECT_TRUE(targets_are_regex(".*w_q"));
  EXPECT_FALSE(targets_are_regex("q,v,layers.0.ffn.W_up"));
}

TEST(FinetuneLora, ShortNamesCoverTheRepoNamings) {
  nn::LMConfig c;
  c.vocab_size = 11;
  c.n_layers = 1;
  c.block.d_model = 8;
  std::get<nn::MHASpec>(c.block.attention).n_heads = 2;
  std::get<nn::MLPSpec>(c.block.ffn).d_ff = 16;  // teaching defaults: MHA w_q.., GELU FFN fc1, fc2
  c.block.max_seq_len = 8;
  nn::DecoderLM model(c);
  EXPECT_EQ(match_targets(model, "q,o,up,down"),
            (std::vector<std::string>{"layers.0.attention.w_q", "layers.0.attention.w_o", "layers.0.ffn.fc1",
                                      "layers.0.ffn.fc2"}));
  EXPECT_EQ(peft_target_names(model, "q,o,up,down"), (std::vector<std::string>{"fc1", "fc2", "w_o", "w_q"}));
  // Hugging Face's projection names stand for the short names.
  EXPECT_EQ(match_targets(model, "q_proj,o_proj,up_proj,down_proj"), match_targets(model, "q,o,up,down"));
  EXPECT_EQ(peft_target_names(model, "q_proj,o_proj,up_proj,down_proj"), (std::vector<std::string>{"fc1", "fc2", "w_o", "w_q"}));
  EXPECT_XG_ERROR(match_targets(model, "gate_proj"), "target module 'gate_proj' matches no Linear module");
  // This model has no gate projection: naming it is an error, not a silent no-op.
  EXPECT_XG_ERROR(match_targets(model, "q,gate"), "target module 'gate' matches no Linear module");
}

TEST(FinetuneLora, UnknownTargetListsModulesAndChangesNothing) {
  nn::DecoderLM model(tiny_llama(1));
  Generator gen(1);
  EXPECT_XG_ERROR(inject_lora(model, lora_cfg(2, 4, "q,foo"), gen),
                  "inject_lora: target module 'foo' matches no Linear module in the model; available Linear "
                  "modules: layers.0.attention.w_q, layers.0.attention.w_k, layers.0.attention.w_v, "
                  "layers.0.attention.w_o, layers.0.ffn.W_gate, layers.0.ffn.W_up, layers.0.ffn.W_down, output");
  EXPECT_TRUE(lora_adapters(model).empty());
  for (const auto& [n, p] : model.named_parameters()) EXPECT_TRUE(p.requires_grad()) << n;
  // Twice on the same module: an error naming it.
  inject_lora(model, lora_cfg(2, 4, "q"), gen);
  EXPECT_XG_ERROR(inject_lora(model, lora_cfg(2, 4, "q,v"), gen), "module 'layers.0.attention.w_q' already has an adapter");
  EXPECT_EQ(lora_adapters(model).size(), 1u);
  EXPECT_XG_ERROR(LoRAAdapter::attach(*model.output(), lora_cfg(0, 4), gen), "LoRA: r must be at least 1");
  EXPECT_XG_ERROR(LoRAAdapter::attach(*lin_at(model, "layers.0.attention.w_q"), lora_cfg(2, 4), gen),
                  "already has an adapter");
}

TEST(FinetuneLora, MergeEqualsAdapterForwardAndUnmergeRestores) {
  // Against PyTorch's merged weight, float64.
  Generator gen(0);
  LoRALinear lin(5, 4, lora_cfg(3, 6.0), gen);
  lin.to(kFloat64);
  TensorMap params;
  for (const char* k : {"weight", "bias", "lora_A.weight", "lora_B.weight"})
    params.emplace(k, test::fixture("lora").at(std::string("lora.f64.param.") + k));
  lin.load_state_dict(params);
  Tensor W0 = lin.weight().clone().detach();
  Tensor x = test::randn64({3, 5}, 1).detach();
  Tensor y_adapter = lin(x);
  lin.lora().merge();
  EXPECT_TRUE(lin.lora().merged());
  EXPECT_TRUE(test::tensors_close(lin.weight(), test::fixture("lora").at("lora.merged"), 1e-12, 1e-12));
  EXPECT_TRUE(test::tensors_close(lin(x), y_adapter, 1e-12, 1e-12));
  EXPECT_XG_ERROR(lin.lora().merge(), "already merged");
  lin.lora().unmerge();
  EXPECT_TRUE(test::tensors_close(lin.weight(), W0, 1e-14, 1e-14));

  // A whole float32 model: merged logits equal adapter logits within 1e-5.
  nn::DecoderLM model(tiny_llama());
  Generator g2(5);
  inject_lora(model, lora_cfg(4, 8, "q,k,v,o,gate,up,down"), g2);
  randomize_b(model, 6);
  Tensor W = lin_at(model, "layers.0.attention.w_q")->weight();
  Tensor W_before = W.clone().detach();
  Tensor t = tiny_tokens(7);
  Tensor adapter_logits = model(t);
  merge(model);
  Tensor merged_logits = model(t);
  EXPECT_TRUE(test::tensors_close(merged_logits, adapter_logits, 0, 1e-5));
  EXPECT_FALSE(bitwise_equal(W, W_before));  // the weight did change
  unmerge(model);
  EXPECT_TRUE(test::tensors_close(W, W_before, 0, 1e-6));
  EXPECT_TRUE(test::tensors_close(model(t), adapter_logits, 0, 1e-6));
}

TEST(FinetuneLora, DisableAdaptersGivesTheBaseModel) {
  nn::DecoderLM model(tiny_llama());
  Tensor t = tiny_tokens(8);
  Tensor base_logits = model(t);
  Generator gen(1);
  inject_lora(model, lora_cfg(2, 4, "q,v,up"), gen);
  randomize_b(model, 2);
  Tensor lora_logits = model(t);
  EXPECT_FALSE(test::tensors_close(lora_logits, base_logits, 0, 1e-4));
  {
    DisableAdapters guard(model);
    EXPECT_TRUE(bitwise_equal(model(t), base_logits));
  }
  EXPECT_TRUE(bitwise_equal(model(t), lora_logits));
  merge(model);
  EXPECT_XG_ERROR(DisableAdapters guard(model), "is merged into the weight");
}

TEST(FinetuneLora, AdapterScale) {
  Generator gen(3);
  LoRALinear lin(4, 3, lora_cfg(2, 4), gen, true, kFloat64);
  {
    NoGradGuard ng;
    Tensor B = lin.lora().B();
    B.copy_(test::randn64({3, 2}, 4).detach());
  }
  Tensor x = test::randn64({5, 4}, 5).detach();
  Tensor base = linear(x, lin.weight(), lin.bias());
  Tensor d1 = lin(x) - base;
  set_adapter_scale(lin, 2.5);
  EXPECT_DOUBLE_EQ(lin.lora().scaling(), 5.0);
  EXPECT_TRUE(test::tensors_close(lin(x) - base, d1 * 2.5, 1e-12, 1e-12));
  set_adapter_scale(lin, 0);
  EXPECT_TRUE(bitwise_equal(lin(x), base));
  nn::Linear plain(2, 2);
  EXPECT_XG_ERROR(set_adapter_scale(plain, 1), "set_adapter_scale: the model has no LoRA adapters");
  EXPECT_XG_ERROR(merge(plain), "merge: the model has no LoRA adapters");
}

TEST(FinetuneLora, DropoutOnlyInTraining) {
  Generator gen(3);
  LoRALinear drop(6, 4, lora_cfg(3, 3, "q", false, 0.5), gen);
  LoRALinear none(6, 4, lora_cfg(3, 3), gen);
  none.load_state_dict(drop.state_dict());
  {
    NoGradGuard ng;
    Tensor B = drop.lora().B();
    B.copy_(randn(B.shape()));
    Tensor B2 = none.lora().B();
    B2.copy_(B);
  }
  Tensor x = randn({8, 6});
  EXPECT_FALSE(test::tensors_close(drop(x), none(x), 0, 1e-6));  // training: dropout acts
  drop.eval();
  EXPECT_TRUE(bitwise_equal(drop(x), none(x)));  // eval: identity
}

// The delta is one op: with dropout in training, the gradients of x, A and B are those of
// x * mask / (1 - p) through both products (each call re-seeds, so every evaluation of the
// gradcheck draws the same mask), and dropped inputs get no gradient.
TEST(FinetuneLora, GradcheckWithDropoutInTraining) {
  Generator gen(9);
  LoRALinear lin(6, 5, lora_cfg(3, 6.0, "q", false, 0.4), gen);
  lin.to(kFloat64);
  {
    NoGradGuard ng;
    Tensor B = lin.lora().B();
    B.copy_(test::randn64({5, 3}, 10).detach());
  }
  auto fn = [&](const V& v) {
    manual_seed(11);
    return lin(v[0]);
  };
  const Tensor x = test::randn64({2, 4, 6}, 12);
  EXPECT_GRADCHECK(fn, {x, lin.lora().A(), lin.lora().B()});
  // The same draw as xg::dropout's: y = x W^T + b + s (dropout(x) A^T) B^T, ops by ops.
  manual_seed(11);
  const Tensor y = lin(x);
  manual_seed(11);
  const Tensor h = dropout(x, 0.4, true);
  const Tensor want = linear(x, lin.weight(), lin.bias()) + linear(linear(h, lin.lora().A()), lin.lora().B()) * 2.0;
  EXPECT_TRUE(test::tensors_close(y, want, 1e-12, 1e-12));
}

// An adapted Linear is one op: its graph keeps its output, the keep-mask (1 byte per input)
// and the rank-r product, not the base output and the delta beside their sum (nor the
// dropped-out input, a float mask, the full-width product and its scaled copy).
TEST(FinetuneLora, GraphKeepsOnlyTheOutputTheMaskAndTheRankRProduct) {
  Generator gen(13);
  LoRALinear lin(64, 64, lora_cfg(4, 8.0, "q", false, 0.1), gen);
  const Tensor x = randn({4096, 64}).requires_grad_();  // 1 MB
  // A buffer that an earlier test left cached may serve a request from the next size class up
  // (a 256 KB mask in a 320 KB buffer), which allocated_bytes() counts: start from none.
  empty_cache();
  const std::size_t before = allocated_bytes();
  const Tensor y = lin(x);
  // y: 1 MB; the bool mask 256 KB; u [4096, 4] is below the 128 KB that allocated_bytes()
  // counts.
  EXPECT_LE(allocated_bytes() - before, std::size_t{1280} << 10);
  y.sum().backward();
  EXPECT_TRUE(lin.lora().A().grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

// The fused op's gradients of a base weight and bias that train too (a LoRALinear whose base
// is unfrozen), with and without dropout; the value equals the separate ops'.
TEST(FinetuneLora, GradcheckWithATrainableBase) {
  for (double p : {0.0, 0.3}) {
    Generator gen(21);
    LoRALinear lin(5, 4, lora_cfg(2, 4.0, "q", false, p), gen, /*bias=*/true, kFloat64);
    {
      NoGradGuard ng;
      Tensor B = lin.lora().B();
      B.copy_(test::randn64({4, 2}, 22).detach());
    }
    lin.weight().requires_grad_(true);
    lin.bias().requires_grad_(true);
    auto fn = [&](const V& v) {
      manual_seed(23);
      return lin(v[0]);
    };
    const Tensor x = test::randn64({3, 2, 5}, 24);
    EXPECT_GRADCHECK(fn, {x, lin.weight(), lin.bias(), lin.lora().A(), lin.lora().B()});
    manual_seed(23);
    const Tensor y = lin(x);
    manual_seed(23);
    const Tensor h = p > 0 ? dropout(x, p, true) : x;
    const Tensor want = linear(x, lin.weight(), lin.bias()) + linear(linear(h, lin.lora().A()), lin.lora().B()) * 2.0;
    EXPECT_TRUE(test::tensors_close(y, want, 1e-12, 1e-12)) << "p " << p;
  }
}

TEST(FinetuneLora, BaseStateDictLoadsIntoInjectedModel) {
  nn::DecoderLM base(tiny_llama(1));
  TensorMap sd = base.state_dict();
  nn::DecoderLM model(tiny_llama(1));
  Generator gen(1);
  inject_lora(model, lora_cfg(2, 4, "q"), gen);
  EXPECT_XG_ERROR(model.load_state_dict(sd), "missing keys: layers.0.attention.w_q.lora_A.weight");
  model.load_state_dict(sd, /*strict=*/false);
  Tensor t = tiny_tokens(1);
  EXPECT_TRUE(bitwise_equal(model(t), base(t)));
}

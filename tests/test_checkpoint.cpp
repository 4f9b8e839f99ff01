// autograd/checkpoint.cpp and the gradient checkpointing built on it (DecoderLM's option, the
// training loop's --gradient-checkpointing): gradient checks through a checkpointed function
// and a checkpointed model, the same gradients as without (dropout replayed), LoRA, the loop
// and both trainers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "tests/cli_run.hpp"
#include "tests/tiny_base.hpp"
#include "tests/torch_fixture.hpp"
#include "xgrad.hpp"

using namespace xg;
namespace fs = std::filesystem;

namespace xg::checkpoint_test {

using V = std::vector<Tensor>;

Tensor param64(const Shape& shape, uint64_t seed) { return test::randn64(shape, seed); }

// out = dropout(tanh(x w + b), p), aux = 0.1 mean(out^2): two outputs, randomness inside.
V dense_tanh(const Tensor& x, const Tensor& w, const Tensor& b, double p) {
  Tensor out = dropout(tanh(matmul(x, w) + b), p, true);
  return {out, mean(out * out) * 0.1};
}

// Gradients of sum(out * u) (+ aux) with respect to `wrt`, from the same default-generator seed.
V grads_of(const std::function<V()>& run, const Tensor& u, const V& wrt, bool with_aux) {
  manual_seed(5);
  V out = run();
  Tensor loss = sum(out[0] * u);
  if (with_aux) loss = loss + out[1];
  return grad({loss}, wrt, {}, false, true);
}

// v[0] w, counting its calls.
CheckpointFn counted_matmul(const Tensor& w, int& calls) {
  return [w, &calls](const V& v) {
    ++calls;
    return V{matmul(v[0], w)};
  };
}

void expect_bitwise(const V& a, const V& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::tensors_close(a[i], b[i], 0, 0)) << "tensor " << i;
}

Tensor tokens_of(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  Generator gen(seed);
  return randint(0, vocab, {B, T}, &gen);
}

// Small models of the block kinds, with dropout on the embeddings, sublayers and attention
// weights so that every recompute must replay the same masks.
enum class Kind { LLaMA, Teaching, MoE, MLA };

nn::LMConfig lm_config(Kind kind, double dropout) {
  nn::LMConfig c;
  c.vocab_size = 11;
  c.n_layers = 2;
  if (kind == Kind::LLaMA) {
    c.block = nn::BlockConfig::llama(16, 4, 2);
    std::get<nn::SwiGLUSpec>(c.block.ffn).d_ff = 24;
  } else if (kind == Kind::Teaching) {
    c.block = nn::BlockConfig::teaching(16, 4);
    std::get<nn::MLPSpec>(c.block.ffn).d_ff = 24;
    c.final_norm = false;
    c.tie_embeddings = true;
  } else if (kind == Kind::MoE) {
    c.block.d_model = 16;
    std::get<nn::MHASpec>(c.block.attention).n_heads = 4;
    nn::MoESpec moe;
    moe.d_ff = 12;
    moe.num_experts = 4;
    moe.top_k = 2;
    moe.aux_loss_coef = 0.5;
    c.block.ffn = moe;
  } else {
    nn::MLASpec mla;
    mla.n_heads = 4;
    mla.latent_dim = 6;
    mla.rope_dim = 2;
    c.block.d_model = 16;
    c.block.attention = mla;
    c.block.position = nn::PositionKind::RoPE;
    c.block.norm = nn::RMSNormSpec{1e-5};
    nn::SwiGLUSpec swiglu;
    swiglu.d_ff = 24;
    c.block.ffn = swiglu;
  }
  c.block.max_seq_len = 16;
  c.block.dropout = dropout;
  return c;
}

// How many nodes of t's graph an op named `op` made (an iterative walk over the inputs).
int count_ops(const Tensor& t, const std::string& op) {
  std::vector<Node*> stack{t.node()};
  std::set<Node*> seen{t.node()};
  int n = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    n += op == node->op;
    for (const Tensor& in : node->inputs)
      if (in.defined() && seen.insert(in.node()).second) stack.push_back(in.node());
  }
  return n;
}

// One training forward and backward (cross-entropy plus the MoE auxiliary loss) from seed 42;
// returns the loss and every parameter's gradient by name (undefined ones left out).
struct StepResult {
  double loss = 0;
  std::map<std::string, Tensor> grads;
  std::string rng_after;  // the default generator's state after the backward
};

StepResult train_step(nn::DecoderLM& lm, bool checkpointing) {
  lm.set_gradient_checkpointing(checkpointing);
  lm.train();
  for (auto& [name, p] : lm.named_parameters()) p.zero_grad();
  const Tensor x = tokens_of(2, 6, lm.config().vocab_size, 3);
  const Tensor y = tokens_of(2, 6, lm.config().vocab_size, 4);
  manual_seed(42);
  nn::LMOutput out = lm.forward_with_aux(x);
  // One checkpoint node per block, and only with the option on.
  EXPECT_EQ(count_ops(out.logits, "checkpoint"), checkpointing ? lm.config().n_layers : 0);
  Tensor loss = losses::cross_entropy(out.logits, y);
  if (out.aux_loss.defined()) loss = loss + out.aux_loss;
  loss.backward();
  StepResult r;
  r.loss = loss.item();
  for (auto& [name, p] : lm.named_parameters())
    if (p.grad().defined()) r.grads[name] = p.grad();
  r.rng_after = default_generator().state();
  lm.set_gradient_checkpointing(false);
  return r;
}

void expect_same_step(const StepResult& plain, const StepResult& ckpt) {
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_EQ(plain.rng_after, ckpt.rng_after);
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (const auto& [name, g] : plain.grads) {
    auto it = ckpt.grads.find(name);
    ASSERT_NE(it, ckpt.grads.end()) << name;
    EXPECT_TRUE(test::tensors_close(it->second, g, 0, 0)) << name;
  }
}

std::vector<double> train_losses(const fs::path& log) {
  std::vector<double> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace xg::checkpoint_test

namespace ct = xg::checkpoint_test;

// --- the primitive ------------------------------------------------------------------------

TEST(ActivationCheckpoint, GradcheckThroughACheckpointedFunction) {
  const Tensor x = ct::param64({3, 4}, 1), w = ct::param64({4, 5}, 2), b = ct::param64({5}, 3);
  // The inputs and the params both get gradients; the auxiliary output's too (summed in).
  auto fn = [](const ct::V& in) {
    const Tensor w = in[1], b = in[2];
    ct::V out = checkpoint([w, b](const ct::V& v) { return ct::dense_tanh(v[0], w, b, 0.0); }, {in[0]}, {w, b});
    return out[0] + out[1];
  };
  EXPECT_GRADCHECK(fn, {x, w, b});
  // Only params need a gradient (LoRA's first block: the frozen embedding's output comes in).
  const Tensor x_const = ct::param64({3, 4}, 4).detach();
  EXPECT_GRADCHECK(fn, {x_const, w, b});
}

TEST(ActivationCheckpoint, SameGradientsAsTheDirectCallDropoutIncluded) {
  for (Dtype dt : {kFloat32, kFloat64}) {
    const Tensor x = ct::param64({6, 8}, 1).to(dt).detach().requires_grad_();
    const Tensor w = ct::param64({8, 5}, 2).to(dt).detach().requires_grad_();
    const Tensor b = ct::param64({5}, 3).to(dt).detach().requires_grad_();
    const Tensor u = ct::param64({6, 5}, 4).to(dt).detach();
    auto direct = [&](bool with_aux) {
      return ct::grads_of([&] { return ct::dense_tanh(x, w, b, 0.3); }, u, {x, w, b}, with_aux);
    };
    auto checkpointed = [&](bool with_aux, bool preserve) {
      return ct::grads_of(
          [&] {
            return checkpoint([&](const ct::V& v) { return ct::dense_tanh(v[0], w, b, 0.3); }, {x}, {w, b}, preserve);
          },
          u, {x, w, b}, with_aux);
    };
    // NOTE: bit-identical, not merely close: the recompute runs the same kernels on the same
    // data, the recomputed graph sums each gradient in the same order as the full graph, and
    // the checkpoint node only hands the results on.
    const ct::V plain = direct(false);
    const std::string rng_direct = default_generator().state();
    ct::expect_bitwise(plain, checkpointed(false, true));
    EXPECT_EQ(default_generator().state(), rng_direct) << "the recompute leaves the generator where it was";
    // NOTE: only close when the loss takes an output that fn computes from another output (aux
    // reads out): the full graph adds the gradient out gets from aux to the one from
    // sum(out * u) among its other terms, the recompute starts from the latter as out's seed
    // and adds the former, a different association (a few ulps). A block's output and its MoE
    // loss are two ends of the block, so the models below stay bit-identical.
    const ct::V with_aux = direct(true), with_aux_ckpt = checkpointed(true, true);
    const double tol = dt == kFloat64 ? 1e-12 : 1e-6;
    for (std::size_t i = 0; i < with_aux.size(); ++i)
      EXPECT_TRUE(test::tensors_close(with_aux_ckpt[i], with_aux[i], tol, tol)) << "tensor " << i;
    // Without the saved state the recompute draws other masks: the test can tell.
    const ct::V unreplayed = checkpointed(false, false);
    EXPECT_FALSE(test::tensors_close(unreplayed[0], plain[0], 1e-3, 1e-3)) << dtype_name(dt);
  }
}

TEST(ActivationCheckpoint, RecomputesOnceInBackwardAndFreesTheGraph) {
  const Tensor x = ct::param64({2, 3}, 1), w = ct::param64({3, 3}, 2);
  int calls = 0;
  const CheckpointFn fn = ct::counted_matmul(w, calls);
  Tensor y = checkpoint(fn, {x}, {w})[0];
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_STREQ(y.op_name(), "checkpoint");
  y.sum().backward(Tensor(), /*retain_graph=*/true);
  EXPECT_EQ(calls, 2);
  const Tensor gw = w.grad().clone();
  y.sum().backward();  // a retained graph recomputes again and accumulates the same again
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(test::tensors_close(w.grad(), gw * 2.0, 0, 0));
  EXPECT_XG_ERROR(y.sum().backward(), "backward through the graph a second time");
}

TEST(ActivationCheckpoint, NothingSpecialWithoutGrad) {
  const Tensor x = ct::param64({2, 3}, 1), w = ct::param64({3, 3}, 2);
  int calls = 0;
  const CheckpointFn fn = ct::counted_matmul(w, calls);
  {
    NoGradGuard no_grad;
    Tensor y = checkpoint(fn, {x}, {w})[0];
    EXPECT_FALSE(y.requires_grad());
  }
  // Nothing listed requires grad: fn runs as it is (it records its own graph of w here).
  Tensor y = checkpoint(fn, {x.detach()}, {})[0];
  EXPECT_STREQ(y.op_name(), "matmul");
  EXPECT_EQ(calls, 2);
}

TEST(ActivationCheckpoint, OnlyTheAuxiliaryOutputInTheLoss) {
  const Tensor x = ct::param64({3, 4}, 1), w = ct::param64({4, 5}, 2), b = ct::param64({5}, 3);
  manual_seed(1);
  const ct::V direct = grad({ct::dense_tanh(x, w, b, 0.2)[1]}, {x, w, b});
  manual_seed(1);
  ct::V out = checkpoint([&](const ct::V& v) { return ct::dense_tanh(v[0], w, b, 0.2); }, {x}, {w, b});
  ct::expect_bitwise(direct, grad({out[1]}, {x, w, b}));
}

TEST(ActivationCheckpoint, AnUnlistedTensorThatRequiresGradIsAnError) {
  const Tensor x = ct::param64({2, 3}, 1), w = ct::param64({3, 4}, 2);
  Tensor y = checkpoint([&](const ct::V& v) { return ct::V{matmul(v[0], w)}; }, {x})[0];
  EXPECT_XG_ERROR(y.sum().backward(), "checkpoint: the function uses a tensor of shape [3,4] that requires grad");
}

// --- DecoderLM::set_gradient_checkpointing ---------------------------------------------------

TEST(GradientCheckpointing, GradcheckThroughACheckpointedDecoderLM) {
  // MoE (its auxiliary loss in the output) with dropout: the gradient check passes only when
  // the recompute replays the forward's masks (each evaluation reseeds the generator).
  nn::DecoderLM lm(ct::lm_config(ct::Kind::MoE, 0.2));
  test::randomize64(lm, 1);
  lm.set_gradient_checkpointing(true);
  const Tensor tokens = ct::tokens_of(2, 4, 11, 2);
  auto* moe = dynamic_cast<nn::MoE*>((*lm.layers())[0]->ffn().get());
  ASSERT_NE(moe, nullptr);
  auto* attn = dynamic_cast<nn::MultiHeadAttention*>((*lm.layers())[1]->attention().get());
  ASSERT_NE(attn, nullptr);
  EXPECT_GRADCHECK(
      [&](const ct::V&) {
        manual_seed(7);
        nn::LMOutput o = lm.forward_with_aux(tokens);
        return o.logits + o.aux_loss;
      },
      {lm.tok_embeddings()->weight(), moe->router()->weight(), attn->w_q()->weight(), attn->w_v()->weight(),
       lm.output()->weight()});
}

TEST(GradientCheckpointing, SameLossAndGradientsAsWithout) {
  // NOTE: bit-identical in float32 and float64. Inside a block the recomputed graph is the
  // same subgraph in the same topological order as in the full graph, so every gradient is
  // summed in the same order; the checkpoint node only hands them on.
  for (ct::Kind kind : {ct::Kind::LLaMA, ct::Kind::Teaching, ct::Kind::MoE, ct::Kind::MLA}) {
    for (Dtype dt : {kFloat32, kFloat64}) {
      SCOPED_TRACE(str_cat("kind ", static_cast<int>(kind), ", ", dtype_name(dt)));
      nn::LMConfig c = ct::lm_config(kind, 0.1);
      c.dtype = dt;
      manual_seed(3);
      nn::DecoderLM lm(c);
      const ct::StepResult plain = ct::train_step(lm, false);
      const ct::StepResult ckpt = ct::train_step(lm, true);
      ct::expect_same_step(plain, ckpt);
    }
  }
}

TEST(GradientCheckpointing, EvalNoGradAndGenerationAreUnchanged) {
  manual_seed(3);
  nn::DecoderLM lm(ct::lm_config(ct::Kind::LLaMA, 0.1));
  const Tensor tokens = ct::tokens_of(2, 5, 11, 9);
  lm.eval();
  const Tensor plain = lm(tokens);
  nn::GenerateOptions g;
  g.seed = 4;
  const Tensor gen_plain = lm.generate(tokens, 4, g);
  lm.set_gradient_checkpointing(true);
  const Tensor eval_logits = lm(tokens);
  EXPECT_EQ(ct::count_ops(eval_logits, "checkpoint"), 0);
  EXPECT_TRUE(test::tensors_close(eval_logits, plain, 0, 0));
  EXPECT_TRUE(test::tensors_close(lm.generate(tokens, 4, g), gen_plain, 0, 0));
  lm.train();
  NoGradGuard no_grad;
  manual_seed(8);
  const Tensor train_logits = lm(tokens);
  EXPECT_FALSE(train_logits.requires_grad());
  lm.set_gradient_checkpointing(false);
  manual_seed(8);
  EXPECT_TRUE(test::tensors_close(lm(tokens), train_logits, 0, 0));
}

TEST(GradientCheckpointing, LoRAAdaptersGetTheSameGradients) {
  // The base is frozen, so no block's input needs a gradient; the adapters inside do.
  manual_seed(3);
  nn::DecoderLM lm(ct::lm_config(ct::Kind::LLaMA, 0.1));
  finetune::LoRAConfig lc;
  lc.r = 2;
  lc.dropout = 0.2;
  lc.targets = "q,v,down";
  Generator gen(1);
  finetune::inject_lora(lm, lc, gen);
  for (auto& [name, p] : finetune::named_lora_parameters(lm)) p.copy_(randn(p.shape(), p.dtype(), &gen));  // B != 0
  const ct::StepResult plain = ct::train_step(lm, false);
  const ct::StepResult ckpt = ct::train_step(lm, true);
  EXPECT_EQ(plain.grads.size(), finetune::named_lora_parameters(lm).size());
  ct::expect_same_step(plain, ckpt);
}

TEST(GradientCheckpointing, TrainLoopLossesAndWeightsMatch) {
  const fs::path d = test::fresh_test_dir();
  auto run = [&](bool checkpointing, const std::string& sub) {
    manual_seed(3);
    nn::DecoderLM lm(ct::lm_config(ct::Kind::MoE, 0.1));
    finetune::LoopOptions o;
    o.steps = 4;
    o.grad_accum = 2;
    o.warmup = 1;
    o.lr = 1e-2;
    o.seed = 5;
    o.out_dir = (d / sub).string();
    o.gradient_checkpointing = checkpointing;
    finetune::TrainLoop loop("test", lm, lm.named_parameters(), o);
    EXPECT_EQ(lm.gradient_checkpointing(), checkpointing);
    loop.micro_step = [&](int64_t, int64_t, Generator& rng) {
      const Tensor x = randint(0, 11, {2, 6}, &rng), y = randint(0, 11, {2, 6}, &rng);
      nn::LMOutput out = lm.forward_with_aux(x);
      return finetune::MicroResult{losses::cross_entropy(out.logits, y) + out.aux_loss, x.numel(), {}};
    };
    loop.run();
    return lm.state_dict();
  };
  const TensorMap plain = run(false, "plain"), ckpt = run(true, "ckpt");
  const std::vector<double> losses = ct::train_losses(d / "plain" / "log.jsonl");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_EQ(ct::train_losses(d / "ckpt" / "log.jsonl"), losses);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (const auto& [name, t] : plain) EXPECT_TRUE(test::tensors_close(ckpt.at(name), t, 0, 0)) << name;
}

TEST(GradientCheckpointing, TrainLoopNeedsADecoderLM) {
  nn::Linear lin(2, 2);
  finetune::LoopOptions o;
  o.gradient_checkpointing = true;
  EXPECT_XG_ERROR(finetune::TrainLoop("prog", lin, lin.named_parameters(), o),
                  "prog: --gradient-checkpointing needs a DecoderLM (Linear is none and holds none)");
}

TEST(GradientCheckpointing, XgTrainAndXgFinetuneFlag) {
  const fs::path d = test::fresh_test_dir();
  {
    std::ofstream f(d / "train.txt");
    for (int i = 0; i < 200; ++i) f << "line " << i % 10 << ": the quick brown fox jumps over the lazy dog.\n";
  }
  const std::string tool_dir = XGRAD_TOOL_DIR;
  const std::string train = "--data " + (d / "train.txt").string() +
                            " --d-model 32 --layers 2 --heads 2 --seq-len 32 --batch 2 --steps 4 --warmup 1"
                            " --dropout 0.1 --sample-tokens 0 --seed 5 --out ";
  test::CliRun a = test::run_cli(tool_dir + "/xg-train", train + (d / "train_plain").string());
  ASSERT_EQ(a.status, 0) << a.err;
  test::CliRun b = test::run_cli(tool_dir + "/xg-train", train + (d / "train_ckpt").string() + " --gradient-checkpointing");
  ASSERT_EQ(b.status, 0) << b.err;
  const std::vector<double> losses = ct::train_losses(d / "train_plain" / "log.jsonl");
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_EQ(ct::train_losses(d / "train_ckpt" / "log.jsonl"), losses);
  const nlohmann::json args = nlohmann::json::parse(test::slurp((d / "train_ckpt" / "args.json").string()));
  EXPECT_EQ(args["flags"]["gradient-checkpointing"], true);

  // LoRA SFT with adapter dropout.
  const fs::path base = test::tiny_base(d);
  {
    std::ofstream f(d / "sft.jsonl");
    for (const char* w : {"apple", "river", "stone", "cloud"})
      f << nlohmann::json{{"prompt", std::string("Is ") + w + " a word?"}, {"response", "yes"}}.dump() << "\n";
  }
  const std::string sft = "--base " + base.string() + " --data " + (d / "sft.jsonl").string() +
                          " --steps 3 --warmup 0 --batch 2 --lora-r 4 --lora-dropout 0.1 --out ";
  a = test::run_cli(tool_dir + "/xg-finetune", sft + (d / "sft_plain").string());
  ASSERT_EQ(a.status, 0) << a.err;
  b = test::run_cli(tool_dir + "/xg-finetune", sft + (d / "sft_ckpt").string() + " --gradient-checkpointing");
  ASSERT_EQ(b.status, 0) << b.err;
  const std::vector<double> sft_losses = ct::train_losses(d / "sft_plain" / "log.jsonl");
  ASSERT_EQ(sft_losses.size(), 3u);
  EXPECT_EQ(ct::train_losses(d / "sft_ckpt" / "log.jsonl"), sft_losses);
}

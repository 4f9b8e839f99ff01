// finetune/train_loop.cpp and checkpoint.cpp: the shared loop trains, evaluates, and a run
// interrupted after a checkpoint resumes to bitwise the same weights as an uninterrupted run.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "finetune/train_loop.hpp"
#include "nn/linear.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"
#include "xgrad.hpp"

using namespace xg;
namespace fs = std::filesystem;
namespace ft = xg::finetune;

namespace {

// y = Dropout(Linear(x)) regressed onto a fixed linear map of x, batches drawn from the data
// generator: every source of randomness a real run has (data order, dropout).
struct Toy : nn::Module {
  std::shared_ptr<nn::Linear> lin;
  std::shared_ptr<nn::Dropout> drop;
  Toy() {
    manual_seed(11);  // Linear's bias init draws from the default generator, as a program's --seed fixes it
    Generator g(7);
    lin = register_module("lin", std::make_shared<nn::Linear>(4, 3));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.1));
    lin->weight().copy_(randn({3, 4}, kFloat32, &g));
  }
  Tensor forward(const Tensor& x) const { return (*drop)((*lin)(x)); }
};

Tensor target_map() {
  Generator g(99);
  return randn({4, 3}, kFloat32, &g);
}

ft::MicroResult toy_step(const Toy& m, Generator& rng) {
  Tensor x = randn({8, 4}, kFloat32, &rng);
  Tensor y = matmul(x, target_map());
  Tensor d = m.forward(x) - y;
  return {mean(d * d), 8, {}};
}

ft::LoopOptions options(const fs::path& out) {
  ft::LoopOptions o;
  o.steps = 12;
  o.grad_accum = 2;
  o.lr = 0.05;
  o.warmup = 2;
  o.checkpoint_every = 4;
  o.out_dir = out.string();
  o.seed = 3;
  return o;
}

std::vector<float> weights(const Toy& m) {
  Tensor w = m.lin->weight();
  return std::vector<float>(w.data<float>(), w.data<float>() + w.numel());
}

struct Interrupt {};

}  // namespace

TEST(FinetuneTrainLoop, LowersTheLossAndEvaluates) {
  Toy m;
  ft::LoopOptions o = options(xg::test::fresh_test_dir("lowers"));
  o.steps = 60;
  ft::TrainLoop loop("test", m, m.named_parameters(), o);
  loop.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(m, rng); };
  loop.evaluate = [&](int64_t) {
    EXPECT_FALSE(m.is_training());
    Generator g(123);
    return ft::Metrics{{"loss", toy_step(m, g).loss.item()}};
  };
  // The loss before training, measured the same way.
  m.eval();
  Generator g0(123);
  const double before = toy_step(m, g0).loss.item();
  ft::Metrics last = loop.run();
  EXPECT_LT(last.at("loss"), 0.2 * before);
  EXPECT_TRUE(fs::exists(loop.checkpoint_path()));
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "log.jsonl"));
}

// An evaluation that throws leaves the model in the mode it trained in (EvalModeGuard), so a
// script that catches the error and goes on does not train with dropout off.
TEST(FinetuneTrainLoop, EvaluationThatThrowsRestoresTrainingMode) {
  Toy m;
  ft::LoopOptions o = options(xg::test::fresh_test_dir("eval_throws"));
  o.eval_every = 2;
  ft::TrainLoop loop("test", m, m.named_parameters(), o);
  loop.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(m, rng); };
  loop.evaluate = [&](int64_t) -> ft::Metrics {
    EXPECT_FALSE(m.drop->is_training());
    throw Error("evaluation failed");
  };
  EXPECT_XG_ERROR(loop.run(), "evaluation failed");
  EXPECT_TRUE(m.is_training());
  EXPECT_TRUE(m.drop->is_training());
}

TEST(FinetuneTrainLoop, ResumeAfterACrashIsBitwiseIdentical) {
  // Uninterrupted.
  Toy a;
  ft::TrainLoop la("test", a, a.named_parameters(), options(xg::test::fresh_test_dir("full")));
  la.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(a, rng); };
  la.run();

  // Dies in step 7 (after the step-4 checkpoint, before the step-8 one), then resumes in a
  // fresh model and loop, as a new process would.
  const fs::path out = xg::test::fresh_test_dir("crash");
  {
    Toy b;
    ft::TrainLoop lb("test", b, b.named_parameters(), options(out));
    lb.micro_step = [&](int64_t step, int64_t, Generator& rng) {
      if (step == 6) throw Interrupt{};
      return toy_step(b, rng);
    };
    EXPECT_THROW(lb.run(), Interrupt);
  }
  EXPECT_EQ(ft::load_checkpoint((out / "checkpoint.safetensors").string()).progress.step, 4);
  Toy c;
  ft::LoopOptions o = options(out);
  o.resume = true;
  ft::TrainLoop lc("test", c, c.named_parameters(), o);
  lc.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(c, rng); };
  lc.run();
  EXPECT_EQ(lc.start_step(), 4);
  const std::vector<float> wa = weights(a), wc = weights(c);
  ASSERT_EQ(wa.size(), wc.size());
  EXPECT_EQ(std::memcmp(wa.data(), wc.data(), wa.size() * sizeof(float)), 0);
  EXPECT_NE(weights(Toy()), wa);  // it trained at all
}

TEST(FinetuneTrainLoop, ResumeChecksTheRunIdentity) {
  const fs::path out = xg::test::fresh_test_dir("identity");
  Toy a;
  ft::TrainLoop la("test", a, a.named_parameters(), options(out));
  la.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(a, rng); };
  la.run_identity["config"] = "d=4";
  la.run();
  Toy b;
  ft::LoopOptions o = options(out);
  o.resume = true;
  ft::TrainLoop lb("test", b, b.named_parameters(), o);
  lb.micro_step = la.micro_step;
  lb.run_identity["config"] = "d=8";
  EXPECT_XG_ERROR(lb.run(), "was written by a run with a different config (checkpoint: 'd=4', now: 'd=8')");
}

TEST(FinetuneTrainLoop, NonFiniteLossStopsAndKeepsTheLastCheckpoint) {
  Toy m;
  const fs::path dir = xg::test::fresh_test_dir("nan");
  ft::TrainLoop loop("xg-train", m, m.named_parameters(), options(dir));
  loop.micro_step = [&](int64_t step, int64_t, Generator& rng) {
    ft::MicroResult r = toy_step(m, rng);
    if (step == 5) r.loss = r.loss * std::nan("");
    return r;
  };
  EXPECT_XG_ERROR(loop.run(), "xg-train: step 6: the loss is nan (micro-batch 1 of 2); stopped (--on-nan stop); "
                              "the checkpoint of step 4 is kept");
  const ft::Checkpoint c = ft::load_checkpoint((dir / "checkpoint.safetensors").string());
  EXPECT_EQ(c.progress.step, 4);
  for (const auto& [name, t] : c.model) EXPECT_TRUE(isfinite_all(t)) << name;
  EXPECT_TRUE(isfinite_all(m.lin->weight()));
}

// An Inf in AdamW's second moment leaves the weights finite (the update becomes 0) but must not
// be saved as if the run were sound: the whole optimizer state is checked before a checkpoint.
TEST(FinetuneTrainLoop, NonFiniteOptimizerStateIsNeverCheckpointed) {
  Toy m;
  const fs::path dir = xg::test::fresh_test_dir("inf_state");
  ft::TrainLoop loop("xg-train", m, m.named_parameters(), options(dir));
  loop.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(m, rng); };
  loop.after_step = [&](int64_t step) {
    if (step != 3) return;
    TensorMap state = loop.optimizer().state_dict();
    Tensor& v = state.at("state.0.exp_avg_sq");
    v = full(v.shape(), std::numeric_limits<double>::infinity(), v.dtype());
    loop.optimizer().load_state_dict(state);
  };
  EXPECT_XG_ERROR(loop.run(), "xg-train: not writing a checkpoint at step 4: optimizer state 'state.0.exp_avg_sq' holds NaN or Inf");
  EXPECT_TRUE(isfinite_all(m.lin->weight()));
  EXPECT_FALSE(fs::exists(dir / "checkpoint.safetensors"));
}

// A loss term whose value is 0 but whose gradient is NaN: d sqrt(u)/du at u = 0 is Inf, times 0.
Tensor nan_gradient_term(const Toy& m) { return sum(sqrt(m.lin->weight() * 0.0)); }

TEST(FinetuneTrainLoop, OnNanSkipDropsTheStepAndLogsIt) {
  Toy m;
  const fs::path dir = xg::test::fresh_test_dir("nan_skip");
  ft::LoopOptions o = options(dir);
  o.on_nan = ft::NanPolicy::Skip;
  ft::TrainLoop loop("xg-train", m, m.named_parameters(), o);
  loop.micro_step = [&](int64_t step, int64_t, Generator& rng) {
    ft::MicroResult r = toy_step(m, rng);
    if (step == 2) r.loss = r.loss + nan_gradient_term(m);
    return r;
  };
  std::map<int64_t, std::vector<float>> after;
  loop.after_step = [&](int64_t step) { after[step] = weights(m); };
  loop.run();
  EXPECT_EQ(after.at(3), after.at(2));  // step 3 (index 2) changed nothing
  EXPECT_NE(after.at(4), after.at(3));  // and training went on
  EXPECT_TRUE(isfinite_all(m.lin->weight()));
  int skips = 0;
  std::ifstream log(dir / "log.jsonl");
  for (std::string line; std::getline(log, line);)
    if (line.find("\"kind\":\"skip\"") != std::string::npos) {
      ++skips;
      EXPECT_NE(line.find("step 3 skipped (--on-nan skip): the gradient of 'lin.weight' holds NaN or Inf"), std::string::npos)
          << line;
    }
  EXPECT_EQ(skips, 1);
}

TEST(FinetuneTrainLoop, DetectAnomalyNamesTheOpAndModule) {
  Toy m;
  ft::LoopOptions o = options(xg::test::fresh_test_dir("anomaly"));
  o.detect_anomaly = true;
  ft::TrainLoop loop("xg-train", m, m.named_parameters(), o);
  loop.micro_step = [&](int64_t step, int64_t, Generator& rng) {
    ft::MicroResult r = toy_step(m, rng);
    if (step == 1) r.loss = r.loss + nan_gradient_term(m);
    return r;
  };
  EXPECT_XG_ERROR(loop.run(), "xg-train: step 2: detect_anomaly: the backward of op 'sqrt' returned NaN or Inf in the "
                              "gradient of its input 0 (shape [3,4]) in module 'lin' (nearest parameter upstream: lin.weight)");
}

// The library names the option (a field of LoopOptions), not a command-line flag: the CLI maps
// the names to its flags (tests/test_cli_loop_flags.cpp).
TEST(FinetuneTrainLoop, BadOptionsNameTheOption) {
  Toy m;
  ft::LoopOptions o;
  o.steps = 0;
  EXPECT_XG_ERROR(ft::TrainLoop("xg-train", m, m.named_parameters(), o), "TrainLoop: steps must be positive, got 0");
  o = ft::LoopOptions();
  o.grad_accum = 0;
  EXPECT_XG_ERROR(ft::TrainLoop("xg-train", m, m.named_parameters(), o), "TrainLoop: grad_accum must be positive, got 0");
  o = ft::LoopOptions();
  o.steps = 10;
  o.warmup = 11;
  EXPECT_XG_ERROR(ft::TrainLoop("xg-train", m, m.named_parameters(), o),
                  "TrainLoop: warmup 11 is longer than the run (steps 10)");
  EXPECT_XG_ERROR(ft::TrainLoop("xg-train", m, m.named_parameters(), ft::LoopOptions(), nullptr),
                  "TrainLoop: make_optimizer is empty");
  m.requires_grad_(false);
  nn::NamedTensors none;
  EXPECT_XG_ERROR(ft::TrainLoop("xg-train", m, none, ft::LoopOptions()), "nothing to train");
}

TEST(FinetuneCheckpoint, RoundTripAndErrors) {
  const fs::path d = xg::test::fresh_test_dir("ckpt");
  fs::create_directories(d);
  ft::Checkpoint c;
  c.model["w"] = ones({2, 2});
  c.optim["state.0.step"] = full({}, 3.0, kInt64);
  c.progress.step = 17;
  c.progress.tokens_seen = 4096;
  c.progress.data_rng = Generator(5).state();
  c.progress.global_rng = Generator(6).state();
  c.progress.extra["config"] = "{\"d\": 4}";
  const std::string path = (d / "c.safetensors").string();
  ft::save_checkpoint(path, c);
  ft::Checkpoint r = ft::load_checkpoint(path);
  EXPECT_EQ(r.progress.step, 17);
  EXPECT_EQ(r.progress.tokens_seen, 4096);
  EXPECT_EQ(r.progress.data_rng, c.progress.data_rng);
  EXPECT_EQ(r.progress.extra.at("config"), "{\"d\": 4}");
  EXPECT_EQ(r.model.at("w").shape(), (Shape{2, 2}));
  EXPECT_EQ(r.optim.at("state.0.step").item(), 3.0);
  io::save_safetensors((d / "plain.safetensors").string(), {{"w", ones({1})}});
  EXPECT_XG_ERROR(ft::load_checkpoint((d / "plain.safetensors").string()), "plain.safetensors: metadata has no 'format'");
}

// kAutoWarmup: min(max_auto_warmup, steps / 10), so a short run gets a short warmup.
TEST(FinetuneTrainLoop, AutoWarmupScalesWithTheRun) {
  ft::LoopOptions o;
  o.warmup = ft::kAutoWarmup;
  o.steps = 20;
  EXPECT_EQ(o.warmup_steps(), 2);
  o.steps = 5;
  EXPECT_EQ(o.warmup_steps(), 0);
  o.steps = 5000;
  EXPECT_EQ(o.warmup_steps(), 100);
  o.max_auto_warmup = 20;
  EXPECT_EQ(o.warmup_steps(), 20);
  o.warmup = 7;  // an explicit warmup is kept
  EXPECT_EQ(o.warmup_steps(), 7);
  EXPECT_NO_THROW(o.validate());
  // The schedule ramps over the resolved warmup of 2 steps: 0, half the peak, the peak.
  o.warmup = ft::kAutoWarmup;
  o.max_auto_warmup = 100;
  o.steps = 20;
  o.schedule = ft::LrSchedule::Constant;
  const optim::Schedule s = ft::make_schedule(o);
  EXPECT_DOUBLE_EQ(s(0), 0.0);
  EXPECT_DOUBLE_EQ(s(1), 0.5);
  EXPECT_DOUBLE_EQ(s(2), 1.0);
  EXPECT_DOUBLE_EQ(s(10), 1.0);
}

// Any optimizer: SGD with momentum through the factory trains, and resumes bit for bit (its
// momentum buffers go through the checkpoint).
TEST(FinetuneTrainLoop, TakesAnyOptimizerAndResumesIt) {
  const auto sgd = [](const nn::NamedTensors& trainable) -> std::unique_ptr<optim::Optimizer> {
    std::vector<Tensor> ps;
    for (const auto& [name, p] : trainable) ps.push_back(p);
    optim::SGDOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    return std::make_unique<optim::SGD>(ps, so);
  };
  Toy a;
  const Toy untrained;
  ft::TrainLoop la("test", a, a.named_parameters(), options(xg::test::fresh_test_dir("sgd_full")), sgd);
  la.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(a, rng); };
  la.run();
  EXPECT_NE(dynamic_cast<optim::SGD*>(&la.optimizer()), nullptr);
  EXPECT_NE(weights(a), weights(untrained));

  const fs::path out = xg::test::fresh_test_dir("sgd_crash");
  {
    Toy b;
    ft::TrainLoop lb("test", b, b.named_parameters(), options(out), sgd);
    lb.micro_step = [&](int64_t step, int64_t, Generator& rng) {
      if (step == 6) throw Interrupt{};
      return toy_step(b, rng);
    };
    EXPECT_THROW(lb.run(), Interrupt);
  }
  Toy c;
  ft::LoopOptions o = options(out);
  o.resume = true;
  ft::TrainLoop lc("test", c, c.named_parameters(), o, sgd);
  lc.micro_step = [&](int64_t, int64_t, Generator& rng) { return toy_step(c, rng); };
  lc.run();
  EXPECT_EQ(lc.start_step(), 4);
  const std::vector<float> wa = weights(a), wc = weights(c);
  EXPECT_EQ(std::memcmp(wa.data(), wc.data(), wa.size() * sizeof(float)), 0);
}

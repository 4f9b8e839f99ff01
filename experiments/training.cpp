#include "experiments/training.hpp"

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>

#include "autograd/random.hpp"
#include "experiments/admin.hpp"
#include "losses/cross_entropy.hpp"
#include "nn/decoder.hpp"
#include "nn/init.hpp"
#include "optim/adam.hpp"
#include "optim/schedule.hpp"

namespace xg::experiments {

std::vector<uint8_t> read_corpus(const std::string& path, int64_t min_bytes) {
  std::ifstream f(path, std::ios::binary);
  check(static_cast<bool>(f), "--corpus: cannot read '", path, "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  check(static_cast<int64_t>(bytes.size()) >= min_bytes, "--corpus: '", path, "' has ", bytes.size(),
        " bytes, need at least ", min_bytes);
  return bytes;
}

std::string classify_run(const std::vector<double>& losses, double final_loss, double unigram_entropy) {
  for (double l : losses)
    if (!std::isfinite(l)) return "diverged";
  if (!std::isfinite(final_loss) || final_loss > losses.front() + 0.5) return "diverged";
  if (final_loss < unigram_entropy - 0.05) return "ok";
  // Near or above the unigram entropy: "slow" while the loss is still falling (the mean of the
  // third quarter of the run more than 0.05 nats above the final loss), "stalled" otherwise.
  const std::size_t n = losses.size();
  if (n >= 8) {
    double q = 0;
    for (std::size_t i = n / 2; i < 3 * n / 4; ++i) q += losses[i];
    q /= static_cast<double>(3 * n / 4 - n / 2);
    if (q - final_loss > 0.05) return "slow";
  }
  return "stalled";
}

const char* train_method_name(TrainMethod m) {
  switch (m) {
    case TrainMethod::Post: return "post";
    case TrainMethod::Pre: return "pre";
    case TrainMethod::DeepNorm: return "deepnorm";
    case TrainMethod::Admin: return "admin";
  }
  return "?";
}

namespace {
double params_sq(const std::vector<Tensor>& ps, bool grads) {
  double s = 0;
  for (const Tensor& p : ps) {
    Tensor t = grads ? p.grad() : p;
    if (!t.defined()) continue;
    for (double v : t.to_vector()) s += v * v;
  }
  return s;
}
}  // namespace

TrainRun train_run(const TrainConfig& tc, const std::vector<uint8_t>& corpus, nn::NormPosition norm, int64_t depth,
                   double lr, bool warmup) {
  const TrainMethod m = norm == nn::NormPosition::Post ? TrainMethod::Post
                        : norm == nn::NormPosition::Pre ? TrainMethod::Pre
                                                        : TrainMethod::DeepNorm;
  return train_run(tc, corpus, m, depth, lr, warmup);
}

TrainRun train_run(const TrainConfig& tc, const std::vector<uint8_t>& corpus, TrainMethod method, int64_t depth,
                   double lr, bool warmup) {
  const nn::NormPosition norm = method == TrainMethod::Pre        ? nn::NormPosition::Pre
                                : method == TrainMethod::DeepNorm ? nn::NormPosition::DeepNorm
                                                                  : nn::NormPosition::Post;
  check(depth >= 1, "train_run: depth must be at least 1, got ", depth);
  check(tc.steps >= 1, "--train-steps: must be at least 1, got ", tc.steps);
  const int64_t n = static_cast<int64_t>(corpus.size());
  check(n > tc.seq_len + 1, "train_run: the corpus (", n, " bytes) is shorter than a sequence");
  TrainRun run;
  run.norm = norm;
  run.method = method;
  run.depth = depth;
  run.lr = lr;
  run.warmup = warmup;

  // The init draws from the process's default generator: runs that go in parallel (a cell of
  // prenorm_vs_postnorm --train) seed it and build their models one at a time, so that a run's
  // weights depend on its seed only, not on the thread count.
  static std::mutex init_mu;
  std::unique_lock<std::mutex> init_lock(init_mu);
  manual_seed(tc.seed);
  nn::LMConfig lc;
  lc.vocab_size = 256;
  lc.n_layers = depth;
  lc.block.d_model = tc.d_model;
  nn::MHASpec mha;
  mha.n_heads = tc.n_heads;
  lc.block.attention = mha;
  lc.block.norm_position = norm;
  lc.block.norm = nn::LayerNormSpec{};
  lc.block.ffn = nn::MLPSpec{};  // GELU, with bias
  lc.block.position = nn::PositionKind::Learned;
  lc.block.max_seq_len = tc.seq_len;
  lc.final_norm = norm == nn::NormPosition::Pre;
  // Admin wraps a Post-Norm LM; the others are the LM itself.
  std::unique_ptr<AdminLM> admin;
  std::unique_ptr<nn::DecoderLM> plain;
  if (method == TrainMethod::Admin)
    admin = std::make_unique<AdminLM>(lc);
  else
    plain = std::make_unique<nn::DecoderLM>(lc);
  nn::DecoderLM& lm = admin ? admin->lm() : *plain;
  auto model = [&](const Tensor& x) { return admin ? admin->forward(x) : lm(x); };
  if (norm == nn::NormPosition::DeepNorm)
    for (auto& [name, p] : lm.named_parameters())
      if (name.find("norm") == std::string::npos && name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
        nn::init::zeros_(p);
  init_lock.unlock();

  optim::AdamWOptions opts;
  opts.lr = lr;
  opts.betas = {0.9, 0.98};
  opts.weight_decay = 0.0;
  const std::vector<Tensor> params = admin ? admin->parameters() : lm.parameters();
  optim::AdamW opt(params, opts);
  optim::LambdaLR sched(opt, warmup ? optim::linear_warmup(tc.warmup) : optim::constant_schedule());

  std::vector<double> counts(256, 0.0);
  for (uint8_t c : corpus) counts[c] += 1;
  for (double c : counts)
    if (c > 0) run.unigram_entropy -= c / n * std::log(c / n);
  Generator data_gen(tc.seed + 1);  // the batches: the same for every configuration
  const int64_t B = tc.batch, T = tc.seq_len;
  for (int64_t step = 0; step < tc.steps; ++step) {
    std::vector<int64_t> in(B * T), tgt(B * T);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t start = static_cast<int64_t>(data_gen.next_u64() % static_cast<uint64_t>(n - T - 1));
      for (int64_t t = 0; t < T; ++t) {
        in[b * T + t] = corpus[start + t];
        tgt[b * T + t] = corpus[start + t + 1];
      }
    }
    if (admin && step == 0) admin->profile(from_vector(in, {B, T}));
    Tensor logits = model(from_vector(in, {B, T}));
    Tensor loss = losses::cross_entropy(logits, from_vector(tgt, {B, T}));
    const double l = loss.item();
    run.losses.push_back(l);
    if (!std::isfinite(l)) break;  // diverged: nothing more to learn from this run
    opt.zero_grad();
    loss.backward();
    run.grad_norms.push_back(std::sqrt(params_sq(params, true)));
    std::vector<Tensor> before;
    for (const Tensor& p : params) before.push_back(p.detach().clone());
    opt.step();
    double u = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      auto a = params[i].to_vector(), b = before[i].to_vector();
      for (std::size_t k = 0; k < a.size(); ++k) u += (a[k] - b[k]) * (a[k] - b[k]);
    }
    run.update_norms.push_back(std::sqrt(u));
    sched.step();
  }
  const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(run.losses.size()) / 10);
  double s = 0;
  for (int64_t i = static_cast<int64_t>(run.losses.size()) - k; i < static_cast<int64_t>(run.losses.size()); ++i)
    s += run.losses[i];
  run.final_loss = s / k;
  run.status = classify_run(run.losses, run.final_loss, run.unigram_entropy);
  return run;
}

}  // namespace xg::experiments

// A user's language-model script: a small decoder LM (nn::DecoderLM) learns the bytes of a
// text file with AdamW (weight decay on matrices only), a cosine schedule with warmup and
// gradient clipping; it is saved, loaded back and sampled from. Exits non-zero if the
// held-out loss did not fall or the reloaded model differs, so the test suite runs it.
//
//   train_lm TEXT_FILE OUT_DIR [STEPS]
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "xgrad.hpp"

namespace nn = xg::nn;
namespace optim = xg::optim;

// B rows of T + 1 consecutive tokens from ids[lo, hi), at offsets drawn from gen: inputs are
// the first T of each row, targets the last T (the next token of each input).
static std::pair<xg::Tensor, xg::Tensor> batch(const std::vector<int64_t>& ids, int64_t lo, int64_t hi, int64_t B,
                                               int64_t T, xg::Generator& gen) {
  const xg::Tensor starts = xg::randint(lo, hi - T - 1, {B}, &gen);
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = starts.data<int64_t>()[b];
    rows.insert(rows.end(), ids.begin() + s, ids.begin() + s + T + 1);
  }
  const xg::Tensor r = xg::from_blob(rows.data(), {B, T + 1}, xg::kInt64);  // copies rows
  return {r.narrow(1, 0, T), r.narrow(1, 1, T)};
}

// Mean next-byte loss in nats/token over `n` batches of held-out text (no graph, eval mode).
static double held_out_loss(nn::DecoderLM& model, const std::vector<int64_t>& ids, int64_t lo, int64_t hi,
                            int64_t T) {
  xg::NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  xg::Generator gen(1234);  // the same batches at every evaluation
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    auto [x, y] = batch(ids, lo, hi, 8, T, gen);
    total += xg::losses::cross_entropy(model(x), y).item();
  }
  return total / 4;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--help") {
    std::printf("usage: %s TEXT_FILE OUT_DIR [STEPS]\n\ntrains a byte-level decoder LM on TEXT_FILE (STEPS, "
                "default 300), saves it into OUT_DIR and samples from it\n", argv[0]);
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TEXT_FILE OUT_DIR [STEPS]\n", argv[0]);
    return 2;
  }
  const std::string out = argv[2];
  const int64_t steps = argc > 3 ? std::stoll(argv[3]) : 300;
  xg::manual_seed(0);

  // 1. Data: the file's bytes as token ids; the last tenth is held out.
  std::ifstream in(argv[1], std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const xg::text::ByteTokenizer tok;
  const std::vector<int64_t> ids = tok.encode(text);
  const int64_t T = 64, B = 8, split = static_cast<int64_t>(ids.size()) * 9 / 10;
  if (split - T - 1 <= 0 || static_cast<int64_t>(ids.size()) - split - T - 1 <= 0) {
    std::fprintf(stderr, "%s: %s is too short (%zu bytes)\n", argv[0], argv[1], ids.size());
    return 1;
  }

  // 2. The model: a 2-layer Pre-Norm decoder with RMSNorm, RoPE and SwiGLU, as in LLaMA.
  nn::LMConfig config;
  config.vocab_size = tok.vocab_size();
  config.n_layers = 2;
  config.block.d_model = 64;
  config.block.max_seq_len = T;
  config.block.norm = nn::RMSNormSpec{};
  config.block.position = nn::PositionKind::RoPE;
  nn::MHASpec attention;
  attention.n_heads = 4;
  attention.bias = false;
  config.block.attention = attention;
  config.block.ffn = nn::SwiGLUSpec{};
  auto model = std::make_shared<nn::DecoderLM>(config);

  // 3. AdamW with weight decay on the matrices only, warmup then cosine decay to 10%.
  optim::AdamWOptions opts;
  opts.lr = 3e-3;
  opts.weight_decay = 0.1;
  optim::AdamW opt(optim::weight_decay_groups(model->named_parameters(), opts));
  optim::LambdaLR sched(opt, optim::cosine_with_warmup(std::min<int64_t>(100, steps / 10), steps, 0.1));

  // 4. The loop: forward, loss, backward, clip, step.
  const double before = held_out_loss(*model, ids, split, static_cast<int64_t>(ids.size()), T);
  std::printf("held-out loss before training: %.4f nats/token\n", before);
  xg::Generator data(42);
  model->train();
  for (int64_t step = 1; step <= steps; ++step) {
    auto [x, y] = batch(ids, 0, split, B, T, data);
    xg::Tensor loss = xg::losses::cross_entropy((*model)(x), y);  // logits [B, T, V], targets [B, T]
    opt.zero_grad();
    loss.backward();
    const double norm = optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    sched.step();
    if (step % 50 == 0 || step == steps)
      std::printf("step %4lld  loss %.4f nats/token  grad norm %.3f  lr %.2e\n", static_cast<long long>(step),
                  loss.item(), norm, opt.lr(0));
  }
  const double after = held_out_loss(*model, ids, split, static_cast<int64_t>(ids.size()), T);
  std::printf("held-out loss after %lld steps: %.4f nats/token\n", static_cast<long long>(steps), after);

  // 5. Save (config.json + model.safetensors), load into a new model, compare.
  nn::save_pretrained(*model, out);
  std::shared_ptr<nn::DecoderLM> loaded = nn::load_pretrained(out);
  model->eval();
  loaded->eval();
  const std::vector<int64_t> probe_ids = tok.encode("The model");
  const xg::Tensor probe = xg::from_vector(probe_ids, {1, static_cast<int64_t>(probe_ids.size())});
  bool same;
  {
    xg::NoGradGuard no_grad;
    same = (*model)(probe).to_vector() == (*loaded)(probe).to_vector();
  }

  // 6. Generate. The prompt plus the new tokens are longer than max_seq_len (64), so the
  // window slides: each token is drawn from the last 64.
  nn::GenerateOptions g;
  g.temperature = 0.8;
  g.top_k = 40;
  g.seed = 7;
  g.sliding_window = true;
  const xg::Tensor prompt = xg::from_vector(tok.encode("## "), {1, 3});
  const xg::Tensor a = model->generate(prompt, 100, g), b = loaded->generate(prompt, 100, g);
  same = same && a.to_vector() == b.to_vector();
  const int64_t* p = a.data<int64_t>();
  std::printf("sample: %s\n", tok.decode(std::vector<int64_t>(p, p + a.numel())).c_str());
  std::printf("reloaded model: %s logits and sample\n", same ? "identical" : "DIFFERENT");
  return after < before && same ? 0 : 1;
}

// xgrad_step_bench: times whole training steps of the reference LLaMA-style byte LM (forward,
// cross-entropy, backward, AdamW) and prints one JSON object; --sgemm-peak times an n^3
// sgemm: xgrad's matmul (on the backend it chose), or OpenBLAS or oneDNN called directly.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <numeric>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "step_util.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/output.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"
#include "xgrad.hpp"

namespace {

using xg::cli::UsageError;
using json = nlohmann::ordered_json;
using xg::bench::median;
using xg::bench::peak_rss_mb;
using xg::bench::seconds_since;
namespace po = boost::program_options;

// The reference workload's shapes (bench/README.md). Defaults for warm-up and timed steps
// keep one run near 10-30 s on 2 cores.
struct BenchConfig {
  int64_t d, n_layers, n_heads, seq, batch, warmup, steps;
};

const std::map<std::string, BenchConfig>& configs() {
  static const std::map<std::string, BenchConfig> c = {
      {"tiny", {64, 2, 2, 64, 8, 10, 100}},
      {"small", {256, 4, 4, 128, 8, 3, 20}},
      {"medium", {512, 8, 8, 256, 4, 2, 10}},
      // GPT-2 small's width, depth, heads and context. Two warm-up steps: the first two fault in
      // the activations, gradients and AdamW's moments and settle the buffer cache (9.1 and
      // 6.1 s on the AMD EPYC of bench/README.md, 3.3-3.5 s from the third on).
      {"gpt2s", {768, 12, 12, 512, 4, 2, 3}},
  };
  return c;
}

constexpr int64_t kVocab = 256;  // bytes

// d_ff = 8/3 d rounded up to a multiple of 64 (64 -> 192, 256 -> 704, 512 -> 1408).
int64_t ffn_dim(int64_t d) { return ((8 * d + 2) / 3 + 63) / 64 * 64; }

// FLOP count (both scripts use the same formula, PaLM's "model FLOPs", Chowdhery et al. 2022,
// appendix B): per token, 6 N + 12 L T d, where
//   N = L (4 d^2 + 3 d d_ff) + d V   the parameters that take part in a matrix product: q, k,
//       v, o and the three SwiGLU projections of every block, and the LM head (the embedding
//       is a lookup and the norm gains are elementwise, so neither counts);
//   6 N = 2 N forward (a multiply-add per weight) + 4 N backward (input and weight gradients);
//   12 L T d = QK^T and attention-times-V, 2 T d each per token and layer forward, x3 for
//       forward + backward, over the full T x T scores (the causal half is not subtracted).
// Elementwise work (norms, RoPE, softmax, SiLU, cross-entropy, AdamW) is not counted.
constexpr const char* kFlopFormula =
    "per token 6*N + 12*L*T*d, N = L*(4*d^2 + 3*d*d_ff) + d*V (matmul weights incl. LM head, no embedding); "
    "per step times B*T tokens";

int64_t matmul_params(const BenchConfig& c) {
  return c.n_layers * (4 * c.d * c.d + 3 * c.d * ffn_dim(c.d)) + c.d * kVocab;
}

double flop_per_step(const BenchConfig& c) {
  const double per_token = 6.0 * static_cast<double>(matmul_params(c)) +
                           12.0 * static_cast<double>(c.n_layers * c.seq * c.d);
  return per_token * static_cast<double>(c.batch * c.seq);
}

// The reference model: byte vocabulary, pre-norm RMSNorm blocks, multi-head attention with
// rotate-half RoPE, SwiGLU, final RMSNorm, untied LM head; nn.Linear / nn.Embedding init.
xg::nn::LMConfig model_config(const BenchConfig& c) {
  xg::nn::LMConfig m;
  m.vocab_size = kVocab;
  m.n_layers = c.n_layers;
  m.block = xg::nn::BlockConfig::llama(c.d, c.n_heads, c.n_heads);  // n_kv_heads = n_heads: MHA
  m.block.rope_layout = xg::RopeLayout::RotateHalf;              // llama() picks Interleaved
  xg::nn::SwiGLUSpec ffn;
  ffn.d_ff = ffn_dim(c.d);
  m.block.ffn = ffn;
  m.block.max_seq_len = c.seq;
  m.tie_embeddings = false;
  m.final_norm = true;
  return m;
}

// B x (T + 1) uniform bytes per step: inputs are the first T, targets the last T.
std::vector<std::pair<xg::Tensor, xg::Tensor>> make_batches(const BenchConfig& c, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> byte(0, kVocab - 1);
  std::vector<std::pair<xg::Tensor, xg::Tensor>> batches;
  for (int64_t s = 0; s < count; ++s) {
    std::vector<int64_t> in(static_cast<std::size_t>(c.batch * c.seq)), tg(in.size());
    for (int64_t b = 0; b < c.batch; ++b) {
      int64_t prev = byte(rng);
      for (int64_t t = 0; t < c.seq; ++t) {
        const int64_t next = byte(rng);
        in[static_cast<std::size_t>(b * c.seq + t)] = prev;
        tg[static_cast<std::size_t>(b * c.seq + t)] = next;
        prev = next;
      }
    }
    batches.emplace_back(xg::from_vector(in, {c.batch, c.seq}), xg::from_vector(tg, {c.batch, c.seq}));
  }
  return batches;
}

// bf16: each step's forward and backward under xg::autocast (products in bf16, float32 master
// weights and AdamW state), as --bf16 runs xg-train.
json run_steps(const std::string& name, const BenchConfig& c, uint64_t seed, bool bf16) {
  xg::manual_seed(seed);
  xg::nn::DecoderLM model(model_config(c));
  model.train();
  xg::optim::AdamWOptions o;
  o.lr = 3e-4;
  o.weight_decay = 0.1;
  xg::optim::AdamW opt(model.parameters(), o);
  const auto batches = make_batches(c, c.warmup + c.steps, seed);

  std::vector<double> secs;
  double first_loss = 0, last_loss = 0;
  for (int64_t s = 0; s < c.warmup + c.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    xg::Tensor loss;
    {
      xg::autocast mixed(bf16);
      xg::Tensor logits = model(batches[static_cast<std::size_t>(s)].first);
      loss = xg::losses::cross_entropy(logits, batches[static_cast<std::size_t>(s)].second);
      loss.backward();
    }
    opt.step();
    last_loss = loss.item();
    const double dt = seconds_since(t0);
    if (s == 0) first_loss = last_loss;
    if (s >= c.warmup) secs.push_back(dt);
  }

  const double sec = median(secs);
  const double tokens = static_cast<double>(c.batch * c.seq);
  const double flop = flop_per_step(c);
  json j;
  j["impl"] = "xgrad";
  j["config"] = name;
  j["d_model"] = c.d;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["seq_len"] = c.seq;
  j["batch"] = c.batch;
  j["d_ff"] = ffn_dim(c.d);
  j["vocab"] = kVocab;
  j["params"] = model.num_parameters();
  j["params_matmul"] = matmul_params(c);
  j["warmup"] = c.warmup;
  j["steps"] = c.steps;
  j["ms_per_step"] = sec * 1e3;
  j["ms_per_step_min"] = *std::min_element(secs.begin(), secs.end()) * 1e3;
  j["ms_per_step_max"] = *std::max_element(secs.begin(), secs.end()) * 1e3;
  // The timed steps' total over their count: what a run takes. The median hides the steps a
  // busy core stalls (a spinning thread descheduled for a time slice), the mean counts them.
  j["ms_per_step_mean"] = std::accumulate(secs.begin(), secs.end(), 0.0) / static_cast<double>(secs.size()) * 1e3;
  j["tokens_per_s"] = tokens / sec;
  j["gflop_per_step"] = flop / 1e9;
  j["gflops"] = flop / sec / 1e9;
  j["flop_formula"] = kFlopFormula;
  j["peak_rss_mb"] = peak_rss_mb();
  j["threads"] = omp_get_max_threads();
  j["gemm"] = xg::gemm_backend_description();  // the library and kernels of the products
  j["bf16"] = bf16;
  if (bf16) j["gemm_bf16"] = xg::bf16_gemm_description();
  // attention's per-head products (autograd/attention.hpp): register-tiled or BLAS's
  j["attention_products"] =
      xg::attention_products_for(c.d / c.n_heads, c.d / c.n_heads, c.seq) == xg::AttentionProducts::Tiled ? "tiled"
                                                                                                         : "blas";
  j["thread_policy"] = xg::threads_description();
  j["settings"] = xg::cli::settings_json();
  j["loss_first"] = first_loss;
  j["loss_last"] = last_loss;
  j["seed"] = seed;
  return j;
}

// The step's matrix products alone, through xgrad's ops, forward and backward (input and
// weight gradients), as the step runs them: per layer q, k and v side by side in one d -> 3d
// output (xg::linear_cat, as nn::linear_stacked runs them), o (d -> d), gate and up
// (d -> d_ff) and down (d_ff -> d) as xg::linear, and the fused causal attention reading the packed projection
// (scaled_dot_product_attention_packed, whose products are QK^T and PV, with its softmax
// inside); the LM head (d -> 256) once.
// Nothing else of the step (norms, RoPE, SwiGLU, residuals, cross-entropy, AdamW) runs, so
// flop_per_step / this time is the most the whole step could reach with these products: the
// ceiling against which "xgrad of the sgemm peak" is read. Median of `reps` passes.
json products_only(const std::string& name, const BenchConfig& c, int64_t reps, bool bf16) {
  xg::Generator gen(0);
  const int64_t M = c.batch * c.seq, d = c.d, F = ffn_dim(c.d), hs = c.d / c.n_heads;
  auto param = [&](const xg::Shape& shape) { return xg::randn(shape, xg::kFloat32, &gen).requires_grad_(); };
  struct Proj {
    const char* name;
    int64_t in, out, count;  // count: how many of this shape a step runs
  };
  const std::vector<Proj> projs = {{"q, k, v (three d -> d products into one d -> 3d output)", d, 3 * d, c.n_layers},
                                   {"o (d -> d)", d, d, c.n_layers},
                                   {"gate, up (d -> d_ff)", d, F, 2 * c.n_layers},
                                   {"down (d_ff -> d)", F, d, c.n_layers},
                                   {"LM head (d -> vocab)", d, kVocab, 1}};
  struct Operands {
    xg::Tensor x;
    std::vector<xg::Tensor> ws;  // q, k and v's three weights; one for the other kinds
    xg::Tensor g;
    int64_t count;
  };
  std::vector<Operands> ops;
  for (std::size_t kind = 0; kind < projs.size(); ++kind) {
    const Proj& p = projs[kind];
    const int64_t n = kind == 0 ? 3 : 1;
    std::vector<xg::Tensor> ws;
    for (int64_t i = 0; i < n; ++i) ws.push_back(param({p.out / n, p.in}));
    ops.push_back({param({M, p.in}), ws, xg::randn({M, p.out}, xg::kFloat32, &gen), p.count});
  }
  // Each kind's time within a pass, to show which shapes hold the products below the peak.
  std::vector<std::vector<double>> kind_secs(projs.size() + 1);
  xg::Tensor qkv = param({c.batch, c.seq, 3 * c.n_heads, hs});
  const xg::Tensor go = xg::randn({c.batch, c.seq, c.n_heads * hs}, xg::kFloat32, &gen);
  // One pass runs every product of a step back to back, as the step does; the gradients are
  // dropped after each call (a step's parameter gradients start from none).
  auto pass = [&](bool timed) {
    xg::autocast mixed(bf16);  // --bf16: the products as a --bf16 step runs them
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t kind = 0; kind < ops.size(); ++kind) {
      Operands& o = ops[kind];
      const auto tk = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < o.count; ++i) {
        (o.ws.size() == 1 ? xg::linear(o.x, o.ws[0]) : xg::linear_cat(o.x, o.ws)).backward(o.g);
        o.x.zero_grad();
        for (xg::Tensor& w : o.ws) w.zero_grad();
      }
      if (timed) kind_secs[kind].push_back(seconds_since(tk));
    }
    const auto ta = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < c.n_layers; ++l) {
      xg::scaled_dot_product_attention_packed(qkv, c.n_heads, c.n_heads, xg::AttnMask::causal_mask()).backward(go);
      qkv.zero_grad();
    }
    if (timed) kind_secs.back().push_back(seconds_since(ta));
    return seconds_since(t0);
  };
  pass(false);  // warm-up: buffers cached, kernels generated
  std::vector<double> secs;
  for (int64_t r = 0; r < reps; ++r) secs.push_back(pass(true));
  const double sec = median(secs);
  json j;
  j["impl"] = "xgrad products only";
  j["config"] = name;
  j["reps"] = reps;
  j["ms_per_step"] = sec * 1e3;
  j["gflop_per_step"] = flop_per_step(c) / 1e9;
  j["gflops"] = flop_per_step(c) / sec / 1e9;
  j["flop_formula"] = kFlopFormula;
  j["threads"] = omp_get_max_threads();
  j["gemm"] = xg::gemm_backend_description();
  j["bf16"] = bf16;
  if (bf16) j["gemm_bf16"] = xg::bf16_gemm_description();
  j["settings"] = xg::cli::settings_json();
  // Per kind: forward + both gradients at 6 M in out per product (the attention at the formula's
  // 12 T d per token and layer, over the full T x T though the causal half is skipped).
  json kinds = json::array();
  for (std::size_t kind = 0; kind <= projs.size(); ++kind) {
    const bool attn = kind == projs.size();
    const double flop = attn ? 12.0 * static_cast<double>(c.n_layers * c.seq * c.d * M)
                             : 6.0 * static_cast<double>(M * projs[kind].in * projs[kind].out * projs[kind].count);
    const double t = median(kind_secs[kind]);
    kinds.push_back({{"kind", attn ? "causal attention (QK^T, PV)" : projs[kind].name},
                     {"ms", t * 1e3},
                     {"share_of_flop", flop / flop_per_step(c)},
                     {"gflops", flop / t / 1e9}});
  }
  j["by_kind"] = kinds;
  return j;
}

// C = A B on n x n float32 matrices: the rate a product reaches. impl "xgrad" is xg::matmul
// (the backend gemm_backend() chose, xgrad's split over threads, the output's allocation);
// "openblas" and "onednn" call cblas_sgemm and dnnl_sgemm directly (the kernels' own rate).
json sgemm_peak(const std::string& impl, int64_t n, int64_t reps) {
  xg::Generator gen(0);
  const xg::Tensor a = xg::randn({n, n}, xg::kFloat32, &gen), b = xg::randn({n, n}, xg::kFloat32, &gen);
  xg::Tensor out = xg::zeros({n, n}, xg::kFloat32);
  const float *pa = a.data<float>(), *pb = b.data<float>();
  float* pc = out.data<float>();
  const int ni = static_cast<int>(n);
  std::function<void()> call;
  std::string kernels;
  if (impl == "xgrad") {
    call = [&] {
      xg::NoGradGuard ng;
      out = xg::matmul(a, b);
    };
    kernels = xg::gemm_backend_description();
  } else if (impl == "openblas") {
    call = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, pa, ni, pb, ni, 0.0f, pc, ni);
    };
    kernels = xg::gemm_kernels(xg::GemmBackend::OpenBLAS);
  } else {
    call = [&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, pa, n, pb, n, 0.0f, pc, n); };
    kernels = xg::gemm_kernels(xg::GemmBackend::OneDNN);
  }
  call();  // warm-up: threads started, pages touched, kernels generated
  std::vector<double> secs;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    secs.push_back(seconds_since(t0));
  }
  const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  json j;
  j["impl"] = impl;
  j["kernels"] = kernels;
  j["n"] = n;
  j["reps"] = reps;
  j["ms_per_call"] = median(secs) * 1e3;
  j["gflops"] = flop / median(secs) / 1e9;
  j["gflops_best"] = flop / *std::min_element(secs.begin(), secs.end()) / 1e9;
  j["flop_formula"] = "2*n^3 per call";
  j["threads"] = omp_get_max_threads();
  j["settings"] = xg::cli::settings_json();
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "tiny";
  std::string sgemm_impl = "xgrad";
  int64_t warmup = -1, steps = -1, sgemm_n = 2048, sgemm_reps = 7;
  uint64_t seed = 0;
  bool sgemm = false, products = false, bf16 = false;
  po::options_description opts = xg::cli::flag_group("options");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("config", po::value(&config)->default_value(config), "tiny | small | medium | gpt2s")
    ("warmup", po::value(&warmup)->default_value(warmup), "untimed steps first (-1: the config's default)")
    ("steps", po::value(&steps)->default_value(steps), "timed steps (-1: the config's default)")
    ("seed", po::value(&seed)->default_value(seed), "seeds the initialisation and the token batches")
    ("bf16", po::bool_switch(&bf16), "mixed precision: forward and backward under xg::autocast (bf16 products)")
    ("products", po::bool_switch(&products),
     "time only the config's matrix products (linear layers and attention, forward + backward; the step's ceiling)")
    ("sgemm-peak", po::bool_switch(&sgemm), "time an sgemm instead (n x n x n, median of --sgemm-reps)")
    ("sgemm-impl", po::value(&sgemm_impl)->default_value(sgemm_impl),
     "xgrad (xg::matmul) | openblas | onednn (their sgemm called directly)")
    ("sgemm-size", po::value(&sgemm_n)->default_value(sgemm_n), "n of --sgemm-peak")
    ("sgemm-reps", po::value(&sgemm_reps)->default_value(sgemm_reps), "timed calls of --sgemm-peak");
  // clang-format on
  const std::string usage =
      "usage: xgrad_step_bench [--config tiny|small|medium|gpt2s] [--warmup N] [--steps N] [--seed S] [--bf16]\n"
      "       xgrad_step_bench --products [--config ...] [--steps N]\n"
      "       xgrad_step_bench --sgemm-peak [--sgemm-impl xgrad|openblas|onednn] [--sgemm-size N]\n"
      "Times training steps of the reference LLaMA-style byte LM and prints one JSON object.";
  int threads = 0;
  opts.add(xg::cli::threads_flag(threads));
  BenchConfig c{};
  return xg::cli::run_main(
      "xgrad_step_bench",
      [&] {
        po::variables_map vm;
        if (xg::cli::parse(argc, argv, opts, vm, usage)) return 0;
        xg::cli::apply_threads(threads);
        if (sgemm) {
          xg::cli::require(sgemm_n > 0, "--sgemm-size must be positive, got " + std::to_string(sgemm_n));
          xg::cli::require(sgemm_reps > 0, "--sgemm-reps must be positive, got " + std::to_string(sgemm_reps));
          xg::cli::require(sgemm_impl == "xgrad" || sgemm_impl == "openblas" || sgemm_impl == "onednn",
                           "--sgemm-impl: expected xgrad, openblas or onednn, got '" + sgemm_impl + "'");
          return -1;
        }
        c = xg::cli::choice("config", config, configs());
        if (warmup >= 0) c.warmup = warmup;
        if (steps >= 0) c.steps = steps;
        xg::cli::require(warmup >= -1, "--warmup must be >= 0, got " + std::to_string(warmup));
        xg::cli::require(c.steps > 0, "--steps must be positive, got " + std::to_string(steps));
        return -1;
      },
      [&] {
        const json j = sgemm      ? sgemm_peak(sgemm_impl, sgemm_n, sgemm_reps)
                       : products ? products_only(config, c, c.steps, bf16)
                                  : run_steps(config, c, seed, bf16);
        std::cout << j.dump() << std::endl;
        return 0;
      });
}

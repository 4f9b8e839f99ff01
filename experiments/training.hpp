// Training stability of Post-Norm, Pre-Norm, DeepNorm (Wang et al. 2022) and Admin (Liu et al.
// 2020, experiments/admin.hpp) decoders (part 4,
// --train): small byte-level decoder LMs trained on real text at several depths, with and
// without a learning-rate warmup, at several learning rates; loss curves and which runs diverge.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/block.hpp"

namespace xg::experiments {

struct TrainConfig {
  std::string corpus = "/usr/share/common-licenses/GPL-3";  // any text file (Debian's base-files has this one)
  int64_t d_model = 32;
  int64_t n_heads = 4;
  int64_t seq_len = 32;
  int64_t batch = 8;
  int64_t steps = 150;
  int64_t warmup = 50;  // steps of linear warmup in the runs "with warmup"
  uint64_t seed = 42;
};

// The methods compared: the block's three norm positions, and Admin (a Post-Norm LM with
// profiled residual scales, experiments/admin.hpp).
enum class TrainMethod { Post, Pre, DeepNorm, Admin };
const char* train_method_name(TrainMethod m);  // "post", "pre", "deepnorm", "admin"

struct TrainRun {
  nn::NormPosition norm = nn::NormPosition::Pre;  // Post for Admin
  TrainMethod method = TrainMethod::Pre;
  int64_t depth = 0;
  double lr = 0;
  bool warmup = false;
  std::vector<double> losses;  // per step (NaN/inf kept as they came)
  std::vector<double> grad_norms, update_norms;  // per step: ||g|| before AdamW, ||theta_new - theta_old||
  double final_loss = 0;       // mean of the last 10% of the steps
  std::string status;  // classify_run's
  double unigram_entropy = 0;  // of the corpus's bytes, nats
};

// "diverged": a loss turned non-finite, or the final loss (mean of the last 10% of the steps)
// rose more than 0.5 nats above the first; "stalled": finite and ending within 0.05 nats of
// the unigram entropy or anywhere above it (at best the byte frequencies were learned, nothing
// of the context) and no longer improving; "slow": there but still falling (a learning rate too
// small for the run's length, not an instability); "ok" otherwise.
std::string classify_run(const std::vector<double>& losses, double final_loss, double unigram_entropy);

// The corpus as bytes; throws xg::Error naming the file if it cannot be read or is shorter
// than two sequences.
std::vector<uint8_t> read_corpus(const std::string& path, int64_t min_bytes);

// One run: a DecoderLM (byte vocabulary, learned positions, LayerNorm, GELU MHA blocks of the
// given norm position; a final norm except for Post-Norm/DeepNorm, whose last block ends in one),
// AdamW (betas 0.9/0.98, no weight decay, no gradient clipping, so that instability shows),
// random windows of the corpus. Same seed -> same batches for every configuration.
// DeepNorm runs zero every bias of the blocks' linear layers, as the reference implementations
// (torchscale, fairseq's deepnorm) do; the other runs keep nn.Linear's default.
// Admin runs profile omega on the first training batch before the first step (Algorithm 1).
TrainRun train_run(const TrainConfig& config, const std::vector<uint8_t>& corpus, TrainMethod method,
                   int64_t depth, double lr, bool warmup);
TrainRun train_run(const TrainConfig& config, const std::vector<uint8_t>& corpus, nn::NormPosition norm,
                   int64_t depth, double lr, bool warmup);

}  // namespace xg::experiments

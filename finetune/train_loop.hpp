// The loop every trainer shares (pre-training, SFT, DPO, GRPO): an optimizer over the
// trainable parameters (AdamW with weight-decay groups unless given one), LR schedule, gradient accumulation, clipping, periodic evaluation, logging and
// checkpoints that resume bit for bit. It runs in the world finetune::world() says (one
// process, or under mpirun the ranks distributed::Session installed): each rank runs its
// grad_accum micro-batches of the step, the gradients are summed over the ranks, every rank
// takes the same optimizer step, and rank 0 alone evaluates, logs and writes checkpoints.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "autograd/random.hpp"
#include "finetune/checkpoint.hpp"
#include "finetune/run_log.hpp"
#include "finetune/zero.hpp"
#include "nn/module.hpp"
#include "optim/optim.hpp"

namespace xg::finetune {

// The learning-rate shape after the warmup (optim/schedule.hpp).
enum class LrSchedule { Constant, Cosine, Linear };
// What a non-finite loss or gradient does to the run.
enum class NanPolicy { Stop, Skip };

// A warmup of min(max_auto_warmup, steps / 10) steps: a run of any length gets one.
constexpr int64_t kAutoWarmup = -1;

struct LoopOptions {
  int64_t steps = 1000;  // optimizer steps
  int64_t grad_accum = 1;  // micro-batches per step (per rank under MPI)
  double lr = 1e-3;
  int64_t warmup = 0;                // linear warmup steps, or kAutoWarmup
  int64_t max_auto_warmup = 100;     // the longest warmup kAutoWarmup picks
  LrSchedule schedule = LrSchedule::Cosine;
  double min_lr_ratio = 0.1;         // floor of cosine / end of linear, as a fraction of lr
  double weight_decay = 0.1;         // AdamW's, on matrices only (not on 1-d params)
  double beta1 = 0.9, beta2 = 0.95;  // AdamW's betas (0.95: the usual LM choice; torch defaults 0.999)
  double clip = 1.0;                 // max global grad norm; 0 = off
  int64_t log_every = 10;            // plain log lines when not on a terminal
  int64_t eval_every = 0;            // 0 = only at the end
  bool eval_at_start = false;        // also evaluate before the first step (not on resume)
  int64_t checkpoint_every = 0;      // 0 = only at the end
  std::string out_dir;               // checkpoint.safetensors and log.jsonl go here ("" = none)
  bool resume = false;               // continue from <out_dir>/checkpoint.safetensors
  uint64_t seed = 0;                 // of the data generator and of xg::default_generator()
  // A non-finite loss or gradient: Stop (an error naming the step; the last checkpoint is
  // kept) or Skip (no update this step, a "skip" record in the log). Either way the
  // weights, and so every checkpoint, stay finite.
  NanPolicy on_nan = NanPolicy::Stop;
  // With Skip: the largest share of --steps that may be skipped. A run past it has diverged:
  // it stops with the count (its model is never written; the last checkpoint is kept).
  double max_skipped = 0.1;
  bool detect_anomaly = false;       // name the first op and module that made a NaN/Inf (slow)
  // Activation checkpointing: every DecoderLM in the model recomputes its blocks in backward
  // (DecoderLM::set_gradient_checkpointing); less memory, about one more forward per step.
  bool gradient_checkpointing = false;
  // Mixed precision (--bf16): every micro-batch's forward and backward, and the evaluation,
  // run under xg::autocast (autograd/autocast.hpp: products in bf16, the rest float32);
  // the weights, their gradients and AdamW's state stay float32, as TrainingArguments(bf16=True).
  bool bf16 = false;
  // ZeRO stage (--zero): 0 = every rank holds AdamW's whole state; 1 = each rank holds it for
  // a 1/N slice of the trained parameters (finetune/zero.hpp), sums the gradients only there,
  // updates it and shares it with the others; 2 = as 1, and each rank keeps only its slice's
  // summed gradient (the full-size ones are dropped as their sums go out), 1/N of the gradients
  // at the optimizer step. The weights are bitwise those of stage 0 at the same ranks x
  // grad_accum, and a checkpoint is the same file at every stage.
  int zero = 0;
  // Under mpirun: sum each bucket of gradients while the last micro-batch's backward still runs,
  // as soon as backward has finished its parameters (PyTorch DDP's overlap), or all of them after
  // it (false). The same bits either way; the train log's comm_wait_s says how long rank 0 waited
  // for the sums after its backward.
  bool overlap_grad_sum = true;
  // The most a bucket of gradients summed at once holds, in MB (PyTorch DDP's bucket_cap_mb):
  // smaller buckets start summing earlier in backward, bigger ones send fewer messages.
  double bucket_mb = 32;
  // The best model so far and early stopping (transformers' metric_for_best_model,
  // load_best_model_at_end and EarlyStoppingCallback): each evaluation's `best_metric` is
  // compared with the best before it, lower being better for a name ending in "loss" and
  // higher otherwise (transformers' greater_is_better default); it improves when it passes the
  // best by more than early_stopping_threshold. With early_stopping_patience > 0 the run stops
  // after that many evaluations in a row without an improvement (a checkpoint at that step).
  std::string best_metric;             // "" = not tracked
  int64_t early_stopping_patience = 0;  // 0 = never stop early
  double early_stopping_threshold = 0.0;

  // The warmup the run uses: `warmup`, or for kAutoWarmup min(max_auto_warmup, steps / 10).
  int64_t warmup_steps() const;
  // Throws an xg::Error naming the option (by its field name: "TrainLoop: steps must be
  // positive, got 0"); the command line maps those names to its flags (tools/cli/loop_flags.hpp).
  void validate() const;
};

// One micro-batch's loss (before the 1/grad_accum scaling the loop applies), the number of
// tokens it trained on, and metrics to log (averaged over the step's micro-batches).
struct MicroResult {
  Tensor loss;
  int64_t tokens = 0;
  Metrics metrics;
};

class TrainLoop {
 public:
  // trainable: the parameters the optimizer updates, by name (frozen ones left out). `model`
  // is switched to train() for steps and eval() for evaluations. With
  // options.gradient_checkpointing, it (or a module below it) must be a DecoderLM.
  // The optimizer is AdamW over weight_decay_groups(trainable) with options.lr, beta1, beta2
  // and weight_decay.
  TrainLoop(std::string program, nn::Module& model, nn::NamedTensors trainable, LoopOptions options);
  // Any optimizer: make_optimizer(trainable) builds it over (some of) those parameters, whose
  // group lrs are the peak the schedule scales (options.lr, beta1, beta2 and weight_decay
  // then go unused). Its state_dict goes into every checkpoint.
  using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(const nn::NamedTensors& trainable)>;
  TrainLoop(std::string program, nn::Module& model, nn::NamedTensors trainable, LoopOptions options,
            const OptimizerFactory& make_optimizer);

  // micro(step, micro, data_rng): draws its batch from data_rng and returns its loss.
  // `micro` numbers the step's micro-batches over all ranks, 0 .. grad_accum * ranks - 1
  // (rank r runs r * grad_accum ..., see micro_seed); data_rng is seeded for (seed, step,
  // micro) and so is the default generator (dropout), so a micro-batch is the same whichever
  // rank runs it and N ranks x k micro-batches equal one process with N * k.
  std::function<MicroResult(int64_t step, int64_t micro, Generator& data_rng)> micro_step;
  // evaluate(step): held-out metrics (run without a graph, model in eval mode), on rank 0
  // only. Optional.
  std::function<Metrics(int64_t step)> evaluate;
  // after_step(step): after each optimizer step (step = steps done), e.g. to print a sample;
  // on rank 0 only. Optional.
  std::function<void(int64_t step)> after_step;
  // on_best(step, value): on rank 0, when an evaluation improves options.best_metric (the
  // first evaluation always does), e.g. to keep that model as the best. Optional.
  std::function<void(int64_t step, double value)> on_best;
  // Extra strings saved in every checkpoint and checked on resume (e.g. the model config):
  // a resumed run with different values is an error naming the key.
  std::map<std::string, std::string> run_identity;

  // Runs from step 0, or from the checkpoint when options.resume and it exists. Returns the
  // last evaluation's metrics (empty without `evaluate`).
  Metrics run();

  int64_t start_step() const { return start_step_; }
  // The step of the best evaluation (-1: none yet) and its best_metric; whether the run
  // stopped early (and at which step).
  int64_t best_step() const { return best_step_; }
  double best_value() const { return best_value_; }
  int64_t stopped_early_at() const { return stopped_at_; }
  optim::Optimizer& optimizer() { return *opt_; }
  RunLog& log() { return *log_; }
  std::string checkpoint_path() const;
  // Writes the checkpoint for `step` steps done (atomically).
  void save(int64_t step);

 private:
  bool try_resume();
  Metrics run_eval(int64_t step);
  // Runs the step's micro-batches and backward; "" when loss and gradients are finite, else
  // what was not (the grads are then dropped). Sums the micro-batches' metrics into `sum`.
  std::string forward_backward(int64_t step, Metrics& sum, int64_t& tokens);
  // Compares an evaluation with the best so far (rank 0); true when the run is to stop early.
  // Every rank gets the verdict.
  bool track_best(int64_t step, const Metrics& m);
  int64_t bucket_bytes() const { return std::max<int64_t>(1, static_cast<int64_t>(o_.bucket_mb * (1 << 20))); }

  std::string program_;
  nn::Module& model_;
  nn::NamedTensors trainable_;
  LoopOptions o_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::unique_ptr<optim::LambdaLR> sched_;
  std::unique_ptr<RunLog> log_;
  std::unique_ptr<ZeroShards> zero_;  // with zero 1 or 2
  int64_t start_step_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t skipped_ = 0;
  int64_t best_step_ = -1;
  double best_value_ = 0;
  int64_t evals_without_best_ = 0;
  int64_t stopped_at_ = -1;
  double comm_wait_ = 0;  // seconds the last step waited for its gradient sums after backward
};

// The seed of micro-batch `micro` of step `step` (0-based) of a run seeded with `seed`:
// stream 0 seeds its data generator, stream 1 the default generator (dropout).
uint64_t micro_seed(uint64_t seed, int64_t step, int64_t micro, uint64_t stream);

// The schedule LoopOptions names, with its warmup_steps() (validated there).
optim::Schedule make_schedule(const LoopOptions& o);

}  // namespace xg::finetune

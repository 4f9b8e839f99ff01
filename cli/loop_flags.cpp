// The trainers' shared training-loop flags (see loop_flags.hpp).
#include "cli/loop_flags.hpp"

#include "autograd/error.hpp"
#include "cli/flags.hpp"
#include "cli/output.hpp"

namespace xg::cli {

po::options_description loop_flags(finetune::LoopOptions& o, const std::string& seed_help) {
  po::options_description g("training loop");
  // clang-format off
  g.add_options()
    ("lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate (AdamW over the trained parameters)")
    ("warmup", po::value(&o.warmup)->default_value(o.warmup), "linear warmup steps")
    ("schedule", po::value(&o.schedule)->default_value(o.schedule), "cosine | linear | constant (after the warmup)")
    ("min-lr-ratio", po::value(&o.min_lr_ratio)->default_value(o.min_lr_ratio), "final lr / peak lr (cosine, linear)")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "AdamW weight decay (not on 1-d parameters)")
    ("clip", po::value(&o.clip)->default_value(o.clip), "max gradient norm (0 = off)")
    ("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps")
    ("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum), "micro-batches per optimizer step (per rank under mpirun)")
    ("seed", po::value(&o.seed)->default_value(o.seed), seed_help.c_str())
    ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "held-out evaluation every N steps (0 = at the end only)")
    ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every), "checkpoint every N steps (0 = at the end only)")
    ("log-every", po::value(&o.log_every)->default_value(o.log_every), "log line every N steps when not on a terminal")
    ("resume", po::bool_switch(&o.resume), "continue from <out>/checkpoint.safetensors (same flags)")
    ("on-nan", po::value(&o.on_nan)->default_value(o.on_nan), "a NaN/Inf loss or gradient: stop (error, last checkpoint kept) | skip (no update that step)")
    ("max-skipped", po::value(&o.max_skipped)->default_value(o.max_skipped, fmt("%g", o.max_skipped)), "with --on-nan skip: the largest share of --steps that may be skipped before the run fails as diverged")
    ("detect-anomaly", po::bool_switch(&o.detect_anomaly), "name the first op and module that made a NaN/Inf (slower)")
    ("gradient-checkpointing", po::bool_switch(&o.gradient_checkpointing), "recompute each block's activations in backward (less memory, about one more forward per step)");
  // clang-format on
  return g;
}

void validate_loop(const finetune::LoopOptions& o, const std::string& program) {
  try {
    o.validate(program);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace xg::cli

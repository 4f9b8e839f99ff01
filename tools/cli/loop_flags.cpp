// The trainers' shared training-loop flags (see loop_flags.hpp).
#include "tools/cli/loop_flags.hpp"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <tuple>

#include "autograd/error.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/output.hpp"

namespace xg::cli {

finetune::LrSchedule parse_schedule(const std::string& text) {
  if (text == "constant") return finetune::LrSchedule::Constant;
  if (text == "cosine") return finetune::LrSchedule::Cosine;
  if (text == "linear") return finetune::LrSchedule::Linear;
  throw UsageError("--schedule: expected constant, cosine or linear, got '" + text + "'");
}

finetune::NanPolicy parse_nan_policy(const std::string& text) {
  if (text == "stop") return finetune::NanPolicy::Stop;
  if (text == "skip") return finetune::NanPolicy::Skip;
  throw UsageError("--on-nan: expected stop or skip, got '" + text + "'");
}

std::string schedule_name(finetune::LrSchedule s) {
  switch (s) {
    case finetune::LrSchedule::Constant: return "constant";
    case finetune::LrSchedule::Linear: return "linear";
    case finetune::LrSchedule::Cosine: break;
  }
  return "cosine";
}

std::string nan_policy_name(finetune::NanPolicy p) { return p == finetune::NanPolicy::Skip ? "skip" : "stop"; }

std::pair<double, double> parse_betas(const std::string& text) {
  const std::size_t comma = text.find(',');
  auto number = [&](const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size() || !(v >= 0 && v < 1))
      throw UsageError("--adam-betas: expected BETA1,BETA2 with each in [0, 1), got '" + text + "'");
    return v;
  };
  if (comma == std::string::npos) number("");
  return {number(text.substr(0, comma)), number(text.substr(comma + 1))};
}

po::options_description loop_flags(finetune::LoopOptions& o, const std::string& seed_help) {
  po::options_description g = cli::flag_group("training loop");
  const std::string auto_help = str_cat("linear warmup steps (auto: min(", o.max_auto_warmup, ", steps / 10), for a run of any length)");
  // clang-format off
  g.add_options()
    ("lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate (AdamW over the trained parameters)")
    ("warmup", po::value(&o.warmup)->default_value(o.warmup, o.warmup == finetune::kAutoWarmup ? "auto" : std::to_string(o.warmup)),
       o.warmup == finetune::kAutoWarmup ? auto_help.c_str() : "linear warmup steps")
    ("schedule", po::value<std::string>()->default_value(schedule_name(o.schedule))
       ->notifier([&o](const std::string& v) { o.schedule = parse_schedule(v); }), "cosine | linear | constant (after the warmup)")
    ("min-lr-ratio", po::value(&o.min_lr_ratio)->default_value(o.min_lr_ratio), "final lr / peak lr (cosine, linear)")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "AdamW weight decay (not on 1-d parameters)")
    ("adam-betas", po::value<std::string>()->default_value(fmt("%g", o.beta1) + "," + fmt("%g", o.beta2))
       ->notifier([&o](const std::string& v) { std::tie(o.beta1, o.beta2) = parse_betas(v); }),
       "AdamW's beta1,beta2 (torch's default is 0.9,0.999; TRL's is 0.9,0.999 too)")
    ("clip", po::value(&o.clip)->default_value(o.clip), "max gradient norm (0 = off)")
    ("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps")
    ("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum), "micro-batches per optimizer step (per rank under mpirun)")
    ("seed", po::value(&o.seed)->default_value(o.seed), seed_help.c_str())
    ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "held-out evaluation every N steps (0 = at the end only)")
    ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every), "checkpoint every N steps (0 = at the end only)")
    ("log-every", po::value(&o.log_every)->default_value(o.log_every), "log line every N steps when not on a terminal")
    ("resume", po::bool_switch(&o.resume), "continue from <out>/checkpoint.safetensors (same flags)")
    ("on-nan", po::value<std::string>()->default_value(nan_policy_name(o.on_nan))
       ->notifier([&o](const std::string& v) { o.on_nan = parse_nan_policy(v); }), "a NaN/Inf loss or gradient: stop (error, last checkpoint kept) | skip (no update that step)")
    ("max-skipped", po::value(&o.max_skipped)->default_value(o.max_skipped, fmt("%g", o.max_skipped)), "with --on-nan skip: the largest share of --steps that may be skipped before the run fails as diverged")
    ("detect-anomaly", po::bool_switch(&o.detect_anomaly), "name the first op and module that made a NaN/Inf (slower)")
    ("gradient-checkpointing", po::bool_switch(&o.gradient_checkpointing), "recompute each block's activations in backward (less memory, about one more forward per step)")
    ("zero", po::value(&o.zero)->default_value(o.zero), "ZeRO stage under mpirun: 0 = every rank holds all of AdamW's state; 1 = each rank holds it for 1/N of the trained weights; 2 = and keeps only those weights' summed gradients (1/N of the gradients at the step; same weights and checkpoints at every stage)")
    ("overlap-grad-sum", po::value(&o.overlap_grad_sum)->default_value(o.overlap_grad_sum), "under mpirun: 1 = sum each bucket of gradients while backward still runs; 0 = all after backward (same weights)")
    ("bucket-mb", po::value(&o.bucket_mb)->default_value(o.bucket_mb, fmt("%g", o.bucket_mb)), "under mpirun: the most MB of gradients summed in one bucket")
    ("bf16", po::bool_switch(&o.bf16), "mixed precision: matrix products in bfloat16 (xg::autocast), weights, gradients and AdamW state float32; "
     "faster only where bf16 products run as such (AVX512-BF16 or AMX: the kernels line below)");
  // clang-format on
  return g;
}

std::string loop_error_for_flags(const std::string& message, const std::string& program) {
  // "TrainLoop: warmup 20 is longer than the run (steps 10)"
  //   -> "PROGRAM: --warmup 20 is longer than the run (--steps 10)"
  std::string text = message.rfind("TrainLoop: ", 0) == 0 ? message.substr(11) : message;
  for (std::string name : {"steps", "grad_accum", "lr", "warmup", "min_lr_ratio", "weight_decay", "clip", "eval_every",
                           "checkpoint_every", "log_every", "max_skipped", "zero", "bucket_mb"}) {
    std::string flag = "--" + name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    text = std::regex_replace(text, std::regex("\\b" + name + "\\b"), flag);
  }
  return program + ": " + text;
}

void validate_loop(const finetune::LoopOptions& o, const std::string& program) {
  try {
    o.validate();
  } catch (const Error& e) {
    throw UsageError(loop_error_for_flags(e.what(), program));
  }
}

}  // namespace xg::cli

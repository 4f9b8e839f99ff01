// TrainLoop: the step loop with accumulation, clipping, schedule, evaluation and checkpoints.
#include "finetune/train_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autograd/anomaly.hpp"
#include "autograd/autocast.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/error.hpp"
#include "autograd/gemm_backend.hpp"
#include "autograd/grad_hook.hpp"
#include "autograd/graph.hpp"
#include "autograd/memory.hpp"
#include "autograd/settings.hpp"
#include "finetune/world.hpp"
#include "io/atomic_file.hpp"
#include "nn/decoder.hpp"

namespace xg::finetune {

int64_t LoopOptions::warmup_steps() const {
  return warmup == kAutoWarmup ? std::min(max_auto_warmup, steps / 10) : warmup;
}

void LoopOptions::validate() const {
  const char* who = "TrainLoop";
  check(steps > 0, who, ": steps must be positive, got ", steps);
  check(grad_accum > 0, who, ": grad_accum must be positive, got ", grad_accum);
  check(lr > 0 && std::isfinite(lr), who, ": lr must be positive, got ", lr);
  check(warmup >= 0 || warmup == kAutoWarmup, who, ": warmup must be >= 0, or -1 for auto (kAutoWarmup), got ", warmup);
  check(max_auto_warmup >= 0, who, ": max_auto_warmup must be >= 0, got ", max_auto_warmup);
  check(warmup <= steps, who, ": warmup ", warmup, " is longer than the run (steps ", steps, ")");
  check(min_lr_ratio >= 0 && min_lr_ratio <= 1, who, ": min_lr_ratio must be in [0, 1], got ", min_lr_ratio);
  check(weight_decay >= 0, who, ": weight_decay must be >= 0, got ", weight_decay);
  check(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, who, ": AdamW's betas must be in [0, 1), got ", beta1, ", ",
        beta2);
  check(clip >= 0, who, ": clip must be >= 0 (0 = off), got ", clip);
  check(eval_every >= 0, who, ": eval_every must be >= 0, got ", eval_every);
  check(checkpoint_every >= 0, who, ": checkpoint_every must be >= 0, got ", checkpoint_every);
  check(log_every >= 0, who, ": log_every must be >= 0, got ", log_every);
  check(max_skipped >= 0 && max_skipped <= 1, who, ": max_skipped must be in [0, 1], got ", max_skipped);
  check(early_stopping_patience >= 0, who, ": early_stopping_patience must be >= 0, got ", early_stopping_patience);
  check(early_stopping_patience == 0 || !best_metric.empty(), who,
        ": early_stopping_patience needs best_metric (the evaluation metric to watch)");
  check(bucket_mb > 0 && bucket_mb <= 1 << 20, who, ": bucket_mb must be in (0, 1048576], got ", bucket_mb);
  check(zero >= 0 && zero <= 2, who,
        ": zero must be 0, 1 or 2 (ZeRO stage 1: sharded optimizer state; 2: and gradients), got ", zero);
  check(early_stopping_threshold >= 0 && std::isfinite(early_stopping_threshold), who,
        ": early_stopping_threshold must be >= 0, got ", early_stopping_threshold);
}

namespace {

// A double as text that std::stod reads back to the same value.
std::string fmt_exact(double v) {
  std::ostringstream s;
  s << std::setprecision(17) << v;
  return s.str();
}

// The parameters an optimizer state dict holds state for ("state.<i>.step" entries).
int64_t optim_states(const TensorMap& optim) {
  int64_t n = 0;
  for (const auto& [name, t] : optim) {
    const auto dot = name.rfind('.');
    n += name.rfind("state.", 0) == 0 && dot != std::string::npos && name.compare(dot, std::string::npos, ".step") == 0;
  }
  return n;
}

// Where two identity values differ, in one line: for JSON (the model config) the first field
// that differs, "block.d_model: checkpoint 128, now 64"; otherwise both values.
// Two values side by side on one line: short ones whole, long or multi-line ones (a config's
// JSON that no longer parses, e.g. a damaged checkpoint) as the 20 characters either side of
// where they first differ, control and non-ASCII bytes escaped.
std::string side_by_side(const std::string& was, const std::string& now) {
  auto plain = [](const std::string& s) {
    return s.size() <= 60 && std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  };
  if (plain(was) && plain(now)) return str_cat("checkpoint: '", was, "', now: '", now, "'");
  std::size_t i = 0;
  while (i < was.size() && i < now.size() && was[i] == now[i]) ++i;
  auto around = [i](const std::string& s) {
    const std::size_t from = i < 20 ? 0 : i - 20, to = std::min(s.size(), i + 20);
    std::string out = from > 0 ? "..." : "";
    for (std::size_t k = from; k < to; ++k) {
      const auto c = static_cast<unsigned char>(s[k]);
      if (c == '\n') out += "\\n";
      else if (c < 0x20 || c >= 0x7f) out += str_cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
      else out += static_cast<char>(c);
    }
    return to < s.size() ? out + "..." : out;
  };
  return str_cat("checkpoint: '", around(was), "', now: '", around(now), "', first different at character ", i);
}

// Fault injection for the killed-rank tests: XGRAD_FAULT_KILL_RANK=<rank>:<step> makes that rank
// SIGKILL itself in that step (1-based) after its backward, when the other ranks are waiting for
// its gradients, as a crashed machine or the kernel's OOM killer would.
void maybe_die_mid_step(int64_t step) {
  const std::string& s = settings().fault_kill_rank;
  const auto colon = s.find(':');
  if (colon == std::string::npos) return;
  if (std::atoi(s.c_str()) == world().rank() && std::atoll(s.c_str() + colon + 1) == step + 1) ::raise(SIGKILL);
}

// Fault injection for the NaN tests: XGRAD_FAULT_NAN_RANK=<rank>:<step>[:grad] makes that rank's
// micro-batch losses NaN in that step (1-based), as an overflow in its batch would, or with
// ":grad" leaves the loss finite and makes its gradient NaN (d sqrt(u)/du at u = 0 is Inf, times
// 0). The other ranks' backward and gradient sums run meanwhile.
Tensor maybe_poison(const Tensor& loss, int64_t step) {
  const std::string& s = settings().fault_nan_rank;
  const auto colon = s.find(':');
  if (colon == std::string::npos || std::atoi(s.c_str()) != world().rank() ||
      std::atoll(s.c_str() + colon + 1) != step + 1)
    return loss;
  if (s.find(":grad", colon + 1) == std::string::npos) return loss * std::nan("");
  const Tensor zero = loss - loss;
  return loss + zero * sqrt(zero);
}

std::string first_difference(const std::string& was, const std::string& now) {
  const auto a = nlohmann::json::parse(was, nullptr, false), b = nlohmann::json::parse(now, nullptr, false);
  if (a.is_discarded() || b.is_discarded() || !a.is_structured() || !b.is_structured()) return side_by_side(was, now);
  const nlohmann::json patch = nlohmann::json::diff(a, b);
  if (patch.empty()) return side_by_side(was, now);  // same JSON, other spelling
  const nlohmann::json& first = patch.at(0);
  std::string where = first.at("path").get<std::string>().substr(1);
  std::replace(where.begin(), where.end(), '/', '.');
  const nlohmann::json::json_pointer ptr(first.at("path").get<std::string>());
  return str_cat(where, ": checkpoint ", a.contains(ptr) ? a.at(ptr).dump() : std::string("<none>"), ", now ",
                 b.contains(ptr) ? b.at(ptr).dump() : std::string("<none>"));
}

// "341 MB, 341 MB": bytes per rank, for the log line.
std::string bytes_per_rank(const std::vector<double>& bytes) {
  std::string out;
  for (double b : bytes) out += (out.empty() ? "" : ", ") + byte_size(b);
  return out;
}

}  // namespace

uint64_t micro_seed(uint64_t seed, int64_t step, int64_t micro, uint64_t stream) {
  // splitmix64's finaliser over each input in turn: nearby (step, micro) pairs get
  // unrelated seeds.
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return mix(mix(mix(mix(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(micro)) ^ stream);
}

optim::Schedule make_schedule(const LoopOptions& o) {
  const int64_t warmup = o.warmup_steps();
  switch (o.schedule) {
    case LrSchedule::Constant: return warmup > 0 ? optim::linear_warmup(warmup) : optim::constant_schedule();
    case LrSchedule::Linear: return optim::linear_decay(warmup, o.steps, o.min_lr_ratio);
    case LrSchedule::Cosine: break;
  }
  return optim::cosine_with_warmup(warmup, o.steps, o.min_lr_ratio);
}

namespace {

TrainLoop::OptimizerFactory adamw_factory(const LoopOptions& o) {
  return [o](const nn::NamedTensors& trainable) -> std::unique_ptr<optim::Optimizer> {
    optim::AdamWOptions ao;
    ao.lr = o.lr;
    ao.betas = {o.beta1, o.beta2};
    ao.weight_decay = o.weight_decay;
    return std::make_unique<optim::AdamW>(optim::weight_decay_groups(trainable, ao));
  };
}

}  // namespace

TrainLoop::TrainLoop(std::string program, nn::Module& model, nn::NamedTensors trainable, LoopOptions options)
    : TrainLoop(std::move(program), model, std::move(trainable), options, adamw_factory(options)) {}

TrainLoop::TrainLoop(std::string program, nn::Module& model, nn::NamedTensors trainable, LoopOptions options,
                     const OptimizerFactory& make_optimizer)
    : program_(std::move(program)), model_(model), trainable_(std::move(trainable)), o_(std::move(options)) {
  o_.validate();
  check(!trainable_.empty(), program_, ": nothing to train (every parameter is frozen)");
  check(static_cast<bool>(make_optimizer), program_, ": TrainLoop: make_optimizer is empty");
  opt_ = make_optimizer(trainable_);
  check(opt_ != nullptr, program_, ": TrainLoop: make_optimizer returned no optimizer");
  sched_ = std::make_unique<optim::LambdaLR>(*opt_, make_schedule(o_));
  if (o_.zero > 0) zero_ = std::make_unique<ZeroShards>(trainable_, *opt_, program_, o_.zero);
  if (o_.gradient_checkpointing) {
    int64_t models = 0;
    auto enable = [&](nn::Module& m) {
      if (auto* lm = dynamic_cast<nn::DecoderLM*>(&m)) {
        lm->set_gradient_checkpointing(true);
        ++models;
      }
    };
    enable(model_);
    for (const auto& [name, m] : model_.named_modules()) enable(*m);
    check(models > 0, program_, ": --gradient-checkpointing needs a DecoderLM (", model_.name(),
          " is none and holds none)");
  }
  if (!o_.out_dir.empty()) std::filesystem::create_directories(o_.out_dir);
  const bool main_rank = world().is_main();
  log_ = std::make_unique<RunLog>(program_, o_.out_dir.empty() || !main_rank ? "" : o_.out_dir + "/log.jsonl", o_.steps);
  if (!main_rank) log_->mute();
  // Without bf16 products (no AVX512-BF16 or AMX) --bf16 still rounds the products' operands and
  // saves bf16 activations, but converts back to float32 for every product: an AVX2 Zen 3 ran
  // 0.71-0.85x float32's tokens/s, the Xeon whose bf16 dot products are slow 0.90x (bench/README.md).
  if (o_.bf16 && bf16_gemm() != Bf16Gemm::OneDNN)
    log_->note(str_cat(program_, ": --bf16: ", bf16_gemm_description(),
                       ": activations take half the memory, but steps no less time than float32's"));
}

std::string TrainLoop::checkpoint_path() const {
  return o_.out_dir.empty() ? "" : o_.out_dir + "/checkpoint.safetensors";
}

void TrainLoop::save(int64_t step) {
  if (o_.out_dir.empty()) return;
  // Sharded state is put together on rank 0 as it writes the file, which every rank takes part in.
  if (zero_ && !world().is_main()) return zero_->serve_state_dict();
  if (!world().is_main()) return;
  Checkpoint c;
  for (const auto& [name, p] : trainable_) {
    check(isfinite_all(p), program_, ": not writing a checkpoint at step ", step, ": parameter '", name,
          "' holds NaN or Inf");
    c.model.emplace(name, p);
  }
  // NOTE: the moments too: an Inf in exp_avg_sq leaves the weights finite for a while, then
  // turns every update of that parameter into 0 or NaN, and would resume as it is.
  auto check_state = [&](const std::string& name, const Tensor& t) {
    check(!is_floating(t.dtype()) || isfinite_all(t), program_, ": not writing a checkpoint at step ", step,
          ": optimizer state '", name, "' holds NaN or Inf");
  };
  if (zero_) {
    ZeroShards::StreamedState state = zero_->streamed_state_dict();
    c.optim = std::move(state.eager);
    for (auto& [name, lazy] : state.later) {
      // (A moment with NaN stops the write there: the temporary file goes, the old checkpoint stays.)
      lazy.make = [check_state, name = name, make = std::move(lazy.make)] {
        Tensor t = make();
        check_state(name, t);
        return t;
      };
      c.optim_later.emplace(name, std::move(lazy));
    }
  } else {
    c.optim = opt_->state_dict();
  }
  for (const auto& [name, t] : c.optim) check_state(name, t);
  c.sched = sched_->state_dict();
  c.progress.step = step;
  c.progress.tokens_seen = tokens_seen_;
  c.progress.skipped = skipped_;
  c.progress.optim_states = optim_states(c.optim);
  c.progress.data_rng = Generator(o_.seed).state();  // the root every micro-batch's seed derives from
  c.progress.global_rng = default_generator().state();
  c.progress.extra = run_identity;
  // The best so far, so that a resumed run keeps comparing with it (not part of the identity).
  if (best_step_ >= 0) {
    c.progress.extra["best.step"] = std::to_string(best_step_);
    c.progress.extra["best.value"] = fmt_exact(best_value_);
    c.progress.extra["best.evals_without"] = std::to_string(evals_without_best_);
    if (stopped_at_ >= 0) c.progress.extra["best.stopped_early_at"] = std::to_string(stopped_at_);
  }
  save_checkpoint(checkpoint_path(), c);
}

bool TrainLoop::try_resume() {
  const std::string path = checkpoint_path();
  if (!o_.resume) return false;
  check(!path.empty(), program_, ": --resume needs --out (the folder holding checkpoint.safetensors)");
  if (!std::filesystem::exists(path)) {
    log_->note(str_cat(program_, ": --resume: no checkpoint at ", path, " yet; starting from step 0"));
    return false;
  }
  // A run killed while writing leaves its temporary file (checkpoint.safetensors.tmp.<pid>);
  // the checkpoint itself is the previous, complete one. A live process's file is its own
  // write in progress and stays. (Rank 0 removes them; every rank reads the checkpoint.)
  if (world().is_main())
    for (const std::string& removed : io::remove_stale_temporaries(o_.out_dir))
      log_->note(str_cat(program_, ": --resume: removed ", removed, ", left by a run killed while writing"));
  Checkpoint c = load_checkpoint(path);
  for (const auto& [k, v] : run_identity) {
    auto it = c.progress.extra.find(k);
    if (it == c.progress.extra.end() || it->second != v)
      throw Error(str_cat(program_, ": --resume: ", path, " was written by a run with a different ", k, " (",
                          first_difference(it == c.progress.extra.end() ? std::string("<none>") : it->second, v), ")"));
  }
  for (const auto& [name, p] : trainable_) {
    auto it = c.model.find(name);
    check(it != c.model.end(), program_, ": --resume: ", path, " has no tensor for parameter '", name, "'");
    check(it->second.shape() == p.shape(), program_, ": --resume: ", path, ": '", name, "' has shape ",
          shape_str(it->second.shape()), ", the model's is ", shape_str(p.shape()));
    p.copy_(it->second);
  }
  check(c.model.size() == trainable_.size(), program_, ": --resume: ", path, " holds ", c.model.size(),
        " model tensors, the run trains ", trainable_.size());
  check(c.progress.data_rng == Generator(o_.seed).state(), program_, ": --resume: ", path,
        " was written by a run with a different --seed (the data order derives from it)");
  for (const auto& [name, t] : c.optim)
    check(!is_floating(t.dtype()) || isfinite_all(t), program_, ": --resume: ", path, ": optimizer state '", name,
          "' holds NaN or Inf");
  check(c.progress.optim_states < 0 || optim_states(c.optim) == c.progress.optim_states, program_, ": --resume: ", path,
        " holds optimizer state for ", optim_states(c.optim), " parameters, it was written with ", c.progress.optim_states,
        " (a state left out would start again from zero)");
  opt_->load_state_dict(c.optim);
  // The schedule steps once per optimizer step, skipped ones included.
  auto last = c.sched.find("last_step");
  check(last != c.sched.end() && last->second.numel() == 1 && last->second.item() == static_cast<double>(c.progress.step),
        program_, ": --resume: ", path, ": sched.last_step is ",
        last == c.sched.end() || last->second.numel() != 1 ? std::string("missing") : str_cat(last->second.item()),
        ", the checkpoint is at step ", c.progress.step);
  sched_->load_state_dict(c.sched);
  default_generator().set_state(c.progress.global_rng);
  if (auto it = c.progress.extra.find("best.step"); it != c.progress.extra.end()) {
    best_step_ = std::stoll(it->second);
    best_value_ = std::stod(c.progress.extra.at("best.value"));
    evals_without_best_ = std::stoll(c.progress.extra.at("best.evals_without"));
    auto stopped = c.progress.extra.find("best.stopped_early_at");
    if (stopped != c.progress.extra.end()) stopped_at_ = std::stoll(stopped->second);
  }
  start_step_ = c.progress.step;
  tokens_seen_ = c.progress.tokens_seen;
  skipped_ = c.progress.skipped;
  check(start_step_ <= o_.steps, program_, ": --resume: the checkpoint is at step ", start_step_, ", past --steps ",
        o_.steps);
  // The log keeps the records of the steps redone after the checkpoint; this record says
  // where the resumed run took over.
  log_->event("resume", start_step_, {}, str_cat("from ", path));
  return true;
}

Metrics TrainLoop::run_eval(int64_t step) {
  if (!evaluate || !world().is_main()) return {};
  Metrics m;
  {
    // Each module's own mode comes back, also when evaluate throws.
    nn::EvalModeGuard eval_mode(model_);
    NoGradGuard no_grad;
    autocast mixed(o_.bf16);
    m = evaluate(step);
  }
  log_->event("eval", step, m);
  return m;
}

std::string TrainLoop::forward_backward(int64_t step, Metrics& sum, int64_t& tokens) {
  std::unique_ptr<DetectAnomalyGuard> anomaly;
  if (o_.detect_anomaly) anomaly = std::make_unique<DetectAnomalyGuard>(model_.named_parameters());
  const int64_t total = o_.grad_accum * world().size();  // micro-batches per step, all ranks
  const int64_t first = o_.grad_accum * world().rank();
  std::string bad;
  autocast mixed(o_.bf16);  // the optimizer step, after this function, stays float32
  std::vector<Tensor> grads;
  for (const auto& [name, p] : trainable_) grads.push_back(p);
  // With overlap the last micro-batch's backward hands each finished gradient to the sum. Every
  // rank starts one, even a rank whose micro-batch fails, so that every rank finishes it.
  std::unique_ptr<GradSum> overlapped;
  if (o_.overlap_grad_sum && world().size() > 1)
    overlapped = zero_ ? world().begin_grad_sum(grads, &zero_->partition(), bucket_bytes(), zero_->slices())
                       : world().begin_grad_sum(grads, nullptr, bucket_bytes());
  // Every micro-batch runs even after a bad one, so that the ranks stay in step.
  for (int64_t m = first; m < first + o_.grad_accum; ++m) {
    try {
      Generator data_rng(micro_seed(o_.seed, step, m, 0));
      manual_seed(micro_seed(o_.seed, step, m, 1));
      MicroResult r = micro_step(step, m, data_rng);
      r.loss = maybe_poison(r.loss, step);
      tokens += r.tokens;
      if (!bad.empty()) continue;
      const double loss = r.loss.item();
      if (!std::isfinite(loss)) {
        bad = str_cat("the loss is ", loss, " (micro-batch ", m + 1, " of ", total, ")");
        continue;
      }
      Tensor scaled = r.loss * (1.0 / static_cast<double>(total));
      if (overlapped && m == first + o_.grad_accum - 1) {
        LeafGradHookGuard hook([&overlapped](const Tensor& leaf) { overlapped->ready(leaf); });
        scaled.backward();
      } else {
        scaled.backward();
      }
      sum["loss"] += loss;
      for (const auto& [k, v] : r.metrics) sum[k] += v;
    } catch (const AnomalyError& e) {
      if (bad.empty()) bad = e.what();
    }
  }
  maybe_die_mid_step(step);
  const auto backward_done = std::chrono::steady_clock::now();
  if (overlapped) overlapped->finish();
  // The ranks agree on a failure (the first failing rank's reason) before summing.
  const int bad_rank = world().first_rank_with(!bad.empty());
  if (bad_rank >= 0) {
    bad = world().broadcast(bad, bad_rank);
    if (world().size() > 1) bad += str_cat(" (on rank ", bad_rank, ")");
    std::vector<double> n{static_cast<double>(tokens)};
    world().allreduce_sum(n);
    tokens = static_cast<int64_t>(n[0]);
  } else {
    if (!overlapped && zero_) zero_->sum_grads(grads, bucket_bytes());
    else if (!overlapped) world().allreduce_grads(grads, bucket_bytes());  // (with overlap, finish() summed them)
    comm_wait_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - backward_done).count();
    // Metrics and tokens summed over the ranks (every rank reports the same names).
    std::vector<double> values;
    for (const auto& [k, v] : sum) values.push_back(v);
    values.push_back(static_cast<double>(tokens));
    values.push_back(static_cast<double>(sum.size()));
    world().allreduce_sum(values);
    check(values.back() == static_cast<double>(sum.size() * static_cast<std::size_t>(world().size())), program_,
          ": the ranks report different metrics at step ", step + 1);
    std::size_t i = 0;
    for (auto& [k, v] : sum) v = values[i++];
    tokens = static_cast<int64_t>(values[i]);
    // After the sum every rank holds the same gradients, so all reach the same verdict (with
    // ZeRO each its slice, and the first bad rank's verdict is everyone's).
    if (zero_) {
      bad = zero_->bad_grad(trainable_, o_.detect_anomaly);
    } else {
      for (const auto& [name, p] : trainable_)
        if (p.grad().defined() && !isfinite_all(p.grad())) {
          bad = str_cat("the gradient of '", name, "' holds NaN or Inf",
                        o_.detect_anomaly ? "" : " (--detect-anomaly names the op that made it)");
          break;
        }
    }
  }
  if (!bad.empty()) {
    opt_->zero_grad();
    if (zero_) zero_->drop_grads();
  }
  return bad;
}

bool TrainLoop::track_best(int64_t step, const Metrics& m) {
  if (o_.best_metric.empty()) return false;
  bool stop = false;
  if (world().is_main()) {
    auto it = m.find(o_.best_metric);
    if (it == m.end()) {
      std::string names;
      for (const auto& [k, v] : m) names += (names.empty() ? "" : ", ") + k;
      throw Error(str_cat(program_, ": the best model is judged by '", o_.best_metric,
                          "', which the evaluation does not report (it reports ", names.empty() ? "nothing" : names, ")"));
    }
    const double v = it->second;
    const bool lower = o_.best_metric.size() >= 4 && o_.best_metric.compare(o_.best_metric.size() - 4, 4, "loss") == 0;
    const bool better = best_step_ < 0 || (lower ? v < best_value_ - o_.early_stopping_threshold
                                                 : v > best_value_ + o_.early_stopping_threshold);
    if (better && std::isfinite(v)) {
      best_step_ = step;
      best_value_ = v;
      evals_without_best_ = 0;
      if (on_best) on_best(step, v);
    } else {
      ++evals_without_best_;
    }
    stop = o_.early_stopping_patience > 0 && evals_without_best_ >= o_.early_stopping_patience;
  }
  return world().first_rank_with(stop) >= 0;
}

Metrics TrainLoop::run() {
  check(static_cast<bool>(micro_step), program_, ": TrainLoop::run needs micro_step");
  manual_seed(o_.seed);
  start_step_ = 0;
  // A checkpoint resumes under any ranks x grad_accum with the same product.
  run_identity["micro_batches_per_step"] = std::to_string(o_.grad_accum * world().size());
  tokens_seen_ = 0;
  skipped_ = 0;
  try_resume();
  if (stopped_at_ >= 0) {  // resuming a run that had stopped early: nothing left to do
    log_->note(str_cat(program_, ": --resume: the run stopped early at step ", stopped_at_, " (no ", o_.best_metric,
                       " improvement in ", o_.early_stopping_patience, " evaluations); nothing to resume"));
    return {};
  }
  if (o_.eval_at_start && start_step_ == 0) track_best(0, run_eval(0));
  model_.train();
  std::vector<Tensor> params;
  for (const auto& [name, p] : trainable_) params.push_back(p);

  Metrics last_eval;
  bool evaluated_last = false;
  bool reported_state = false;
  int64_t last_saved = start_step_;
  for (int64_t step = start_step_; step < o_.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const double lr = sched_->get_lr()[0];
    opt_->zero_grad();
    Metrics sum;
    int64_t tokens = 0;
    const std::string bad = forward_backward(step, sum, tokens);
    tokens_seen_ += tokens;
    if (!bad.empty()) {
      // The ranks agreed on `bad` (forward_backward), so every rank stops here alike.
      if (o_.on_nan != NanPolicy::Skip)
        throw AgreedError(str_cat(program_, ": step ", step + 1, ": ", bad, "; stopped (--on-nan stop); ",
                                  last_saved > 0 ? str_cat("the checkpoint of step ", last_saved, " is kept")
                                                 : std::string("no checkpoint was written"),
                                  " (try a lower --lr, a longer --warmup or --clip, or --on-nan skip)"));
      log_->event("skip", step + 1, {{"lr", lr}}, str_cat("step ", step + 1, " skipped (--on-nan skip): ", bad));
      ++skipped_;
      if (static_cast<double>(skipped_) > o_.max_skipped * static_cast<double>(o_.steps))
        throw AgreedError(str_cat(program_, ": step ", step + 1, ": ", skipped_, " of the ", step + 1,
                                  " steps so far were skipped (--on-nan skip), more than --max-skipped ", o_.max_skipped,
                                  " of the ", o_.steps, " steps; the run has diverged and stops, no model written (",
                                  last_saved > 0 ? str_cat("the checkpoint of step ", last_saved, " is kept")
                                                 : std::string("no checkpoint"),
                                  "; try a lower --lr, a longer --warmup or --clip)"));
      sched_->step();  // the schedule keeps time with the step count, as with a skipped AMP step
    } else {
      for (auto& [k, v] : sum) v /= static_cast<double>(o_.grad_accum * world().size());
      if (o_.clip > 0) sum["grad_norm"] = zero_ ? zero_->clip(params, o_.clip) : optim::clip_grad_norm_(params, o_.clip);
      // The gradients each rank holds at the step, for the log line below (once).
      const std::vector<double> grad_bytes =
          zero_ && !reported_state ? zero_->grad_bytes_per_rank(params) : std::vector<double>{};
      if (zero_) zero_->step(params);
      else opt_->step();
      sched_->step();
      sum["lr"] = lr;
      if (world().size() > 1) sum["comm_wait_s"] = comm_wait_;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      log_->train_step(step + 1, sum, secs > 0 ? static_cast<double>(tokens) / secs : 0.0, o_.log_every);
      if (zero_ && !reported_state) {  // the moments exist from the first step on
        reported_state = true;
        Metrics bytes;
        const std::vector<double> per_rank = zero_->state_bytes_per_rank();
        for (std::size_t r = 0; r < per_rank.size(); ++r) {
          bytes[str_cat("rank", r, "_bytes")] = per_rank[r];
          bytes[str_cat("rank", r, "_grad_bytes")] = grad_bytes[r];
        }
        log_->event("optimizer_state", step + 1, bytes,
                    str_cat("ZeRO stage ", o_.zero, ": optimizer state per rank ", bytes_per_rank(per_rank),
                            "; gradients at the step ", bytes_per_rank(grad_bytes)));
      }
    }
    evaluated_last = false;
    if (o_.eval_every > 0 && (step + 1) % o_.eval_every == 0) {
      last_eval = run_eval(step + 1);
      evaluated_last = true;
      if (track_best(step + 1, last_eval)) {
        stopped_at_ = step + 1;
        log_->event("early_stop", step + 1, {{o_.best_metric, best_value_}},
                    str_cat("stopped early at step ", step + 1, ": no ", o_.best_metric, " improvement in ",
                            o_.early_stopping_patience, " evaluations (best ", best_value_, " at step ", best_step_, ")"));
        save(step + 1);
        return last_eval;
      }
    }
    if (after_step && world().is_main()) after_step(step + 1);
    if (o_.checkpoint_every > 0 && (step + 1) % o_.checkpoint_every == 0) {
      save(step + 1);
      last_saved = step + 1;
    }
  }
  if (!evaluated_last) {
    last_eval = run_eval(o_.steps);
    track_best(o_.steps, last_eval);
  }
  save(o_.steps);
  return last_eval;
}

}  // namespace xg::finetune

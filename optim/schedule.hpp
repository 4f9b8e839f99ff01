// Learning-rate schedules as functions of the step (multipliers of each group's base lr,
// as torch's LambdaLR takes them), and LambdaLR, the scheduler that applies one to an
// optimizer's groups.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "io/safetensors.hpp"
#include "optim/optimizer.hpp"

namespace xg::optim {

// lr(step) = base_lr * schedule(step), step = 0, 1, 2, ... (the number of scheduler steps).
using Schedule = std::function<double(int64_t step)>;

// 1 at every step.
Schedule constant_schedule();
// step / warmup_steps until warmup_steps, then 1 (Hugging Face's constant_with_warmup).
// NOTE: as there, step 0 has lr 0.
Schedule linear_warmup(int64_t warmup_steps);
// Linear warmup, then a half cosine from 1 down to min_ratio at total_steps, held there
// after. Past the warmup it is CosineAnnealingLR(T_max = total_steps - warmup_steps,
// eta_min = min_ratio * base_lr) (which would rise again past T_max; this stays at the floor).
Schedule cosine_with_warmup(int64_t warmup_steps, int64_t total_steps, double min_ratio = 0.0);
// Linear warmup, then a straight line from 1 down to end_ratio at total_steps, held there
// after. With no warmup: torch's LinearLR(start_factor = 1, end_factor = end_ratio,
// total_iters = total_steps); with end_ratio 0: Hugging Face's linear schedule.
Schedule linear_decay(int64_t warmup_steps, int64_t total_steps, double end_ratio = 0.0);
// gamma^(step / step_size) (integer division): torch's StepLR.
Schedule step_decay(int64_t step_size, double gamma = 0.1);

// torch.optim.lr_scheduler.LambdaLR: remembers each group's lr as its base lr, sets
// lr = base * schedule(0) at once, and lr = base * schedule(k) after the k-th step():
//   xg::optim::LambdaLR sched(opt, xg::optim::cosine_with_warmup(100, 10000, 0.1));
//   for (...) { ...; opt.step(); sched.step(); }
// The optimizer must outlive the scheduler.
class LambdaLR {
 public:
  LambdaLR(Optimizer& optimizer, Schedule schedule);
  // One schedule per group.
  LambdaLR(Optimizer& optimizer, std::vector<Schedule> schedules);

  void step();
  // The lr of each group at the current step (what the next optimizer step uses).
  std::vector<double> get_lr() const;
  std::vector<double> get_last_lr() const { return get_lr(); }
  int64_t last_step() const { return last_step_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // "last_step" (int64) and "base_lrs" (float64 [groups]); loading sets the groups' lrs.
  TensorMap state_dict() const;
  void load_state_dict(const TensorMap& dict);

 private:
  void apply();
  Optimizer& optimizer_;
  std::vector<Schedule> schedules_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

}  // namespace xg::optim

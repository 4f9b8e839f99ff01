// LR schedules (closed-form multipliers, checked on construction) and LambdaLR.
#include "optim/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace xg::optim {

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_step(int64_t step, const char* name) {
  check(step >= 0, name, ": step ", step, " is negative (schedules start at step 0)");
}

// step / warmup during the warmup (Hugging Face's form).
double warmup_factor(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

void check_warmup_total(const char* name, int64_t warmup, int64_t total) {
  check(warmup >= 0, name, ": invalid warmup_steps = ", warmup, " (must be >= 0)");
  check(total > 0 && total >= warmup, name, ": invalid total_steps = ", total,
        " (must be > 0 and >= warmup_steps = ", warmup, ")");
}

}  // namespace

Schedule constant_schedule() {
  return [](int64_t step) {
    check_step(step, "constant_schedule");
    return 1.0;
  };
}

Schedule linear_warmup(int64_t warmup_steps) {
  check(warmup_steps >= 0, "linear_warmup: invalid warmup_steps = ", warmup_steps, " (must be >= 0)");
  return [warmup_steps](int64_t step) {
    check_step(step, "linear_warmup");
    return step < warmup_steps ? warmup_factor(step, warmup_steps) : 1.0;
  };
}

// f = min_ratio + (1 - min_ratio) * (1 + cos(pi * progress)) / 2, progress in [0, 1]
Schedule cosine_with_warmup(int64_t warmup_steps, int64_t total_steps, double min_ratio) {
  check_warmup_total("cosine_with_warmup", warmup_steps, total_steps);
  check(min_ratio >= 0 && min_ratio <= 1, "cosine_with_warmup: invalid min_ratio = ", min_ratio,
        " (the floor, a fraction of the base lr, must be in [0, 1])");
  return [=](int64_t step) {
    check_step(step, "cosine_with_warmup");
    if (step < warmup_steps) return warmup_factor(step, warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) /
                                              static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(kPi * progress));
  };
}

// f = end_ratio + (1 - end_ratio) * max(0, (total - step) / (total - warmup))
Schedule linear_decay(int64_t warmup_steps, int64_t total_steps, double end_ratio) {
  check_warmup_total("linear_decay", warmup_steps, total_steps);
  check(end_ratio >= 0 && end_ratio <= 1, "linear_decay: invalid end_ratio = ", end_ratio, " (must be in [0, 1])");
  return [=](int64_t step) {
    check_step(step, "linear_decay");
    if (step < warmup_steps) return warmup_factor(step, warmup_steps);
    const double left = std::max(0.0, static_cast<double>(total_steps - step) /
                                          static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps)));
    return end_ratio + (1 - end_ratio) * left;
  };
}

Schedule step_decay(int64_t step_size, double gamma) {
  check(step_size > 0, "step_decay: invalid step_size = ", step_size, " (must be > 0)");
  check(gamma > 0, "step_decay: invalid gamma = ", gamma, " (must be > 0)");
  return [=](int64_t step) {
    check_step(step, "step_decay");
    return std::pow(gamma, static_cast<double>(step / step_size));
  };
}

LambdaLR::LambdaLR(Optimizer& optimizer, Schedule schedule)
    : LambdaLR(optimizer, std::vector<Schedule>(optimizer.num_groups(), std::move(schedule))) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Schedule> schedules)
    : optimizer_(optimizer), schedules_(std::move(schedules)) {
  check(schedules_.size() == optimizer_.num_groups(), "LambdaLR: got ", schedules_.size(), " schedules for ",
        optimizer_.num_groups(), " parameter groups of ", optimizer_.name());
  for (std::size_t g = 0; g < schedules_.size(); ++g) {
    check(static_cast<bool>(schedules_[g]), "LambdaLR: the schedule of group ", g, " is empty");
    base_lrs_.push_back(optimizer_.lr(g));
  }
  apply();
}

std::vector<double> LambdaLR::get_lr() const {
  std::vector<double> lrs;
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(base_lrs_[g] * schedules_[g](last_step_));
  return lrs;
}

void LambdaLR::apply() {
  check(optimizer_.num_groups() == base_lrs_.size(), "LambdaLR: the optimizer now has ", optimizer_.num_groups(),
        " parameter groups, the scheduler was made for ", base_lrs_.size());
  const std::vector<double> lrs = get_lr();
  for (std::size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(g, lrs[g]);
}

void LambdaLR::step() {
  ++last_step_;
  apply();
}

TensorMap LambdaLR::state_dict() const {
  return {{"last_step", from_vector(std::vector<int64_t>{last_step_}, {})},
          {"base_lrs", from_vector(base_lrs_, {static_cast<int64_t>(base_lrs_.size())}, kFloat64)}};
}

void LambdaLR::load_state_dict(const TensorMap& dict) {
  auto step = dict.find("last_step");
  auto base = dict.find("base_lrs");
  check(step != dict.end() && base != dict.end(), "LambdaLR.load_state_dict: needs 'last_step' and 'base_lrs'");
  check(step->second.numel() == 1 && step->second.item() >= 0,
        "LambdaLR.load_state_dict: 'last_step' must be one number >= 0");
  check(base->second.numel() == static_cast<int64_t>(base_lrs_.size()), "LambdaLR.load_state_dict: 'base_lrs' has ",
        base->second.numel(), " values for ", base_lrs_.size(), " parameter groups");
  last_step_ = static_cast<int64_t>(step->second.item());
  base_lrs_ = base->second.to_vector();
  apply();
}

}  // namespace xg::optim

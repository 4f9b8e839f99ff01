// The training-loop flags every trainer shares (xg-train, xg-finetune): bound to a
// finetune::LoopOptions, checked by its validate() as a usage error.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "finetune/train_loop.hpp"

namespace xg::cli {

// --lr, --warmup, --schedule, --steps, --seed, --resume, --on-nan, ... bound to `o`, whose
// current values are the defaults shown. `seed_help` says what the seed drives.
boost::program_options::options_description loop_flags(finetune::LoopOptions& o, const std::string& seed_help);

// The flag spellings of LoopOptions' enums: a bad one is a UsageError
// "--schedule: expected constant, cosine or linear, got 'x'".
finetune::LrSchedule parse_schedule(const std::string& text);
// "B1,B2" (--adam-betas), each in [0, 1); anything else is a UsageError naming the flag.
std::pair<double, double> parse_betas(const std::string& text);
finetune::NanPolicy parse_nan_policy(const std::string& text);
std::string schedule_name(finetune::LrSchedule s);
std::string nan_policy_name(finetune::NanPolicy p);

// A LoopOptions::validate message with the option names as flags: "TrainLoop: steps must be
// positive, got 0" -> "PROGRAM: --steps must be positive, got 0".
std::string loop_error_for_flags(const std::string& message, const std::string& program);

// LoopOptions::validate, reported as a UsageError (one line, exit status 2) naming the flags.
void validate_loop(const finetune::LoopOptions& o, const std::string& program);

}  // namespace xg::cli

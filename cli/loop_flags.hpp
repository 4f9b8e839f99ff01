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

// LoopOptions::validate, reported as a UsageError (one line, exit status 2).
void validate_loop(const finetune::LoopOptions& o, const std::string& program);

}  // namespace xg::cli

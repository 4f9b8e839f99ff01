// --threads N, which every executable takes (autograd/threads.hpp).
#pragma once

#include <boost/program_options.hpp>

namespace xg::cli {

// The --threads flag bound to `n` (default 0: OMP_NUM_THREADS, else every core).
boost::program_options::options_description threads_flag(int& n);

// Applies a parsed --threads: 0 keeps the default, 1..1024 sets the count, anything else is a
// usage error naming the flag.
void apply_threads(int n);

}  // namespace xg::cli

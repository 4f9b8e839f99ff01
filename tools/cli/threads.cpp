// --threads (threads.hpp).
#include "tools/cli/threads.hpp"

#include <string>

#include "autograd/threads.hpp"
#include "tools/cli/flags.hpp"

namespace xg::cli {

namespace po = boost::program_options;

po::options_description threads_flag(int& n) {
  po::options_description o = cli::flag_group("threads");
  o.add_options()("threads", po::value(&n)->default_value(n),
                  "threads for products and parallel loops (0: OMP_NUM_THREADS if set, else every core)");
  return o;
}

void apply_threads(int n) {
  require(n >= 0 && n <= 1024, "--threads: expected 0 (the default) or 1..1024, got " + std::to_string(n));
  if (n > 0) set_num_threads(n);
}

}  // namespace xg::cli

// run_main (see run_main.hpp): exceptions to one line on stderr and an exit status, once per job
// under mpirun.
#include "cli/run_main.hpp"

#include <iostream>
#include <stdexcept>
#include <string>

#include "cli/flags.hpp"
#include "finetune/distributed.hpp"

namespace xg::cli {

int run_main(const char* program, const std::function<int()>& parse_flags, const std::function<int()>& body) {
  using finetune::Distributed;
  // Library errors from the training loop already start with the program's name.
  auto what = [&](const std::exception& e) {
    const std::string w = e.what(), prefix = std::string(program) + ": ";
    return w.rfind(prefix, 0) == 0 ? w.substr(prefix.size()) : w;
  };
  const bool parallel = Distributed::size() > 1;
  auto fail = [&](const std::exception& e, const char* hint, int rc) {
    std::string rank;
    if (parallel && !Distributed::is_main()) rank = " [rank " + std::to_string(Distributed::rank()) + "]";
    std::cerr << (std::string(program) + rank + ": " + what(e) + hint + "\n") << std::flush;  // one write
    if (parallel) Distributed::abort(rc);
    return rc;
  };
  try {
    const int rc = parse_flags();
    if (rc >= 0) return rc;  // --help
  } catch (const std::exception& e) {
    if (Distributed::is_main()) std::cerr << (std::string(program) + ": " + what(e) + " (see --help)\n");
    return 2;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    return fail(e, " (see --help)", 2);
  } catch (const std::exception& e) {
    return fail(e, "", 1);
  }
}

}  // namespace xg::cli

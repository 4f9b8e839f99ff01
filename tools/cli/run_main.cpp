// run_main (see run_main.hpp): exceptions to one line on stderr and an exit status, once per job
// under mpirun.
#include "tools/cli/run_main.hpp"

#include <iostream>
#include <stdexcept>
#include <string>

#include "finetune/world.hpp"
#include "tools/cli/flags.hpp"

namespace xg::cli {

int run_main(const char* program, const std::function<int()>& parse_flags, const std::function<int()>& body) {
  const finetune::World& world = finetune::world();
  // Library errors from the training loop already start with the program's name.
  auto what = [&](const std::exception& e) {
    const std::string w = e.what(), prefix = std::string(program) + ": ";
    return w.rfind(prefix, 0) == 0 ? w.substr(prefix.size()) : w;
  };
  const bool parallel = world.size() > 1;
  auto fail = [&](const std::exception& e, const char* hint, int rc) {
    std::string rank;
    if (parallel && !world.is_main()) rank = " [rank " + std::to_string(world.rank()) + "]";
    std::cerr << (std::string(program) + rank + ": " + what(e) + hint + "\n") << std::flush;  // one write
    if (parallel) world.abort(rc);
    return rc;
  };
  try {
    const int rc = parse_flags();
    if (rc >= 0) return rc;  // --help
  } catch (const std::exception& e) {
    if (world.is_main()) std::cerr << (std::string(program) + ": " + what(e) + " (see --help)\n");
    return 2;
  }
  try {
    return body();
  } catch (const finetune::AgreedError& e) {
    if (parallel && !world.is_main()) world.await_abort(1);
    return fail(e, "", 1);
  } catch (const UsageError& e) {
    return fail(e, " (see --help)", 2);
  } catch (const std::exception& e) {
    return fail(e, "", 1);
  }
}

}  // namespace xg::cli

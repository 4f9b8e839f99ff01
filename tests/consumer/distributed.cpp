// xgrad::distributed alone: a Session outside mpirun leaves the train loop's world one process.
#include <cstdio>

#include "distributed/distributed.hpp"
#include "finetune/world.hpp"

int main(int argc, char** argv) {
  xg::distributed::Session session(&argc, &argv);
  const bool ok = xg::finetune::world().size() == 1 && xg::finetune::world().is_main();
  std::printf("consumer distributed: built with MPI %d, world of %d %s\n", xg::distributed::built_with_mpi(),
              xg::finetune::world().size(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

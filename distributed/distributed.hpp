// Data-parallel training over MPI (OpenMPI from Debian): a Session starts MPI when the program
// was launched by mpirun and installs MPI's world as the train loop's (finetune/world.hpp):
// ranks, gradient sums over flattened buckets added in rank order (sent while backward still
// runs, or after it), and the few collectives the loop needs. Without MPI at build time, or
// when no MPI launcher started the program, the world stays one process and nothing else changes.
#pragma once

namespace xg::distributed {

// Whether xgrad was built with MPI (CMake found it: XGRAD_MPI).
bool built_with_mpi();

// MPI_Init in the constructor (when launched by an MPI launcher), with MPI's world installed
// as finetune::world(); MPI_Finalize and the one-process world back in the destructor (on the
// normal path of main: after an error, World::abort stops every rank instead). Under MPI with
// OMP_NUM_THREADS unset, each rank gets its share of the cores the launcher left it, so N ranks
// never oversubscribe the machine. One per program, at the start of main.
class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

}  // namespace xg::distributed

// Data-parallel training over MPI (OpenMPI from Debian): the process's rank in the world,
// gradient averaging with MPI_Allreduce over flattened buckets, and the few collectives the
// training loop needs. Without MPI at build time, or when the program was not started by
// mpirun, the world is this one process and every call here is a no-op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg::finetune {

class Distributed {
 public:
  // Starts MPI when xgrad was built with it and the process was launched by mpirun (or
  // another MPI launcher); otherwise the world is one process. Call once at the start of
  // main (DistributedSession does). Under MPI with OMP_NUM_THREADS unset, each rank gets its
  // share of the cores the launcher left it, so N ranks never oversubscribe the machine.
  static void init(int* argc, char*** argv);
  // Ends MPI (after a normal run). Ending after an error on one rank would leave the others
  // waiting in a collective, so abort() stops the whole job instead.
  static void finalize();
  [[noreturn]] static void abort(int exit_code);

  static int rank();
  static int size();
  static bool is_main() { return rank() == 0; }
  static bool built_with_mpi();

  // Sums each gradient of `params` over the ranks, in place: gradients are packed into
  // buckets of at most `bucket_bytes`, one MPI_Allreduce per bucket and dtype. A parameter
  // whose gradient is undefined on some ranks but not all gets zeros there first; one with
  // no gradient anywhere keeps none (as in one process).
  static void allreduce_grads(const std::vector<Tensor>& params, int64_t bucket_bytes = 32 << 20);
  // Sums x over the ranks, in place.
  static void allreduce_sum(std::vector<double>& x);
  // The lowest rank for which `flag` is true, or -1 when it is false everywhere.
  static int first_rank_with(bool flag);
  // `text` as rank `root` has it, on every rank.
  static std::string broadcast(const std::string& text, int root);
};

// Init in the constructor, finalize in the destructor (on the normal path of main).
struct DistributedSession {
  DistributedSession(int* argc, char*** argv) { Distributed::init(argc, argv); }
  ~DistributedSession() { Distributed::finalize(); }
  DistributedSession(const DistributedSession&) = delete;
  DistributedSession& operator=(const DistributedSession&) = delete;
};

}  // namespace xg::finetune

// Session and MPI's world: MPI_Init/Finalize, the rank and world size, and the collectives of
// data parallelism (the gradient sums of grad_sum.cpp, plain or overlapped with backward; for
// ZeRO stages 1 and 2 the all-gather of the updated slices and the gather of the state; metric sums,
// agreeing on a failure). Compiled with XGRAD_WITH_MPI when CMake found MPI; without it, the
// world stays one process.
#include "distributed/distributed.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <thread>

#include "autograd/error.hpp"
#include "autograd/settings.hpp"
#include "autograd/threads.hpp"
#include "finetune/world.hpp"

#ifdef XGRAD_WITH_MPI
#include <mpi.h>

#include "distributed/grad_sum.hpp"
#include "distributed/mpi_helpers.hpp"
#endif

namespace xg::distributed {

namespace {

#ifdef XGRAD_WITH_MPI
bool g_mpi = false;  // MPI_Init was called (and MPI_Finalize not yet)
#endif

#ifdef XGRAD_WITH_MPI
using detail::int_count;
using detail::mpi_check;
using detail::mpi_type;
using detail::rank_runs;

// Runs [i, j) of consecutive tensors of one dtype, each run at most `bucket_bytes` (a bigger
// tensor alone): the buckets of the collectives below.
std::vector<std::pair<std::size_t, std::size_t>> buckets(const std::vector<Tensor>& ts, int64_t bucket_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  std::size_t i = 0;
  while (i < ts.size()) {
    const Dtype d = ts[i].dtype();
    const int64_t item = static_cast<int64_t>(itemsize(d));
    std::size_t j = i;
    int64_t n = 0;
    while (j < ts.size() && ts[j].dtype() == d && (j == i || (n + ts[j].numel()) * item <= bucket_bytes))
      n += ts[j++].numel();
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

// MPI_COMM_WORLD as the train loop's world.
class MpiWorld : public finetune::World {
 public:
  MpiWorld() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_grads(const std::vector<Tensor>& params, int64_t bucket_bytes) const override {
    if (size_ > 1) make_grad_sum(params, nullptr, nullptr, bucket_bytes, false, grad_buffers_)->finish();
  }

  void reduce_scatter_grads(const std::vector<Tensor>& params, const optim::Partition& part, int64_t bucket_bytes,
                            std::vector<Tensor>* slices) const override {
    if (size_ == 1) return World::reduce_scatter_grads(params, part, bucket_bytes, slices);
    make_grad_sum(params, &part, slices, bucket_bytes, false, grad_buffers_)->finish();
  }

  std::unique_ptr<finetune::GradSum> begin_grad_sum(const std::vector<Tensor>& params, const optim::Partition* part,
                                                    int64_t bucket_bytes, std::vector<Tensor>* slices) const override {
    if (size_ == 1) return World::begin_grad_sum(params, part, bucket_bytes, slices);
    return make_grad_sum(params, part, slices, bucket_bytes, true, grad_buffers_);
  }

  void allgather_params(const std::vector<Tensor>& params, const optim::Partition& part,
                        int64_t bucket_bytes) const override {
    if (size_ == 1) return;
    check_partition(part, params.size());
    std::vector<std::size_t> index(params.size());
    for (std::size_t k = 0; k < params.size(); ++k) index[k] = k;
    std::vector<char>& bucket = bucket_;
    std::vector<int> count, at;
    for (const auto& [i, j] : buckets(params, bucket_bytes)) {
      const Dtype d = params[i].dtype();
      const MPI_Datatype type = mpi_type(d, "a gather of parameters");
      const std::size_t item = itemsize(d);
      int64_t n = 0;
      for (std::size_t k = i; k < j; ++k) n += params[k].numel();
      if (bucket.size() < static_cast<std::size_t>(n) * item) bucket.resize(static_cast<std::size_t>(n) * item);
      int64_t off = 0;
      for (std::size_t k = i; k < j; ++k) {  // this rank's slices, where they go
        const optim::Shard s = part.slice(rank_, k);
        std::memcpy(bucket.data() + static_cast<std::size_t>(off + s.begin) * item,
                    static_cast<const char*>(params[k].raw_data()) + static_cast<std::size_t>(s.begin) * item,
                    static_cast<std::size_t>(s.size()) * item);
        off += params[k].numel();
      }
      rank_runs(part, index, params, i, j, count, at);
      mpi_check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bucket.data(), count.data(), at.data(), type,
                               MPI_COMM_WORLD),
                "MPI_Allgatherv of parameters");
      off = 0;
      for (std::size_t k = i; k < j; ++k) {  // the other ranks' slices (this rank's is in place)
        const optim::Shard s = part.slice(rank_, k);
        char* p = static_cast<char*>(params[k].raw_data());
        const char* b = bucket.data() + static_cast<std::size_t>(off) * item;
        std::memcpy(p, b, static_cast<std::size_t>(s.begin) * item);
        std::memcpy(p + static_cast<std::size_t>(s.end) * item, b + static_cast<std::size_t>(s.end) * item,
                    static_cast<std::size_t>(params[k].numel() - s.end) * item);
        off += params[k].numel();
      }
    }
  }

  Tensor gather_to_main(const Tensor& piece) const override {
    if (size_ == 1) return piece.clone();
    check(piece.dim() == 1, "distributed: gather_to_main of a ", shape_str(piece.shape()), " tensor (1-d only)");
    const MPI_Datatype type = mpi_type(piece.dtype(), "a gather of optimizer state");
    const int mine = int_count(piece.numel(), "a gather");
    std::vector<int> count(static_cast<std::size_t>(size_)), at(static_cast<std::size_t>(size_));
    mpi_check(MPI_Gather(&mine, 1, MPI_INT, count.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather of a count");
    int64_t total = 0;
    for (int q = 0; q < size_; ++q) {
      at[static_cast<std::size_t>(q)] = int_count(total, "a gather");
      total += count[static_cast<std::size_t>(q)];
    }
    Tensor out = rank_ == 0 ? empty({total}, piece.dtype()) : Tensor();
    mpi_check(MPI_Gatherv(piece.raw_data(), mine, type, rank_ == 0 ? out.raw_data() : nullptr, count.data(), at.data(),
                          type, 0, MPI_COMM_WORLD),
              "MPI_Gatherv of optimizer state");
    return out;
  }

  void allreduce_sum(std::vector<double>& x) const override {
    if (size_ == 1 || x.empty()) return;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce of metrics");
  }

  int first_rank_with(bool flag) const override {
    int r = flag ? rank_ : size_;
    if (size_ > 1) mpi_check(MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce of a flag");
    return r < size_ ? r : -1;
  }

  std::string broadcast(const std::string& text, int root) const override {
    if (size_ == 1) return text;
    int64_t n = static_cast<int64_t>(text.size());
    mpi_check(MPI_Bcast(&n, 1, MPI_INT64_T, root, MPI_COMM_WORLD), "MPI_Bcast of a length");
    std::string out = rank_ == root ? text : std::string(static_cast<std::size_t>(n), '\0');
    if (n > 0) mpi_check(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast of a text");
    return out;
  }

  [[noreturn]] void abort(int exit_code) const override {
    if (g_mpi && size_ > 1) {
      std::cerr.flush();
      MPI_Abort(MPI_COMM_WORLD, exit_code);
    }
    std::exit(exit_code);
  }

  [[noreturn]] void await_abort(int exit_code) const override {
    // Rank 0 reports and calls MPI_Abort, and mpirun ends this process; a minute is the time it
    // gets before this rank ends the job itself (rank 0 stuck in a write, say).
    std::cerr.flush();
    if (g_mpi && size_ > 1) std::this_thread::sleep_for(std::chrono::seconds(60));
    abort(exit_code);
  }

 private:
  int rank_ = 0, size_ = 1;
  void check_partition(const optim::Partition& part, std::size_t params) const {
    check(part.ranks() == size_ && part.num_params() == params, "distributed: a partition over ", part.ranks(),
          " ranks and ", part.num_params(), " parameters, for ", size_, " ranks and ", params);
  }

  mutable std::vector<char> bucket_;  // allgather_params's buffer, kept from step to step
  mutable std::vector<std::vector<char>> grad_buffers_;  // the gradient sums' (grad_sum.hpp)
};
#endif

}  // namespace

bool built_with_mpi() {
#ifdef XGRAD_WITH_MPI
  return true;
#else
  return false;
#endif
}

Session::Session(int* argc, char*** argv) {
#ifdef XGRAD_WITH_MPI
  if (g_mpi || !settings().mpi_launched) return;
  int provided = 0;
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  g_mpi = true;
  auto w = std::make_shared<MpiWorld>();
  // libgomp sizes its pool from the cores this process may run on: mpirun binds each of
  // N <= cores ranks to its own core (1 thread each); unbound ranks on one machine share
  // the cores. An explicit OMP_NUM_THREADS wins.
  if (w->size() > 1 && settings().threads == 0) {
    const int threads = std::max(1, omp_get_num_procs() / settings().mpi_local_ranks);
    xg::set_num_threads(std::min(threads, omp_get_max_threads()));
  }
  finetune::set_world(std::move(w));
#else
  (void)argc;
  (void)argv;
  if (settings().mpi_launched)
    std::cerr << "xgrad: started by an MPI launcher, but built without MPI (cmake -DXGRAD_MPI=ON needs "
                 "libopenmpi-dev): every rank runs the whole job alone\n";
#endif
}

Session::~Session() {
#ifdef XGRAD_WITH_MPI
  if (!g_mpi) return;
  finetune::set_world(nullptr);
  MPI_Finalize();
  g_mpi = false;
#endif
}

}  // namespace xg::distributed

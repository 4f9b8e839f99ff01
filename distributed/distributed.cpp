// Session and MPI's world: MPI_Init/Finalize, the rank and world size, and the collectives of
// data parallelism (bucketed gradient sums, metric sums, agreeing on a failure). Compiled with
// XGRAD_WITH_MPI when CMake found MPI; without it, the world stays one process.
#include "distributed/distributed.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "autograd/error.hpp"
#include "autograd/settings.hpp"
#include "autograd/threads.hpp"
#include "finetune/world.hpp"

#ifdef XGRAD_WITH_MPI
#include <mpi.h>
#endif

namespace xg::distributed {

namespace {

#ifdef XGRAD_WITH_MPI
bool g_mpi = false;  // MPI_Init was called (and MPI_Finalize not yet)
#endif

#ifdef XGRAD_WITH_MPI
void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(str_cat("distributed: ", what, " failed: ", std::string(text, static_cast<std::size_t>(len))));
}

// Sums n elements of a buffer of dtype d in place, n split into int-sized calls.
void allreduce_in_place(void* data, int64_t n, Dtype d) {
  const MPI_Datatype type = d == kFloat64 ? MPI_DOUBLE : MPI_FLOAT;
  char* p = static_cast<char*>(data);
  constexpr int64_t kMaxCount = 1 << 30;
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(kMaxCount, n - done);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, p + done * static_cast<int64_t>(itemsize(d)), static_cast<int>(count), type,
                            MPI_SUM, MPI_COMM_WORLD),
              "MPI_Allreduce of gradients");
    done += count;
  }
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
    if (size_ == 1) return;
    // Which parameters have a gradient on some rank (a branch not taken on this one leaves its
    // parameters without): those get zeros where missing, so every rank sends the same layout.
    std::vector<int> defined(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) defined[i] = params[i].grad().defined() ? 1 : 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, defined.data(), static_cast<int>(defined.size()), MPI_INT, MPI_MAX,
                            MPI_COMM_WORLD),
              "MPI_Allreduce of the gradient layout");
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!defined[i]) continue;
      Tensor p = params[i];
      if (!p.grad().defined()) p.set_grad(zeros(p.shape(), p.dtype()));
      grads.push_back(p.grad());
    }
    // Buckets of consecutive gradients of one dtype. The sums land in fresh tensors: a
    // gradient's storage may be shared with a tensor the backward pass handed over. The
    // bucket itself is kept from step to step: OpenMPI's shared-memory transport is far slower
    // on memory it has not seen before than on a buffer it has sent from already.
    std::vector<char>& bucket = bucket_;
    std::size_t i = 0;
    while (i < grads.size()) {
      const Dtype d = grads[i].dtype();
      const int64_t item = static_cast<int64_t>(itemsize(d));
      std::size_t j = i;
      int64_t n = 0;
      while (j < grads.size() && grads[j].dtype() == d && (j == i || (n + grads[j].numel()) * item <= bucket_bytes))
        n += grads[j++].numel();
      if (bucket.size() < static_cast<std::size_t>(n * item)) bucket.resize(static_cast<std::size_t>(n * item));
      int64_t at = 0;
      for (std::size_t k = i; k < j; ++k) {
        const int64_t bytes = grads[k].numel() * item;
        std::memcpy(bucket.data() + at, grads[k].raw_data(), static_cast<std::size_t>(bytes));
        at += bytes;
      }
      allreduce_in_place(bucket.data(), n, d);
      at = 0;
      for (std::size_t k = i; k < j; ++k) {
        Tensor sum = empty(grads[k].shape(), d);
        const int64_t bytes = grads[k].numel() * item;
        std::memcpy(sum.raw_data(), bucket.data() + at, static_cast<std::size_t>(bytes));
        at += bytes;
        grads[k] = sum;
      }
      i = j;
    }
    std::size_t g = 0;
    for (std::size_t k = 0; k < params.size(); ++k)
      if (defined[k]) {
        Tensor p = params[k];
        p.set_grad(grads[g++]);
      }
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

 private:
  int rank_ = 0, size_ = 1;
  mutable std::vector<char> bucket_;  // allreduce_grads's, kept from step to step
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

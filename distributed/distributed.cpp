// Session and MPI's world: MPI_Init/Finalize, the rank and world size, and the collectives of
// data parallelism (bucketed gradient sums; for ZeRO stage 1 sums of each rank's slice in rank
// order, the all-gather of the updated slices and the gather of the state; metric sums,
// agreeing on a failure). Compiled with XGRAD_WITH_MPI when CMake found MPI; without it, the
// world stays one process.
#include "distributed/distributed.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>

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

MPI_Datatype mpi_type(Dtype d, const char* what) {
  check(d == kFloat32 || d == kFloat64, "distributed: ", what, " of ", dtype_name(d),
        " tensors (float32 and float64 only)");
  return d == kFloat64 ? MPI_DOUBLE : MPI_FLOAT;
}

int int_count(int64_t n, const char* what) {
  check(n <= std::numeric_limits<int>::max(), "distributed: ", what, " of ", n, " elements, more than MPI's int counts");
  return static_cast<int>(n);
}

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

// Where each rank's slices lie in a bucket of the parameters `index[i..j)` laid end to end:
// rank q's are one run (it owns a contiguous part of all parameters, and the ranks follow each
// other in order), of count[q] elements from at[q].
void rank_runs(const optim::Partition& part, const std::vector<std::size_t>& index, const std::vector<Tensor>& ts,
               std::size_t i, std::size_t j, std::vector<int>& count, std::vector<int>& at) {
  const int n = part.ranks();
  count.assign(static_cast<std::size_t>(n), 0);
  at.assign(static_cast<std::size_t>(n), 0);
  std::vector<int64_t> first(static_cast<std::size_t>(n), -1), c(static_cast<std::size_t>(n), 0);
  int64_t offset = 0;
  for (std::size_t k = i; k < j; ++k) {
    for (int q = 0; q < n; ++q) {
      const optim::Shard s = part.slice(q, index[k]);
      if (s.size() == 0) continue;
      if (first[q] < 0) first[q] = offset + s.begin;
      check(first[q] + c[q] == offset + s.begin, "distributed: rank ", q, "'s slices of a bucket are not contiguous");
      c[q] += s.size();
    }
    offset += ts[k].numel();
  }
  for (int q = 0; q < n; ++q) {
    count[q] = int_count(c[q], "a bucket");
    at[q] = int_count(first[q] < 0 ? 0 : first[q], "a bucket");
  }
}

// The gradients every rank will sum, as allreduce_grads's layout rule says: `index` gets the
// parameters with a gradient on some rank (zeros where this rank has none), `grads` theirs.
void agree_on_layout(const std::vector<Tensor>& params, std::vector<std::size_t>& index, std::vector<Tensor>& grads) {
  std::vector<int> defined(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) defined[i] = params[i].grad().defined() ? 1 : 0;
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, defined.data(), static_cast<int>(defined.size()), MPI_INT, MPI_MAX,
                          MPI_COMM_WORLD),
            "MPI_Allreduce of the gradient layout");
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!defined[i]) continue;
    Tensor p = params[i];
    if (!p.grad().defined()) p.set_grad(zeros(p.shape(), p.dtype()));
    index.push_back(i);
    grads.push_back(p.grad());
  }
}

// Tensors [i, j) of one dtype end to end into `bucket` (grown as needed); returns their elements.
int64_t pack(std::vector<char>& bucket, const std::vector<Tensor>& ts, std::size_t i, std::size_t j) {
  const std::size_t item = itemsize(ts[i].dtype());
  int64_t n = 0;
  for (std::size_t k = i; k < j; ++k) n += ts[k].numel();
  if (bucket.size() < static_cast<std::size_t>(n) * item) bucket.resize(static_cast<std::size_t>(n) * item);
  std::size_t at = 0;
  for (std::size_t k = i; k < j; ++k) {
    std::memcpy(bucket.data() + at, ts[k].raw_data(), static_cast<std::size_t>(ts[k].numel()) * item);
    at += static_cast<std::size_t>(ts[k].numel()) * item;
  }
  return n;
}

// dst[i] += src[i], in the tensors' dtype: one more rank's term of a rank-order sum.
void add_into(char* dst, const char* src, int64_t n, Dtype d) {
  if (d == kFloat64) {
    double* a = reinterpret_cast<double*>(dst);
    const double* b = reinterpret_cast<const double*>(src);
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  } else {
    float* a = reinterpret_cast<float*>(dst);
    const float* b = reinterpret_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
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
    std::vector<std::size_t> index;
    std::vector<Tensor> grads;
    agree_on_layout(params, index, grads);
    // Buckets of consecutive gradients of one dtype. The sums land in fresh tensors: a
    // gradient's storage may be shared with a tensor the backward pass handed over. The
    // bucket itself is kept from step to step: OpenMPI's shared-memory transport is far slower
    // on memory it has not seen before than on a buffer it has sent from already.
    std::vector<char>& bucket = bucket_;
    for (const auto& [i, j] : buckets(grads, bucket_bytes)) {
      const Dtype d = grads[i].dtype();
      const int64_t item = static_cast<int64_t>(itemsize(d));
      const int64_t n = pack(bucket, grads, i, j);  // (before bucket.data(): it may grow the bucket)
      allreduce_in_place(bucket.data(), n, d);
      int64_t at = 0;
      for (std::size_t k = i; k < j; ++k) {
        Tensor sum = empty(grads[k].shape(), d);
        const int64_t bytes = grads[k].numel() * item;
        std::memcpy(sum.raw_data(), bucket.data() + at, static_cast<std::size_t>(bytes));
        at += bytes;
        Tensor(params[index[k]]).set_grad(sum);
      }
    }
  }

  void reduce_scatter_grads(const std::vector<Tensor>& params, const optim::Partition& part,
                            int64_t bucket_bytes) const override {
    if (size_ == 1) return;
    check_partition(part, params.size());
    std::vector<std::size_t> index;
    std::vector<Tensor> grads;
    agree_on_layout(params, index, grads);
    // NOTE: MPI_Reduce_scatter may add the ranks' terms in any order (OpenMPI's ring and tree
    // algorithms differ per segment and per number of ranks), and float addition does not
    // associate. So each rank receives every rank's terms for its own slice (MPI_Alltoallv)
    // and adds them itself in rank order: the sum one process makes by accumulating the
    // micro-batches in turn, whatever the number of ranks.
    std::vector<char>& bucket = bucket_;
    std::vector<char>& terms = terms_;
    std::vector<int> count, at, rcount(static_cast<std::size_t>(size_)), rat(static_cast<std::size_t>(size_));
    for (const auto& [i, j] : buckets(grads, bucket_bytes)) {
      const Dtype d = grads[i].dtype();
      const MPI_Datatype type = mpi_type(d, "a sum of gradients");
      const std::size_t item = itemsize(d);
      pack(bucket, grads, i, j);
      rank_runs(part, index, grads, i, j, count, at);
      const int mine = count[static_cast<std::size_t>(rank_)];
      for (int q = 0; q < size_; ++q) {
        rcount[static_cast<std::size_t>(q)] = mine;
        rat[static_cast<std::size_t>(q)] = int_count(static_cast<int64_t>(q) * mine, "a bucket's terms");
      }
      const std::size_t mine_bytes = static_cast<std::size_t>(mine) * item;
      if (terms.size() < mine_bytes * static_cast<std::size_t>(size_)) terms.resize(mine_bytes * static_cast<std::size_t>(size_));
      mpi_check(MPI_Alltoallv(bucket.data(), count.data(), at.data(), type, terms.data(), rcount.data(), rat.data(), type,
                              MPI_COMM_WORLD),
                "MPI_Alltoallv of gradients");
      for (int q = 1; q < size_; ++q)
        add_into(terms.data(), terms.data() + static_cast<std::size_t>(q) * mine_bytes, mine, d);
      // The sums go into fresh tensors, as in allreduce_grads: this rank's own values with its
      // slice summed. A gradient this rank owns none of stays as it is (nothing reads it).
      const int64_t start = at[static_cast<std::size_t>(rank_)];
      int64_t off = 0;
      for (std::size_t k = i; k < j; ++k) {
        const optim::Shard s = part.slice(rank_, index[k]);
        if (s.size() > 0) {
          Tensor g = empty(grads[k].shape(), d);
          std::memcpy(g.raw_data(), grads[k].raw_data(), static_cast<std::size_t>(grads[k].numel()) * item);
          std::memcpy(static_cast<char*>(g.raw_data()) + static_cast<std::size_t>(s.begin) * item,
                      terms.data() + static_cast<std::size_t>(off + s.begin - start) * item,
                      static_cast<std::size_t>(s.size()) * item);
          Tensor(params[index[k]]).set_grad(g);
        }
        off += grads[k].numel();
      }
    }
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

 private:
  int rank_ = 0, size_ = 1;
  void check_partition(const optim::Partition& part, std::size_t params) const {
    check(part.ranks() == size_ && part.num_params() == params, "distributed: a partition over ", part.ranks(),
          " ranks and ", part.num_params(), " parameters, for ", size_, " ranks and ", params);
  }

  mutable std::vector<char> bucket_;  // the collectives' buffer, kept from step to step
  mutable std::vector<char> terms_;   // reduce_scatter_grads's: every rank's terms of this rank's slice
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

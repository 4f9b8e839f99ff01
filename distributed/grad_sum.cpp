// BucketSum: gradients summed over the ranks in buckets with nonblocking point-to-point MPI,
// started from backward's leaf hook and progressed by it, finished after backward.
#include "distributed/grad_sum.hpp"

#ifdef XGRAD_WITH_MPI

#include <cstring>
#include <unordered_map>

#include "autograd/error.hpp"
#include "distributed/mpi_helpers.hpp"

namespace xg::distributed {

namespace {

using detail::int_count;
using detail::mpi_check;
using detail::mpi_type;

// a[i] += b[i] in the tensors' dtype: one more rank's term of a rank-order sum.
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

// NOTE: MPI_Allreduce and MPI_Reduce_scatter may add the ranks' terms in any order (OpenMPI's
// ring and tree algorithms differ per message size and per number of ranks), and float addition
// does not associate. So the rank owning each part of a bucket receives every rank's terms of it
// and adds them itself in rank order, ((g0 + g1) + g2) ...: the sum one process makes by
// accumulating the micro-batches in turn, whatever the number of ranks, bucket size or timing.
class BucketSum : public finetune::GradSum {
 public:
  BucketSum(const std::vector<Tensor>& params, const optim::Partition* part, std::vector<Tensor>* slices,
            int64_t bucket_bytes, bool overlap, std::vector<std::vector<char>>& buffers)
      : params_(params), part_(part), slices_(slices), overlap_(overlap), buffers_(buffers) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    check(!slices_ || part_, "distributed: gradient slices (ZeRO stage 2) need a partition");
    if (part_)
      check(part_->ranks() == size_ && part_->num_params() == params_.size(), "distributed: a partition over ",
            part_->ranks(), " ranks and ", part_->num_params(), " parameters, for ", size_, " ranks and ", params_.size());
    if (slices_) slices_->assign(params_.size(), Tensor());
    dropped_.assign(params_.size(), false);
    // Runs of one dtype from the end of params (backward finishes the last layers first), each
    // at most bucket_bytes (a bigger tensor alone); inside a bucket the parameters keep their
    // order, so each rank's slices of a partition stay one run.
    bucket_of_.resize(params_.size());
    std::vector<std::size_t> identity(params_.size());
    for (std::size_t k = 0; k < params_.size(); ++k) {
      identity[k] = k;
      where_[params_[k].node()] = k;
    }
    for (std::size_t j = params_.size(); j > 0;) {
      const Dtype d = params_[j - 1].dtype();
      mpi_type(d, "a sum of gradients");
      const int64_t item = static_cast<int64_t>(itemsize(d));
      Bucket b;
      b.j = j;
      b.i = j;
      while (b.i > 0 && params_[b.i - 1].dtype() == d && (b.i == j || (b.n + params_[b.i - 1].numel()) * item <= bucket_bytes))
        b.n += params_[--b.i].numel();
      b.waiting = static_cast<int>(b.j - b.i);
      if (part_) {
        detail::rank_runs(*part_, identity, params_, b.i, b.j, b.count, b.at);
      } else {  // the bucket cut in `size_` even runs
        for (int q = 0; q < size_; ++q) {
          const int64_t from = b.n * q / size_, to = b.n * (q + 1) / size_;
          b.at.push_back(int_count(from, "a bucket"));
          b.count.push_back(int_count(to - from, "a bucket"));
        }
      }
      for (std::size_t k = b.i; k < b.j; ++k) bucket_of_[k] = buckets_.size();
      buckets_.push_back(std::move(b));
      j = buckets_.back().i;
    }
    for (std::size_t slot = buffers_.size() / 2; slot > 0; --slot) free_.push_back(slot - 1);
    ready_.assign(params_.size(), false);
  }

  void ready(const Tensor& param) override {
    auto it = where_.find(param.node());
    if (!overlap_ || it == where_.end() || ready_[it->second]) return;
    ready_[it->second] = true;
    --buckets_[bucket_of_[it->second]].waiting;
    // Buckets go out in order, the same on every rank, each when all of its gradients are in
    // and fewer than kMaxInFlight are on their way (a done one frees its buffers).
    progress();
    while (next_ < buckets_.size() && buckets_[next_].waiting == 0 && in_flight_ < kMaxInFlight) post(next_++);
  }

  void finish() override {
    // The parameters with a gradient on some rank: zeros where this rank has none; one with no
    // gradient anywhere keeps none (as in one process). A gradient ZeRO stage 2 already dropped
    // (its bucket went out during backward) had one.
    std::vector<int> defined(params_.size());
    for (std::size_t k = 0; k < params_.size(); ++k) defined[k] = params_[k].grad().defined() || dropped_[k] ? 1 : 0;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, defined.data(), int_count(static_cast<int64_t>(defined.size()), "a layout"),
                            MPI_INT, MPI_MAX, MPI_COMM_WORLD),
              "MPI_Allreduce of the gradient layout");
    for (std::size_t k = 0; k < params_.size(); ++k)
      if (defined[k] && !params_[k].grad().defined() && !dropped_[k])
        Tensor(params_[k]).set_grad(zeros(params_[k].shape(), params_[k].dtype()));
    // The rest in order, the next ones going out while this rank waits for one (one at a time
    // without overlap: one bucket's buffers).
    const int most = overlap_ ? kMaxInFlight : 1;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      while (next_ < buckets_.size() && (next_ == b || in_flight_ < most)) post(next_++);
      while (buckets_[b].state != kDone) {
        mpi_check(MPI_Waitall(static_cast<int>(buckets_[b].reqs.size()), buckets_[b].reqs.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall of gradient sums");
        advance(b);
      }
      if (!buckets_[b].unpacked) unpack(b, &defined);
    }
  }

 private:
  enum State { kIdle, kTerms, kSums, kDone };
  // Buckets on their way at once during backward. Each holds its buffers (1.5 to 2 buckets of
  // bytes) from when it goes out, at the step's peak of activations, until it is done; a rank
  // behind the others would otherwise have them all out. Measured at gpt2s's shape on 2 ranks
  // (bench/overlap_scaleout.sh): with 2, a median wait after backward of 209 ms (151 with no
  // bound, 752 without overlap) and peak RSS 70-80 MB above no overlap (540-560 with no bound).
  static constexpr int kMaxInFlight = 2;
  struct Bucket {
    std::size_t i = 0, j = 0;    // params [i, j)
    int64_t n = 0;               // their elements
    int waiting = 0;             // parameters whose gradient is not in yet
    std::vector<int> count, at;  // rank q's part: count[q] elements from at[q]
    State state = kIdle;
    bool unpacked = false;  // its sums are in the gradients
    std::size_t slot = 0;   // its pair of buffers
    std::vector<MPI_Request> reqs;
  };

  // A bucket in flight holds a pair of the world's buffers, its slot, until its sums are unpacked:
  // the buffers of the few buckets in flight at once, not of every bucket.
  std::vector<char>& data(std::size_t b) { return buffers_[2 * buckets_[b].slot]; }
  // The other ranks' terms of this rank's part, in rank order (this rank's own is in data).
  std::vector<char>& terms(std::size_t b) { return buffers_[2 * buckets_[b].slot + 1]; }
  std::size_t slot(int q) const { return static_cast<std::size_t>(q < rank_ ? q : q - 1); }
  static int tag(std::size_t b, int phase) { return static_cast<int>(2 * b) + phase; }

  // Packs bucket b's gradients (zeros for none) and sends each rank its part.
  void post(std::size_t b) {
    Bucket& bk = buckets_[b];
    const Dtype d = params_[bk.i].dtype();
    const MPI_Datatype type = mpi_type(d, "a sum of gradients");
    const std::size_t item = itemsize(d);
    if (free_.empty()) {
      free_.push_back(buffers_.size() / 2);
      buffers_.resize(buffers_.size() + 2);
    }
    bk.slot = free_.back();
    free_.pop_back();
    ++in_flight_;
    std::vector<char>& buf = data(b);
    if (buf.size() < static_cast<std::size_t>(bk.n) * item) buf.resize(static_cast<std::size_t>(bk.n) * item);
    std::size_t off = 0;
    for (std::size_t k = bk.i; k < bk.j; ++k) {
      const std::size_t bytes = static_cast<std::size_t>(params_[k].numel()) * item;
      const Tensor g = params_[k].grad();
      if (g.defined()) std::memcpy(buf.data() + off, g.raw_data(), bytes);
      else std::memset(buf.data() + off, 0, bytes);
      off += bytes;
      if (slices_ && g.defined()) {  // ZeRO stage 2: the bucket holds it now; the sum keeps this rank's slice
        Tensor(params_[k]).zero_grad();
        dropped_[k] = true;
      }
    }
    const int mine = bk.count[static_cast<std::size_t>(rank_)];
    const std::size_t mine_bytes = static_cast<std::size_t>(mine) * item;
    std::vector<char>& t = terms(b);
    const std::size_t others = static_cast<std::size_t>(size_ - 1);
    if (t.size() < mine_bytes * others) t.resize(mine_bytes * others);
    bk.reqs.clear();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const std::size_t qs = static_cast<std::size_t>(q);
      bk.reqs.emplace_back();
      mpi_check(MPI_Irecv(t.data() + slot(q) * mine_bytes, mine, type, q, tag(b, 0), MPI_COMM_WORLD, &bk.reqs.back()),
                "MPI_Irecv of gradients");
      bk.reqs.emplace_back();
      mpi_check(MPI_Isend(buf.data() + static_cast<std::size_t>(bk.at[qs]) * item, bk.count[qs], type, q, tag(b, 0),
                          MPI_COMM_WORLD, &bk.reqs.back()),
                "MPI_Isend of gradients");
    }
    bk.state = kTerms;
  }

  // Moves bucket b on once its requests are complete: the terms in, this rank adds them up
  // (and with all-reduce sends its sums to every rank); the sums in, it is done.
  void advance(std::size_t b) {
    Bucket& bk = buckets_[b];
    if (bk.state == kSums) {
      bk.state = kDone;
      return;
    }
    const Dtype d = params_[bk.i].dtype();
    const std::size_t item = itemsize(d);
    const std::size_t me = static_cast<std::size_t>(rank_);
    const int mine = bk.count[me];
    const std::size_t mine_bytes = static_cast<std::size_t>(mine) * item;
    char* own = data(b).data() + static_cast<std::size_t>(bk.at[me]) * item;
    char* t = terms(b).data();
    // The running sum starts at rank 0's term: this rank's own part, or else the first slot.
    char* acc = rank_ == 0 ? own : t;
    for (int q = 1; q < size_; ++q) add_into(acc, q == rank_ ? own : t + slot(q) * mine_bytes, mine, d);
    if (acc != own) std::memcpy(own, acc, mine_bytes);
    if (part_) {  // ZeRO: each rank keeps only its own part's sum
      bk.state = kDone;
      return;
    }
    const MPI_Datatype type = mpi_type(d, "a sum of gradients");
    bk.reqs.clear();
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const std::size_t qs = static_cast<std::size_t>(q);
      bk.reqs.emplace_back();
      mpi_check(MPI_Irecv(data(b).data() + static_cast<std::size_t>(bk.at[qs]) * item, bk.count[qs], type, q, tag(b, 1),
                          MPI_COMM_WORLD, &bk.reqs.back()),
                "MPI_Irecv of gradient sums");
      bk.reqs.emplace_back();
      mpi_check(MPI_Isend(own, mine, type, q, tag(b, 1), MPI_COMM_WORLD, &bk.reqs.back()), "MPI_Isend of gradient sums");
    }
    bk.state = kSums;
  }

  // Lets MPI move the buckets in flight along (it makes progress only inside MPI calls). A
  // bucket done during backward goes into the gradients at once: every parameter in it has one.
  void progress() {
    for (std::size_t b = 0; b < next_; ++b) {
      Bucket& bk = buckets_[b];
      if (bk.state != kTerms && bk.state != kSums) continue;
      int done = 0;
      mpi_check(MPI_Testall(static_cast<int>(bk.reqs.size()), bk.reqs.data(), &done, MPI_STATUSES_IGNORE),
                "MPI_Testall of gradient sums");
      if (done) advance(b);
      if (bk.state == kDone) unpack(b, nullptr);
    }
  }

  // The sums of bucket b into fresh gradient tensors (a gradient's storage may be shared with
  // a tensor the backward pass handed over). With ZeRO stage 1 a gradient this rank owns none of
  // stays as it is (nothing reads it); the others are this rank's values with its part summed.
  // With stage 2 only this rank's slice of each is kept, in slices_.
  // `defined`: which parameters have a gradient on some rank (nullptr: all of them).
  void unpack(std::size_t b, const std::vector<int>* defined) {
    Bucket& bk = buckets_[b];
    bk.unpacked = true;
    const Dtype d = params_[bk.i].dtype();
    const std::size_t item = itemsize(d);
    std::size_t off = 0;
    for (std::size_t k = bk.i; k < bk.j; ++k) {
      const std::size_t bytes = static_cast<std::size_t>(params_[k].numel()) * item;
      const bool some_rank_has_one = !defined || (*defined)[k];
      if (some_rank_has_one && slices_) {
        const optim::Shard s = part_->slice(rank_, k);
        Tensor g = empty({s.size()}, d);
        if (s.size() > 0)
          std::memcpy(g.raw_data(), data(b).data() + off + static_cast<std::size_t>(s.begin) * item,
                      static_cast<std::size_t>(s.size()) * item);
        (*slices_)[k] = g;
      } else if (some_rank_has_one && (!part_ || part_->slice(rank_, k).size() > 0)) {
        Tensor g = empty(params_[k].shape(), params_[k].dtype());
        std::memcpy(g.raw_data(), data(b).data() + off, bytes);
        Tensor(params_[k]).set_grad(g);
      }
      off += bytes;
    }
    free_.push_back(bk.slot);
    --in_flight_;
  }

  std::vector<Tensor> params_;
  const optim::Partition* part_;
  std::vector<Tensor>* slices_;  // ZeRO stage 2: each parameter's summed slice (nullptr: keep .grad)
  std::vector<bool> dropped_;    // stage 2: the gradients dropped once their bucket was packed
  bool overlap_;
  std::vector<std::vector<char>>& buffers_;
  int rank_ = 0, size_ = 1;
  std::vector<Bucket> buckets_;               // in the order they go out
  std::vector<std::size_t> bucket_of_;        // each parameter's bucket
  std::unordered_map<const Node*, std::size_t> where_;  // a parameter's index, by node
  std::vector<bool> ready_;
  std::size_t next_ = 0;  // the next bucket to go out
  std::vector<std::size_t> free_;  // the slots of buffers_ no bucket holds
  int in_flight_ = 0;              // buckets out and not yet unpacked
};

}  // namespace

std::unique_ptr<finetune::GradSum> make_grad_sum(const std::vector<Tensor>& params, const optim::Partition* part,
                                                 std::vector<Tensor>* slices, int64_t bucket_bytes, bool overlap,
                                                 std::vector<std::vector<char>>& buffers) {
  return std::make_unique<BucketSum>(params, part, slices, bucket_bytes, overlap, buffers);
}

}  // namespace xg::distributed

#endif  // XGRAD_WITH_MPI

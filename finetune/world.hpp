// The processes a training run is spread over, as the train loop sees them: this process's
// rank, their number, and the few collectives data parallelism needs. A run is one process
// (World's own defaults) unless a launcher installed another world, as torch.distributed's
// default process group: distributed/distributed.hpp installs MPI's. The train layer never
// names MPI, so a program that trains in one process needs no MPI to build or link.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/error.hpp"
#include "autograd/tensor.hpp"
#include "optim/shard.hpp"

namespace xg::finetune {

// One step's gradient sum overlapped with its backward (PyTorch DDP's buckets), from
// World::begin_grad_sum. ready(p) as backward gives parameter p its last gradient (from a
// LeafGradHookGuard, autograd/grad_hook.hpp): a bucket is sent as soon as all its parameters are
// ready. finish() sends what is left, waits for every sum and installs them. Every rank calls
// finish() once, also a rank whose backward failed (its sums are then dropped by every rank).
class GradSum {
 public:
  virtual ~GradSum() = default;
  virtual void ready(const Tensor& param) { (void)param; }
  virtual void finish() {}
};

// An error every rank raises at the same point with the same text: a decision the ranks took
// together (a NaN loss on one rank under --on-nan stop reaches every rank through
// World::first_rank_with). The job reports it once, from the main rank: see World::await_abort.
class AgreedError : public Error {
 public:
  explicit AgreedError(const std::string& what) : Error(what) {}
};

class World {
 public:
  virtual ~World() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  bool is_main() const { return rank() == 0; }

  // Sums each gradient of `params` over the ranks, in place, in buckets of at most
  // `bucket_bytes`. A parameter whose gradient is undefined on some ranks but not all gets
  // zeros there first; one with no gradient anywhere keeps none (as in one process).
  virtual void allreduce_grads(const std::vector<Tensor>& params, int64_t bucket_bytes = 32 << 20) const;
  // ZeRO stage 1. Sums each gradient of `params` over the ranks where this rank owns it
  // (part.slice(rank(), k)), adding the ranks' gradients in rank order, ((g0 + g1) + g2) ...,
  // as one process accumulates its micro-batches; elsewhere a gradient keeps this rank's own
  // values. Undefined gradients are treated as in allreduce_grads.
  // ZeRO stage 2 (`slices` given): the same sums, but (*slices)[k] receives parameter k's owned
  // slice of the sum as a flat tensor of its own (0 elements where this rank owns none of it;
  // undefined where no rank has a gradient) and .grad is dropped, each as soon as its bucket
  // has been sent: a rank ends up holding 1/N of the gradients.
  virtual void reduce_scatter_grads(const std::vector<Tensor>& params, const optim::Partition& part,
                                    int64_t bucket_bytes = 32 << 20, std::vector<Tensor>* slices = nullptr) const;
  // The sums allreduce_grads (part == nullptr) or reduce_scatter_grads (*part, which must outlive
  // it, and `slices`) make, bit for bit, sent bucket by bucket while the backward that follows
  // still runs. The buckets are runs of `params` from its end, the order backward usually
  // finishes them.
  virtual std::unique_ptr<GradSum> begin_grad_sum(const std::vector<Tensor>& params, const optim::Partition* part,
                                                  int64_t bucket_bytes = 32 << 20,
                                                  std::vector<Tensor>* slices = nullptr) const;
  // ZeRO stage 1, after the step: each rank's slices of `params` (part) to every rank, in place.
  virtual void allgather_params(const std::vector<Tensor>& params, const optim::Partition& part,
                                int64_t bucket_bytes = 32 << 20) const;
  // The 1-d tensors `piece` of every rank (one dtype), end to end in rank order, on rank 0, as
  // a new tensor (one process: a copy of `piece`); an undefined tensor elsewhere.
  virtual Tensor gather_to_main(const Tensor& piece) const;
  // Sums x over the ranks, in place.
  virtual void allreduce_sum(std::vector<double>& x) const;
  // The lowest rank for which `flag` is true, or -1 when it is false everywhere.
  virtual int first_rank_with(bool flag) const { return flag ? rank() : -1; }
  // `text` as rank `root` has it, on every rank.
  virtual std::string broadcast(const std::string& text, int root) const;
  // Ends the program with `exit_code`, every rank of it: one rank returning alone after an
  // error would leave the others waiting in a collective. One process: std::exit.
  [[noreturn]] virtual void abort(int exit_code) const;
  // A rank other than the main one after an AgreedError: leaves ending the job to the main rank,
  // which raised the same error, reports it and aborts every rank. Were each rank to report and
  // abort, the first abort could kill the others before their report is out. Aborts by itself
  // if the main rank has not ended the job within a minute. One process: std::exit.
  [[noreturn]] virtual void await_abort(int exit_code) const;
};

// The run's world: the one installed last, or a world of this one process.
const World& world();
// Installs `w` (nullptr: back to one process). distributed::Session does, for MPI.
void set_world(std::shared_ptr<const World> w);

}  // namespace xg::finetune

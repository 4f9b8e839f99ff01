// The gradient sums of data parallelism over MPI, bucket by bucket: each rank adds up its part
// of a bucket from every rank's terms in rank order, then (all-reduce) hands its sums to all.
#pragma once

#ifdef XGRAD_WITH_MPI

#include <memory>
#include <vector>

#include "finetune/world.hpp"

namespace xg::distributed {

// MpiWorld's begin_grad_sum (finetune/world.hpp). `overlap`: buckets go out as ready() completes
// them; otherwise finish() sends them one at a time (one bucket's buffers at a time).
// `buffers` are the world's, kept from step to step: OpenMPI's shared-memory transport is far
// slower on memory it has not seen before than on a buffer it has sent from already.
// `slices` (ZeRO stage 2, with `part`): where each parameter's owned slice of the sum goes, its
// .grad dropped (World::reduce_scatter_grads).
std::unique_ptr<finetune::GradSum> make_grad_sum(const std::vector<Tensor>& params, const optim::Partition* part,
                                                 std::vector<Tensor>* slices, int64_t bucket_bytes, bool overlap,
                                                 std::vector<std::vector<char>>& buffers);

}  // namespace xg::distributed

#endif  // XGRAD_WITH_MPI

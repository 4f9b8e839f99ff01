// What distributed.cpp and grad_sum.cpp share under MPI: errors as xg::Error, MPI's types and
// int counts, and where each rank's part of a bucket of parameters lies.
#pragma once

#ifdef XGRAD_WITH_MPI

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "autograd/tensor.hpp"
#include "optim/shard.hpp"

namespace xg::distributed::detail {

// Throws an xg::Error naming `what` and MPI's message unless rc is MPI_SUCCESS.
void mpi_check(int rc, const char* what);
// MPI's type for float32 and float64 tensors; an error naming `what` for other dtypes.
MPI_Datatype mpi_type(Dtype d, const char* what);
// n as an MPI count; an error naming `what` past int's range.
int int_count(int64_t n, const char* what);

// Where each rank's slices lie in a bucket of the parameters `index[i..j)` laid end to end:
// rank q's are one run (it owns a contiguous part of all parameters, and the ranks follow each
// other in order), of count[q] elements from at[q].
void rank_runs(const optim::Partition& part, const std::vector<std::size_t>& index, const std::vector<Tensor>& ts,
               std::size_t i, std::size_t j, std::vector<int>& count, std::vector<int>& at);

}  // namespace xg::distributed::detail

#endif  // XGRAD_WITH_MPI

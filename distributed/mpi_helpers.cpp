// MPI errors, types and counts, and each rank's run of a bucket (mpi_helpers.hpp).
#include "distributed/mpi_helpers.hpp"

#ifdef XGRAD_WITH_MPI

#include <limits>
#include <string>

#include "autograd/error.hpp"

namespace xg::distributed::detail {

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(str_cat("distributed: ", what, " failed: ", std::string(text, static_cast<std::size_t>(len))));
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

}  // namespace xg::distributed::detail

#endif  // XGRAD_WITH_MPI

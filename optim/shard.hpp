// ZeRO's split of the trained parameters over N ranks: the parameters' elements taken end to
// end, in order, cut into N contiguous slices; each rank keeps the optimizer state of one (and
// under stage 2 that slice's summed gradient alone).
#pragma once

#include <cstdint>
#include <vector>

namespace xg::optim {

// The elements [begin, end) of one flattened parameter (empty when begin == end).
struct Shard {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Parameters of `sizes` elements, taken end to end, split into `ranks` contiguous slices of
// about total / ranks elements each. A cut may fall inside a parameter, but only at a multiple
// of detail::kChunk from its start: the optimizer and clip_grad_norm_ work in chunks of that
// size, so a rank's part is made of whole chunks and each element is updated, and each chunk's
// share of the norm summed, exactly as in one process. The split depends on sizes and ranks
// alone, so every rank computes the same one.
class Partition {
 public:
  Partition(std::vector<int64_t> sizes, int ranks);
  int ranks() const { return ranks_; }
  std::size_t num_params() const { return sizes_.size(); }
  // Rank r's elements of parameter k.
  Shard slice(int rank, std::size_t k) const;
  // Rank r's slices of every parameter, in order.
  std::vector<Shard> slices(int rank) const;
  // The elements rank r owns, all parameters together.
  int64_t owned(int rank) const { return bounds_.at(static_cast<std::size_t>(rank) + 1) - bounds_.at(static_cast<std::size_t>(rank)); }

 private:
  std::vector<int64_t> sizes_;
  std::vector<int64_t> offsets_;  // where each parameter starts, end to end (size + 1 entries)
  std::vector<int64_t> bounds_;   // rank r owns [bounds_[r], bounds_[r + 1]) of that line
  int ranks_;
};

}  // namespace xg::optim

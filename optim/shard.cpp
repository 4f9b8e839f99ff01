// Partition: the cut points of ZeRO's slices, each at the chunk boundary nearest an even split.
#include "optim/shard.hpp"

#include <algorithm>

#include "autograd/error.hpp"
#include "optim/detail/parallel.hpp"

namespace xg::optim {

Partition::Partition(std::vector<int64_t> sizes, int ranks) : sizes_(std::move(sizes)), ranks_(ranks) {
  check(ranks > 0, "Partition: ranks must be positive, got ", ranks);
  offsets_.assign(sizes_.size() + 1, 0);
  std::vector<int64_t> cuts{0};  // every place a slice may end: chunk starts and the end
  for (std::size_t k = 0; k < sizes_.size(); ++k) {
    check(sizes_[k] >= 0, "Partition: parameter ", k, " has a negative size ", sizes_[k]);
    for (int64_t b = detail::kChunk; b < sizes_[k]; b += detail::kChunk) cuts.push_back(offsets_[k] + b);
    offsets_[k + 1] = offsets_[k] + sizes_[k];
    if (cuts.back() != offsets_[k + 1]) cuts.push_back(offsets_[k + 1]);
  }
  const int64_t total = offsets_.back();
  bounds_.assign(static_cast<std::size_t>(ranks) + 1, total);
  bounds_[0] = 0;
  for (int r = 1; r < ranks; ++r) {
    // The cut nearest r * total / ranks (the lower one on a tie), never before the previous.
    const int64_t goal = total * r / ranks;
    auto it = std::lower_bound(cuts.begin(), cuts.end(), goal);
    int64_t at = it == cuts.end() ? total : *it;
    if (it != cuts.begin() && goal - *(it - 1) <= at - goal) at = *(it - 1);
    bounds_[static_cast<std::size_t>(r)] = std::max(at, bounds_[static_cast<std::size_t>(r) - 1]);
  }
}

Shard Partition::slice(int rank, std::size_t k) const {
  check(rank >= 0 && rank < ranks_, "Partition: rank ", rank, " out of range (", ranks_, " ranks)");
  check(k < sizes_.size(), "Partition: parameter ", k, " out of range (", sizes_.size(), " parameters)");
  const int64_t lo = std::max(bounds_[static_cast<std::size_t>(rank)], offsets_[k]);
  const int64_t hi = std::min(bounds_[static_cast<std::size_t>(rank) + 1], offsets_[k + 1]);
  if (hi <= lo) return {0, 0};
  return {lo - offsets_[k], hi - offsets_[k]};
}

std::vector<Shard> Partition::slices(int rank) const {
  std::vector<Shard> out;
  for (std::size_t k = 0; k < sizes_.size(); ++k) out.push_back(slice(rank, k));
  return out;
}

}  // namespace xg::optim

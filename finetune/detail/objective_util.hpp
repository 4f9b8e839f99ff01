// Small pieces the objectives share (internal to finetune/*_objective.cpp).
#pragma once

#include <vector>

#include "autograd/random.hpp"

namespace xg::finetune {

// `batch` rows drawn uniformly with replacement; only the generator decides, so a resumed
// run draws the same rows.
template <class Row>
std::vector<Row> draw_rows(const std::vector<Row>& rows, int64_t batch, Generator& rng) {
  std::vector<Row> out;
  out.reserve(static_cast<std::size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) out.push_back(rows[rng.next_u64() % rows.size()]);
  return out;
}

// The first `n` rows (all when there are fewer).
template <class Row>
std::vector<Row> head(const std::vector<Row>& rows, int64_t n) {
  return std::vector<Row>(rows.begin(), rows.begin() + std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(rows.size())));
}

}  // namespace xg::finetune

// Internal to optim/*.cpp: runs an elementwise update over many parameters as one parallel
// loop over fixed-size chunks, so that big and small parameters share the threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "autograd/detail/kernels.hpp"

namespace xg::optim::detail {

// Elements per chunk: small enough to balance two threads, big enough to amortise the loop.
constexpr int64_t kChunk = 1 << 14;

// Calls f(item, begin, end) for every chunk [begin, end) of [0, sizes[item]), each exactly
// once; chunks run in parallel when there is enough work in total. The split depends only
// on the sizes, never on the thread count, so results are the same on any machine.
template <class F>
void for_each_chunk(const std::vector<int64_t>& sizes, F f) {
  struct Chunk {
    int64_t item, begin, end;
  };
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (int64_t b = 0; b < sizes[i]; b += kChunk)
      chunks.push_back({static_cast<int64_t>(i), b, std::min(sizes[i], b + kChunk)});
    total += sizes[i];
  }
  const int64_t n = static_cast<int64_t>(chunks.size());
#pragma omp parallel for schedule(dynamic, 1) if (total >= kParallelMin && n > 1)
  for (int64_t c = 0; c < n; ++c) f(chunks[c].item, chunks[c].begin, chunks[c].end);
}

// f(std::true_type{}) or f(std::false_type{}): turns a flag into a template constant, so
// that the kernels' inner loops carry no branch.
template <class F>
decltype(auto) dispatch_bool(bool b, F&& f) {
  if (b) return f(std::true_type{});
  return f(std::false_type{});
}

}  // namespace xg::optim::detail

// Gradient clipping, torch.nn.utils.clip_grad_norm_ / clip_grad_value_ under their names
// (the trailing _ : they write in place, as in PyTorch): both scale or
// clamp the .grad of each parameter in place; parameters without a gradient are skipped.
#pragma once

#include <functional>
#include <limits>
#include <vector>

#include "autograd/tensor.hpp"
#include "optim/shard.hpp"

namespace xg::optim {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Total norm of all gradients taken together (norm_type > 0, or kInf for the max-abs norm),
// then every gradient *= min(1, max_norm / (total + 1e-6)). Returns the total norm (before
// clipping; 0 when no parameter has a gradient). A NaN/inf total is an error with
// error_if_nonfinite; otherwise, as in torch, the gradients are scaled by the NaN coefficient.
// NOTE: sums run in double for float32 gradients too (torch sums in float32).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// ZeRO: the same norm when each process holds the summed gradient of parameter k only in
// owned[k] (a Partition's slices, whole chunks). Each process measures its chunks, `sum_over_ranks`
// adds the per-chunk results of all processes (each chunk is nonzero on one process only, so the
// sum is exact), and every process adds them up in one process's order: the total, and so each
// clipped element, is bitwise clip_grad_norm_'s. Only the owned slices are scaled.
using SumOverRanks = std::function<void(std::vector<double>&)>;
double clip_grad_norm_(const std::vector<Tensor>& params, const std::vector<Shard>& owned,
                       const SumOverRanks& sum_over_ranks, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// ZeRO stage 2: the same, when each process holds the summed gradient of parameter k as that
// slice alone, slices[k] (owned[k].size() elements, flat; undefined: no gradient), and .grad
// is not read. The total is bitwise clip_grad_norm_'s; the slices are scaled in place.
double clip_grad_norm_(const std::vector<Tensor>& params, const std::vector<Shard>& owned,
                       const std::vector<Tensor>& slices, const SumOverRanks& sum_over_ranks, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace xg::optim

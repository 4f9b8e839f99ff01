// Activation checkpointing (torch.utils.checkpoint): run a function without keeping its
// graph, and recompute it in backward to get the gradients of its inputs and parameters.
#pragma once

#include <functional>
#include <vector>

#include "autograd/tensor.hpp"

namespace xg {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

// outputs = fn(inputs), computed without recording a graph: only `inputs` (and the handles
// in `params`) are kept, not fn's intermediate tensors. In backward, fn runs again with grad
// mode on, on the same inputs, and the outputs' gradients flow back through that recomputed
// graph into the inputs and into `params` (the parameters fn uses, e.g. module.parameters()),
// as if fn had been called directly; the recomputed graph is freed right after.
//
//  - fn may return several outputs (a block's output and its MoE auxiliary loss) and
//    undefined ones; a float output gets a gradient, others are passed through.
//  - preserve_rng_state: the default generator's state is saved before the forward and put
//    back for the recompute (then restored to where it was), so dropout draws the same mask
//    twice. Anything else fn reads (train/eval mode, LoRA's enabled flags, the data of the
//    inputs) must also be the same at backward time.
//  - The recompute runs under the autocast state of the forward (autocast.hpp), as
//    torch.utils.checkpoint restores it, so its bf16 products are the forward's.
//  - With grad mode off (NoGradGuard), or when nothing in inputs and params requires grad, it
//    is just fn(inputs).
//  - Every tensor fn uses that requires grad must be in inputs or params: backward throws
//    naming its shape otherwise (its gradient would be lost).
// NOTE: as torch.utils.checkpoint's non-reentrant version, an input or parameter that needs a
// gradient makes the outputs require grad, also when no input does (LoRA: the embedding is
// frozen, so the first block's input needs no gradient, but its adapters do).
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& params = {}, bool preserve_rng_state = true);

}  // namespace xg

// Training checkpoints: the trained tensors, the optimizer's and the scheduler's state and the
// run's progress (step, RNG states, data position) in one safetensors file, written atomically.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/safetensors.hpp"

namespace xg::finetune {

// What a resumed run needs besides tensors. Strings so that they go into safetensors'
// string-only "__metadata__" unchanged (Generator::state() is text already).
struct TrainProgress {
  int64_t step = 0;         // optimizer steps done
  int64_t tokens_seen = 0;  // training tokens consumed
  int64_t skipped = 0;      // steps skipped for a non-finite loss or gradient (--on-nan skip)
  // Parameters the optimizer holds state for, so that a state removed from the file is found
  // (-1: not recorded, a checkpoint of an earlier version).
  int64_t optim_states = -1;
  std::string data_rng;     // Generator(seed): the root every micro-batch's data and dropout seeds derive from
  std::string global_rng;   // xg::default_generator() (dropout and other draws without a generator)
  std::map<std::string, std::string> extra;  // run-specific (config, data cursor, ...)
};

struct Checkpoint {
  TensorMap model;  // the trained tensors by their module names (a full state dict, or the adapters)
  TensorMap optim;  // Optimizer::state_dict()
  // More of the optimizer's state ("optim.<name>" too), each made as the file writer reaches it
  // and dropped after: ZeRO's moments, gathered one at a time (io::save_safetensors_streamed).
  std::map<std::string, io::LazyTensor> optim_later;
  TensorMap sched;  // LambdaLR::state_dict()
  TrainProgress progress;
};

// One file: "model.<name>", "optim.<name>", "sched.<name>" tensors and the progress under
// "__metadata__" ("format": "xgrad-checkpoint-1", "step", ...). Written to a temporary file in
// the same folder, fsynced and renamed: the previous checkpoint stays valid until the new one
// is complete, whenever the process dies.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// Reads a file save_checkpoint wrote; an xg::Error names the file when it is not one
// (missing format tag, bad step, a tensor outside the three groups).
Checkpoint load_checkpoint(const std::string& path);

}  // namespace xg::finetune

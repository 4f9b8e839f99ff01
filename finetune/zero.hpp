// ZeRO stage 1 for the train loop: each rank keeps AdamW's moments for a 1/N slice of the
// trained parameters, sums the gradients only there, steps it and hands it to the others.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "nn/module.hpp"
#include "optim/optimizer.hpp"
#include "optim/shard.hpp"

namespace xg::finetune {

// One step under ZeRO stage 1, in the world finetune::world() says (see TrainLoop):
//   sum_grads   gradients summed over the ranks, each rank its own slice (rank order)
//   bad_grad    a non-finite summed gradient on any rank, named, agreed by every rank
//   clip        clip_grad_norm_ over the slices, the norm bitwise one process's
//   optimizer.step() on the slice, then share_params: every rank's slice to every rank.
// The slices are an optim::Partition of `trainable` in its order; the optimizer (Adam or
// AdamW over exactly those parameters, in any order) is sharded to match at construction.
class ZeroShards {
 public:
  ZeroShards(const nn::NamedTensors& trainable, optim::Optimizer& optimizer, const std::string& program);

  void sum_grads(const std::vector<Tensor>& params, int64_t bucket_bytes) const;
  // "" when every summed gradient is finite, else which one is not (the same on every rank).
  std::string bad_grad(const nn::NamedTensors& trainable, bool detect_anomaly) const;
  double clip(const std::vector<Tensor>& params, double max_norm) const;
  void share_params(const std::vector<Tensor>& params) const;
  // The optimizer's full state dict for a checkpoint, on rank 0: the same tensors as an
  // unsharded optimizer's, so a checkpoint does not depend on the number of ranks or on ZeRO.
  // The moments come as lazy tensors, each gathered from every rank's slices when the file
  // writer reaches it (in name order), so rank 0 never holds more than one of them whole; every
  // other rank calls serve_state_dict() meanwhile, which takes part in the same gathers.
  struct StreamedState {
    TensorMap eager;                                 // steps and group options
    std::map<std::string, io::LazyTensor> later;     // "state.<i>.<buffer>", gathered when made
  };
  StreamedState streamed_state_dict() const;
  void serve_state_dict() const;
  // The bytes of optimizer state each rank holds, on every rank.
  std::vector<double> state_bytes_per_rank() const;
  const optim::Partition& partition() const { return part_; }

 private:
  optim::Optimizer& opt_;
  optim::Partition part_;
  std::vector<optim::Shard> mine_;  // this rank's slice of each trained parameter, trainable's order
  // Each moment's state-dict name -> (parameter index, buffer name), in the order of the names.
  std::map<std::string, std::pair<std::size_t, std::string>> moments() const;
};

}  // namespace xg::finetune

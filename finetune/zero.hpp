// ZeRO stages 1 and 2 for the train loop: each rank keeps AdamW's moments for a 1/N slice of
// the trained parameters, sums the gradients only there (stage 2 keeps only those sums), steps it
// and hands it to the others.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "nn/module.hpp"
#include "optim/optimizer.hpp"
#include "optim/shard.hpp"

namespace xg::finetune {

// One step under ZeRO, in the world finetune::world() says (see TrainLoop):
//   sum_grads   gradients summed over the ranks, each rank its own slice (rank order); stage 2
//               keeps that slice's sum alone (slices()) and drops the full-size .grad tensors
//   bad_grad    a non-finite summed gradient on any rank, named, agreed by every rank
//   clip        clip_grad_norm_ over the slices, the norm bitwise one process's
//   step        optimizer.step() on the slice, then every rank's slice to every rank.
// The slices are an optim::Partition of `trainable` in its order; the optimizer (Adam or
// AdamW over exactly those parameters, in any order) is sharded to match at construction.
// NOTE: with --grad-accum the micro-batches still add into full-size .grad tensors, and stage 2
// drops them only once the last one's backward has summed them (DeepSpeed's stage 2 reduces
// after every micro-batch instead). Summing per micro-batch would add each rank's terms in
// another order than one process's accumulation, ((g0 + g1) + g2) ..., and so change the bits.
class ZeroShards {
 public:
  // stage: 1 or 2.
  ZeroShards(const nn::NamedTensors& trainable, optim::Optimizer& optimizer, const std::string& program, int stage);

  int stage() const { return stage_; }
  // Where stage 2's sums go (World::reduce_scatter_grads, begin_grad_sum); nullptr for stage 1.
  std::vector<Tensor>* slices() { return stage_ == 2 ? &slices_ : nullptr; }
  void sum_grads(const std::vector<Tensor>& params, int64_t bucket_bytes);
  // "" when every summed gradient is finite, else which one is not (the same on every rank).
  std::string bad_grad(const nn::NamedTensors& trainable, bool detect_anomaly) const;
  double clip(const std::vector<Tensor>& params, double max_norm) const;
  // The optimizer's step on this rank's slice, then every rank's slice to every rank (stage 2's
  // slices are dropped).
  void step(const std::vector<Tensor>& params);
  // Drops stage 2's slices (a step skipped).
  void drop_grads() { slices_.clear(); }
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
  // The bytes of gradients each rank holds now (its .grad tensors and stage 2's slices), on
  // every rank: at the step, all of them under stage 1, about 1/N under stage 2.
  std::vector<double> grad_bytes_per_rank(const std::vector<Tensor>& params) const;
  const optim::Partition& partition() const { return part_; }

 private:
  optim::Optimizer& opt_;
  int stage_;
  optim::Partition part_;
  std::vector<optim::Shard> mine_;  // this rank's slice of each trained parameter, trainable's order
  std::vector<std::size_t> trained_index_;  // the optimizer's parameter i is trainable[trained_index_[i]]
  std::vector<Tensor> slices_;      // stage 2: the summed gradient of each slice, trainable's order
  // Each moment's state-dict name -> (parameter index, buffer name), in the order of the names.
  std::map<std::string, std::pair<std::size_t, std::string>> moments() const;
};

}  // namespace xg::finetune

// ZeroShards: the partition of the trained parameters, the sharded optimizer and the
// collectives of a ZeRO stage 1 or 2 step (finetune/world.hpp), and the full state dict of a checkpoint.
#include "finetune/zero.hpp"

#include <cmath>
#include <unordered_map>

#include "autograd/detail/dispatch.hpp"
#include "autograd/error.hpp"
#include "finetune/world.hpp"
#include "optim/clip.hpp"

namespace xg::finetune {

namespace {

std::vector<int64_t> numels(const nn::NamedTensors& trainable) {
  std::vector<int64_t> out;
  for (const auto& [name, p] : trainable) out.push_back(p.numel());
  return out;
}

// Whether elements [s.begin, s.end) of g are all finite.
bool finite_slice(const Tensor& g, optim::Shard s) {
  return dispatch_float(g.dtype(), "ZeroShards", [&](auto tag) {
    using T = decltype(tag);
    const T* d = static_cast<const T*>(g.raw_data());
    for (int64_t i = s.begin; i < s.end; ++i)
      if (!std::isfinite(d[i])) return false;
    return true;
  });
}

}  // namespace

ZeroShards::ZeroShards(const nn::NamedTensors& trainable, optim::Optimizer& optimizer, const std::string& program,
                       int stage)
    : opt_(optimizer), stage_(stage), part_(numels(trainable), world().size()), mine_(part_.slices(world().rank())) {
  check(stage == 1 || stage == 2, program, ": ZeRO stage ", stage, " (1 or 2 are done)");
  // The optimizer's parameters, in its own order (its groups), are the trained ones.
  std::unordered_map<const Node*, std::size_t> where;
  for (std::size_t k = 0; k < trainable.size(); ++k) where[trainable[k].second.node()] = k;
  const std::vector<Tensor> params = optimizer.parameters();
  check(params.size() == trainable.size(), program, ": --zero ", stage,
        " needs an optimizer over every trained parameter (it holds ", params.size(), " of ", trainable.size(), ")");
  std::vector<optim::Shard> owned;
  for (const Tensor& p : params) {
    auto it = where.find(p.node());
    check(it != where.end(), program, ": --zero ", stage, ": the optimizer holds a parameter that is not trained");
    owned.push_back(mine_[it->second]);
    trained_index_.push_back(it->second);
  }
  optimizer.shard(std::move(owned));
}

void ZeroShards::sum_grads(const std::vector<Tensor>& params, int64_t bucket_bytes) {
  world().reduce_scatter_grads(params, part_, bucket_bytes, slices());
}

std::string ZeroShards::bad_grad(const nn::NamedTensors& trainable, bool detect_anomaly) const {
  std::string bad;
  for (std::size_t k = 0; k < trainable.size() && bad.empty(); ++k) {
    const Tensor g = stage_ == 2 ? slices_[k] : trainable[k].second.grad();
    if (g.defined() && !finite_slice(g, stage_ == 2 ? optim::Shard{0, g.numel()} : mine_[k]))
      bad = str_cat("the gradient of '", trainable[k].first, "' holds NaN or Inf",
                    detect_anomaly ? "" : " (--detect-anomaly names the op that made it)");
  }
  const int first = world().first_rank_with(!bad.empty());
  return first < 0 ? std::string() : world().broadcast(bad, first);
}

double ZeroShards::clip(const std::vector<Tensor>& params, double max_norm) const {
  const optim::SumOverRanks sum = [](std::vector<double>& x) { world().allreduce_sum(x); };
  if (stage_ == 2) return optim::clip_grad_norm_(params, mine_, slices_, sum, max_norm);
  return optim::clip_grad_norm_(params, mine_, sum, max_norm);
}

void ZeroShards::step(const std::vector<Tensor>& params) {
  if (stage_ == 2) {  // the slices in the optimizer's order
    std::vector<Tensor> mine;
    for (std::size_t k : trained_index_) mine.push_back(slices_[k]);
    opt_.set_grad_slices(std::move(mine));
  }
  opt_.step();
  if (stage_ == 2) {
    opt_.set_grad_slices({});
    slices_.clear();
  }
  world().allgather_params(params, part_);
}

std::map<std::string, std::pair<std::size_t, std::string>> ZeroShards::moments() const {
  std::map<std::string, std::pair<std::size_t, std::string>> out;
  const std::size_t n = opt_.parameters().size();
  for (std::size_t i = 0; i < n; ++i) {
    const optim::ParamState* st = opt_.state(i);  // stepped on every rank alike
    if (st == nullptr) continue;
    for (const auto& [name, buf] : st->buffers) out[str_cat("state.", i, ".", name)] = {i, name};
  }
  return out;
}

ZeroShards::StreamedState ZeroShards::streamed_state_dict() const {
  StreamedState out;
  out.eager = opt_.state_dict(false);
  const std::vector<Tensor> params = opt_.parameters();
  for (const auto& [key, where] : moments()) {
    const Tensor buf = opt_.state(where.first)->buffers.at(where.second);
    const Shape shape = params[where.first].shape();
    // Gathered straight from the optimizer's buffer, when the writer reaches it: rank 0 then
    // holds its slices and one whole moment, not every moment.
    out.later[key] = io::LazyTensor{buf.dtype(), shape, [buf, shape] { return world().gather_to_main(buf).reshape(shape); }};
  }
  return out;
}

void ZeroShards::serve_state_dict() const {
  for (const auto& [key, where] : moments()) world().gather_to_main(opt_.state(where.first)->buffers.at(where.second));
}

namespace {

// `mine` on this rank, every rank's in rank order on every rank.
std::vector<double> per_rank(double mine) {
  std::vector<double> bytes(static_cast<std::size_t>(world().size()), 0.0);
  bytes[static_cast<std::size_t>(world().rank())] = mine;
  world().allreduce_sum(bytes);
  return bytes;
}

double bytes_of(const Tensor& t) { return t.defined() ? static_cast<double>(t.numel() * itemsize(t.dtype())) : 0.0; }

}  // namespace

std::vector<double> ZeroShards::state_bytes_per_rank() const { return per_rank(static_cast<double>(opt_.state_bytes())); }

std::vector<double> ZeroShards::grad_bytes_per_rank(const std::vector<Tensor>& params) const {
  double mine = 0;
  for (const Tensor& p : params) mine += bytes_of(p.grad());
  for (const Tensor& s : slices_) mine += bytes_of(s);
  return per_rank(mine);
}

}  // namespace xg::finetune

// World's one-process collectives, and the installed world.
#include "finetune/world.hpp"

#include <cstdlib>

namespace xg::finetune {

namespace {
std::shared_ptr<const World>& installed() {
  static std::shared_ptr<const World> w = std::make_shared<World>();
  return w;
}
}  // namespace

void World::allreduce_grads(const std::vector<Tensor>&, int64_t) const {}
void World::reduce_scatter_grads(const std::vector<Tensor>& params, const optim::Partition&, int64_t,
                                 std::vector<Tensor>* slices) const {
  if (!slices) return;
  // One process owns every element: each slice is its whole gradient, flat (no copy).
  slices->assign(params.size(), Tensor());
  for (std::size_t k = 0; k < params.size(); ++k) {
    const Tensor g = params[k].grad();
    if (!g.defined()) continue;
    (*slices)[k] = g.reshape({g.numel()});
    Tensor(params[k]).zero_grad();
  }
}
std::unique_ptr<GradSum> World::begin_grad_sum(const std::vector<Tensor>&, const optim::Partition*, int64_t,
                                               std::vector<Tensor>*) const {
  return std::make_unique<GradSum>();
}
void World::allgather_params(const std::vector<Tensor>&, const optim::Partition&, int64_t) const {}
Tensor World::gather_to_main(const Tensor& piece) const { return piece.clone(); }
void World::allreduce_sum(std::vector<double>&) const {}
std::string World::broadcast(const std::string& text, int) const { return text; }
void World::abort(int exit_code) const { std::exit(exit_code); }
void World::await_abort(int exit_code) const { std::exit(exit_code); }

const World& world() { return *installed(); }

void set_world(std::shared_ptr<const World> w) { installed() = w ? std::move(w) : std::make_shared<World>(); }

}  // namespace xg::finetune

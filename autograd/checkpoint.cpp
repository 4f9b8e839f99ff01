// Activation checkpointing: one recorded node per checkpointed call, whose backward reruns
// the function with grad mode on and backpropagates through the recomputed graph.
#include "autograd/checkpoint.hpp"

#include <memory>
#include <optional>
#include <unordered_set>
#include <utility>

#include "autograd/autocast.hpp"
#include "autograd/graph.hpp"
#include "autograd/random.hpp"

namespace xg {

namespace {

// While alive, the default generator is in the state `replay` (the one the forward started
// from); afterwards it is back where it was, also when the recompute throws.
class ReplayGenerator {
 public:
  explicit ReplayGenerator(const Generator& replay) : saved_(default_generator()) { default_generator() = replay; }
  ~ReplayGenerator() { default_generator() = saved_; }
  ReplayGenerator(const ReplayGenerator&) = delete;
  ReplayGenerator& operator=(const ReplayGenerator&) = delete;

 private:
  Generator saved_;
};

// Throws when the recomputed graph of `roots` reaches a tensor that requires grad and is not
// one of `wanted` (the function's inputs and params): its gradient would be lost. Iterative,
// like the engine's walk.
void check_closed(const std::vector<Tensor>& roots, const std::vector<Tensor>& wanted) {
  std::unordered_set<Node*> stop, seen;
  for (const Tensor& t : wanted) stop.insert(t.node());
  std::vector<Node*> stack;
  for (const Tensor& t : roots)
    if (seen.insert(t.node()).second) stack.push_back(t.node());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (stop.count(n)) continue;
    check(!n->is_leaf() && !n->freed, "checkpoint: the function uses a tensor of shape ", shape_str(n->shape),
          " that requires grad but is neither one of its inputs nor one of its params (its gradient would be "
          "lost); pass it in params");
    for (const Tensor& in : n->inputs)
      if (in.defined() && in.requires_grad() && seen.insert(in.node()).second) stack.push_back(in.node());
  }
}

}  // namespace

// outputs = fn(inputs) without a graph   =>   d(inputs), d(params) = backward of fn rerun with
// grad on, seeded with the outputs' gradients.
// NOTE: a node has one output, so output `lead` (the first float one) carries the checkpoint
// node, whose inputs are inputs ++ params. Every other float output is a node whose only input
// is outputs[lead]: the engine runs it first (it comes later in topological order), and its
// closure only hands its gradient to lead's closure (through `pending`) and sends zeros to
// lead, so that lead's closure runs even when the loss uses only the other output.
// NOTE: the closure keeps fn, and so whatever fn captured (a block, a mask), until backward.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& params, bool preserve_rng_state) {
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), params.begin(), params.end());
  if (!needs_grad(all)) return fn(inputs);

  std::shared_ptr<const Generator> rng;
  if (preserve_rng_state) rng = std::make_shared<const Generator>(default_generator());
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  std::size_t lead = outs.size();
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].defined() || !is_floating(outs[k].dtype())) continue;
    outs[k] = outs[k].detach();  // a node of its own, also when fn returned an input or a param as it is
    if (lead == outs.size()) lead = k;
  }
  if (lead == outs.size()) return outs;

  auto pending = std::make_shared<std::vector<Tensor>>(outs.size());  // the other outputs' gradients
  const std::size_t n_inputs = inputs.size();
  const bool bf16 = autocast_enabled();  // the recompute runs its products as the forward did
  outs[lead] = record(
      outs[lead], all, "checkpoint",
      [fn, rng, pending, lead, n_inputs, bf16](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
        // Fresh leaves for the inputs that need a gradient (the originals' graph stays apart);
        // params are used as they are, so that the recomputed graph reaches them.
        std::vector<Tensor> rin(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n_inputs));
        std::vector<Tensor> wanted;
        std::vector<std::size_t> wanted_at;
        for (std::size_t i = 0; i < in.size(); ++i) {
          if (!in[i].defined() || !in[i].requires_grad()) continue;
          if (i < n_inputs) {
            rin[i] = in[i].detach();
            rin[i].requires_grad_(true);
          }
          wanted.push_back(i < n_inputs ? rin[i] : in[i]);
          wanted_at.push_back(i);
        }
        std::vector<Tensor> again;
        {
          EnableGradGuard grad_on;
          autocast same_precision(bf16);
          std::optional<ReplayGenerator> replay;
          if (rng) replay.emplace(*rng);
          again = fn(rin);
        }
        check(again.size() == pending->size(), "checkpoint: the recomputed function returned ", again.size(),
              " outputs, the forward returned ", pending->size(), " (fn must do the same on every call)");
        std::vector<Tensor> roots, seeds;
        for (std::size_t k = 0; k < again.size(); ++k) {
          Tensor gk = k == lead ? g : std::move((*pending)[k]);
          (*pending)[k] = Tensor();
          if (gk.defined() && again[k].defined() && again[k].requires_grad()) {
            roots.push_back(again[k]);
            seeds.push_back(gk);
          }
        }
        std::vector<Tensor> result(in.size());
        if (roots.empty() || wanted.empty()) return result;
        check_closed(roots, wanted);
        std::vector<Tensor> grads = grad(roots, wanted, seeds, /*retain_graph=*/false, /*allow_unused=*/true);
        for (std::size_t w = 0; w < wanted.size(); ++w) result[wanted_at[w]] = grads[w];
        return result;
      });

  for (std::size_t k = lead + 1; k < outs.size(); ++k) {
    if (!outs[k].defined() || !is_floating(outs[k].dtype())) continue;
    outs[k] = record(outs[k], {outs[lead]}, "checkpoint_output",
                     [pending, k](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
                       (*pending)[k] = g;
                       return std::vector<Tensor>{zeros(in[0].shape(), in[0].dtype())};
                     });
  }
  return outs;
}

}  // namespace xg

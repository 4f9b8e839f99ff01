// Parameter counts from the real modules: nn::FFN with the teaching Transformer's names (fc1,
// fc2, biases on) and nn::SwiGLU with its default d_ff rule.
#include "experiments/demos/swiglu.hpp"

#include "autograd/ops.hpp"
#include "nn/ffn.hpp"

namespace xg::experiments::demos {

void SwiGLUConfig::validate() const {
  check(!d_models.empty(), "swiglu: --d-models needs at least one value");
  for (int64_t d : d_models) check(d >= 1, "swiglu: --d-models must be positive, got ", d);
  check(multiple_of >= 1, "swiglu: --multiple-of must be positive, got ", multiple_of);
}

std::vector<FFNCount> run_swiglu(const SwiGLUConfig& c) {
  c.validate();
  NoGradGuard no_grad;
  std::vector<FFNCount> out;
  for (int64_t d : c.d_models) {
    FFNCount r{};
    r.d_model = d;
    {
      nn::FFN relu(d, 0, nn::Activation::ReLU, 0.0, true, nn::FFNNaming::FC);  // d_ff = 0: 4 d
      r.relu_d_ff = relu.d_ff();
      r.relu_params = relu.num_parameters();
      r.relu_weights = relu.up()->weight().numel() + relu.down()->weight().numel();
    }
    {
      nn::SwiGLU swiglu(d, nn::SwiGLU::default_d_ff(d, c.multiple_of));
      r.swiglu_d_ff = swiglu.d_ff();
      r.swiglu_params = swiglu.num_parameters();
    }
    // NOTE: the ReLU FFN is often counted as d*4d + 4d*d = 8 d^2 weights, but nn.Linear's
    // parameters include the biases (2,099,712 at d_model 512, not 2,097,152); we report both.
    r.ratio = static_cast<double>(r.swiglu_params) / static_cast<double>(r.relu_params);
    r.ratio_weights = static_cast<double>(r.swiglu_params) / static_cast<double>(r.relu_weights);
    out.push_back(r);
  }
  return out;
}

}  // namespace xg::experiments::demos

// FFN parameter counts: the original Transformer's ReLU FFN (fc1: d -> 4d, fc2: 4d -> d, with
// biases) against SwiGLU (Shazeer 2020: three bias-free d x d_ff matrices, d_ff = 8/3 d rounded
// up to 256, so the count stays close).
#pragma once

#include <cstdint>
#include <vector>

namespace xg::experiments::demos {

struct SwiGLUConfig {
  std::vector<int64_t> d_models = {64, 512, 1024};
  int64_t multiple_of = 256;
  void validate() const;
};

struct FFNCount {
  int64_t d_model;
  int64_t relu_d_ff, relu_params, relu_weights;  // num_parameters() of FFN(d, 4d) (with biases); weights alone
  int64_t swiglu_d_ff, swiglu_params;            // num_parameters() of SwiGLU(d) (no biases)
  double ratio, ratio_weights;                   // swiglu / relu (with, without the ReLU FFN's biases)
};

std::vector<FFNCount> run_swiglu(const SwiGLUConfig& c);

}  // namespace xg::experiments::demos

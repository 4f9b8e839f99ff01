// Choosing the next token from a row of logits: greedy, temperature, top-k and top-p
// (nucleus) filtering, as Hugging Face's generate() applies them (temperature, then top-k,
// then top-p, then a draw from the renormalised distribution).
#pragma once

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace xg::nn {

// The smallest temperature other than 0 (greedy). NOTE: below it logits / temperature leave
// float range (1e-320 turns every logit into +-Inf and the softmax into NaN); any temperature
// this small already puts all the mass on the maximum, so greedy is what such a user means.
constexpr double kMinTemperature = 1e-6;

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy (argmax), else >= kMinTemperature
  int64_t top_k = 0;         // 0 = no top-k filter
  double top_p = 1.0;        // 1 = no nucleus filter
};

// logits: [V] (any float dtype) -> the chosen token id. Logits holding NaN or Inf (a model
// with non-finite weights) are an error: no token can be drawn from them.
int64_t sample_token(const Tensor& logits, const SamplingOptions& opts, Generator& gen);

// The probabilities sample_token draws from (zeros where filtered), as float64 [V]. For tests.
Tensor sampling_probs(const Tensor& logits, const SamplingOptions& opts);

}  // namespace xg::nn

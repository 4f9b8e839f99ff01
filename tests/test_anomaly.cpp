// Tests for autograd/anomaly: DetectAnomalyGuard names the first op that made a NaN in
// forward or a non-finite gradient in backward, and the module it belongs to.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/anomaly.hpp"
#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/reduce.hpp"
#include "losses/losses.hpp"
#include "tests/lora_test_util.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;

TEST(Anomaly, ForwardNaNNamesTheOpAndTheNearestParameter) {
  Tensor w = tensor({1.0, -1.0}).requires_grad_();
  Tensor y = log(w);  // no guard: NaN passes silently, as in PyTorch
  EXPECT_TRUE(std::isnan(y.to_vector()[1]));
  DetectAnomalyGuard guard({{"proj.weight", w}});
  EXPECT_TRUE(is_anomaly_enabled());
  EXPECT_XG_ERROR(log(w * 2.0), "detect_anomaly: op 'log' produced NaN in its output of shape [2] from inputs without NaN "
                                "in module 'proj' (nearest parameter upstream: proj.weight)");
}

TEST(Anomaly, BackwardInfNamesTheOp) {
  Tensor x = zeros({3}).requires_grad_();
  {
    DetectAnomalyGuard guard;
    Tensor loss = sum(sqrt(x));  // forward is finite (0); d sqrt / dx at 0 is +Inf
    EXPECT_XG_ERROR(loss.backward(), "detect_anomaly: the backward of op 'sqrt' returned NaN or Inf in the gradient of its input 0");
  }
  EXPECT_FALSE(is_anomaly_enabled());
  Tensor x2 = zeros({3}).requires_grad_();
  sum(sqrt(x2)).backward();  // no guard: the Inf gradient is accumulated
  EXPECT_TRUE(std::isinf(x2.grad().to_vector()[0]));
}

TEST(Anomaly, CausalMaskInfinitiesAreNotAnomalies) {
  manual_seed(3);
  nn::DecoderLM model(test::tiny_llama());
  DetectAnomalyGuard guard(model.named_parameters());
  const Tensor ids = test::tiny_tokens(1);
  Tensor loss = losses::cross_entropy(model(ids).reshape({-1, 11}), ids.reshape({-1}));
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item()));
}

TEST(Anomaly, AnInfWeightIsTracedToItsModule) {
  manual_seed(3);
  nn::DecoderLM model(test::tiny_llama());
  int found = 0;
  for (auto& [name, p] : model.named_parameters())
    if (name == "layers.1.ffn.W_up.weight") {  // inf * mixed-sign inputs: inf - inf = NaN
      NoGradGuard ng;
      p.fill_(INFINITY);
      ++found;
    }
  ASSERT_EQ(found, 1);
  EXPECT_TRUE(std::isnan(model(test::tiny_tokens(1)).to_vector()[0]));  // unguarded: NaN logits
  DetectAnomalyGuard guard(model.named_parameters());
  EXPECT_XG_ERROR(model(test::tiny_tokens(1)),
                  "op 'linear' produced NaN in its output of shape [2,5,16] from inputs without NaN in module "
                  "'layers.1.ffn.W_up' (nearest parameter upstream: layers.1.ffn.W_up.weight)");
}

// At equal distance the trainable parameters are named (a frozen one does not change between
// steps), all of them, in their common module.
TEST(Anomaly, TiesNameTheTrainableParametersInTheirCommonModule) {
  Tensor frozen = tensor({1.0, 1.0}), a = tensor({2.0, 2.0}).requires_grad_(), b = tensor({2.0, 2.0}).requires_grad_();
  DetectAnomalyGuard guard({{"embed.weight", frozen}, {"block.ffn.a.weight", a}, {"block.ffn.b.weight", b}});
  // all three two ops up from log: (1 - 2) * (2 - 1) = -1
  EXPECT_XG_ERROR(log((frozen - a) * (b - frozen)),
                  "op 'log' produced NaN in its output of shape [2] from inputs without NaN in module 'block.ffn' "
                  "(nearest parameters upstream: block.ffn.a.weight, block.ffn.b.weight)");
}

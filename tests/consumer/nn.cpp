// xgrad::nn alone: a Linear's parameters by name and its forward.
#include <cstdio>

#include "nn/linear.hpp"

int main() {
  xg::nn::Linear fc(3, 2);
  const auto params = fc.named_parameters();
  const xg::Tensor y = fc(xg::ones({4, 3}));
  const bool ok = params.size() == 2 && params[0].first == "weight" && y.shape() == xg::Shape{4, 2};
  std::printf("consumer nn: Linear(3, 2) %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

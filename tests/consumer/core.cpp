// xgrad::core alone: a backward pass, checked.
#include <cstdio>

#include "autograd/ops.hpp"

int main() {
  xg::Tensor x = xg::tensor({1.0, 2.0, 3.0}).requires_grad_();
  xg::sum(x * x).backward();
  const std::vector<double> g = x.grad().to_vector();
  const bool ok = g == std::vector<double>{2, 4, 6};
  std::printf("consumer core: dy/dx = [%g, %g, %g] %s\n", g[0], g[1], g[2], ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

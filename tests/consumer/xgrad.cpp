// The whole installed package (xgrad::xgrad, `#include <xgrad.hpp>`): every layer's headers
// compile together and link, and one backward pass is checked. run.cmake also checks that
// libgomp read xgrad's default wait policy in this program. Each layer alone: <layer>.cpp.
#include <xgrad.hpp>

#include <cstdio>

int main() {
  xg::Tensor x = xg::tensor({1.0, 2.0, 3.0}).requires_grad_();
  xg::Tensor y = xg::sum(x * x);
  y.backward();
  const std::vector<double> g = x.grad().to_vector();
  const bool ok = g[0] == 2 && g[1] == 4 && g[2] == 6;
  std::printf("consumer: dy/dx = [%g, %g, %g] %s\n", g[0], g[1], g[2], ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

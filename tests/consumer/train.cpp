// xgrad::train alone: one AdamW step on a cross-entropy loss lowers it.
#include <cstdio>

#include "autograd/ops.hpp"
#include "losses/cross_entropy.hpp"
#include "optim/adam.hpp"

int main() {
  xg::Tensor w = xg::zeros({3, 4}).requires_grad_();
  const xg::Tensor x = xg::ones({2, 3}), y = xg::tensor({1, 2}, xg::kInt64);
  xg::optim::AdamW opt({w});
  auto loss = [&] { return xg::losses::cross_entropy(xg::matmul(x, w), y); };
  const double before = loss().item();
  opt.zero_grad();
  loss().backward();
  opt.step();
  const double after = loss().item();
  const bool ok = after < before;
  std::printf("consumer train: cross-entropy %g -> %g after one AdamW step %s\n", before, after, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

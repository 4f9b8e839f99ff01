// A user's training script: a two-layer MLP learns to tell apart the three arms of a
// 2-D spiral. Exits non-zero if the loss did not fall, so the test suite runs it too.
#include <cmath>
#include <cstdio>

#include "xgrad.hpp"

// 3 spiral arms of n points: x [3n, 2] float32, labels y [3n] int64 (cs231n's toy data).
static std::pair<xg::Tensor, xg::Tensor> make_spiral(int64_t n) {
  xg::Tensor noise = xg::randn({3 * n, 2});
  std::vector<double> x, y;
  for (int64_t arm = 0; arm < 3; ++arm) {
    for (int64_t i = 0; i < n; ++i) {
      const double r = static_cast<double>(i) / n;
      const double theta = 4.0 * arm + 4.0 * r + 0.2 * noise.data<float>()[2 * (arm * n + i)];
      x.push_back(r * std::sin(theta));
      x.push_back(r * std::cos(theta));
      y.push_back(static_cast<double>(arm));
    }
  }
  return {xg::from_vector(x, {3 * n, 2}), xg::from_vector(y, {3 * n}, xg::kInt64)};
}

int main() {
  xg::manual_seed(0);
  auto [x, y] = make_spiral(100);

  // model: 2 -> 64 -> 3, weights [out, in] like torch.nn.Linear
  xg::Tensor w1 = (xg::randn({64, 2}) * 0.5).requires_grad_();
  xg::Tensor b1 = xg::zeros({64}).requires_grad_();
  xg::Tensor w2 = (xg::randn({3, 64}) * 0.1).requires_grad_();
  xg::Tensor b2 = xg::zeros({3}).requires_grad_();
  std::vector<xg::Tensor> params = {w1, b1, w2, b2};
  const double lr = 0.5;

  double first = 0, last = 0;
  for (int step = 0; step <= 300; ++step) {
    xg::Tensor h = xg::relu(xg::linear(x, w1, b1));
    xg::Tensor logits = xg::linear(h, w2, b2);
    // cross-entropy: mean of -log p(label)
    xg::Tensor logp = xg::log_softmax(logits, -1);
    xg::Tensor loss = -xg::mean(xg::gather(logp, 1, y.unsqueeze(1)));

    for (xg::Tensor& p : params) p.zero_grad();
    loss.backward();
    {
      xg::NoGradGuard no_grad;  // plain SGD step
      for (xg::Tensor& p : params) {
        xg::Tensor p_data = p.detach();
        xg::add_(p_data, p.grad(), -lr);
      }
    }
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss fell from %.4f to %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
}

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

// A two-layer perceptron, written as a PyTorch user would write an nn.Module.
struct MLP : xg::nn::Module {
  MLP(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", std::make_shared<xg::nn::Linear>(in, hidden));
    fc2 = register_module("fc2", std::make_shared<xg::nn::Linear>(hidden, out));
  }
  xg::Tensor forward(const xg::Tensor& x) const { return (*fc2)(xg::relu((*fc1)(x))); }
  std::shared_ptr<xg::nn::Linear> fc1, fc2;
};

int main() {
  xg::manual_seed(0);
  auto [x, y] = make_spiral(100);

  MLP model(2, 64, 3);
  xg::optim::AdamWOptions opts;
  opts.lr = 1e-2;
  xg::optim::AdamW opt(model.parameters(), opts);

  double first = 0, last = 0;
  for (int step = 0; step <= 300; ++step) {
    xg::Tensor loss = xg::losses::cross_entropy(model.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();

    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 50 == 0) std::printf("step %3d  loss %.4f\n", step, last);
  }
  std::printf("loss fell from %.4f to %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
}

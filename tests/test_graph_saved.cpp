// Tests for what the graph keeps alive: an op's inputs are edges, and only the tensors its
// backward reads (record's Saves) keep their data until backward.
#include "autograd/graph.hpp"

#include "autograd/elementwise.hpp"
#include "autograd/matmul.hpp"
#include "autograd/random.hpp"
#include "autograd/reduce.hpp"
#include "tests/torch_fixture.hpp"

namespace graph_saved_tests {

using namespace xg;

constexpr std::size_t kBytes = 256 * 256 * sizeof(float);  // above the 128 KB buffers allocated_bytes() counts

TEST(GraphSaved, AFrozenProjectionLetsGoOfItsOutputWhenOnlyASumReadsIt) {
  manual_seed(1);
  Tensor x = randn({256, 256}).requires_grad_();
  const Tensor w = randn({256, 256});  // frozen: dx reads w, never y
  Tensor y = linear(x, w);
  Tensor z = y + scalar_tensor(1.0);  // add reads neither term
  const std::size_t held = allocated_bytes();
  y = Tensor();
  EXPECT_EQ(held - allocated_bytes(), kBytes);  // y's buffer went with its last handle
  z.sum().backward();
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = matmul(ones({256, 256}), w);
  }
  EXPECT_EQ(x.grad().to_vector(), expected.to_vector());
}

TEST(GraphSaved, AnInputTheBackwardReadsStaysUntilBackward) {
  manual_seed(2);
  Tensor x = randn({256, 256});  // needs no gradient, but dw = g^T x reads it
  const Tensor x_copy = x.detach().clone();
  Tensor w = randn({256, 256}).requires_grad_();
  Tensor loss = linear(x, w).sum();
  const std::size_t held = allocated_bytes();
  x = Tensor();
  EXPECT_EQ(held, allocated_bytes());
  loss.backward();
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = matmul(ones({256, 256}), x_copy);
  }
  EXPECT_EQ(w.grad().to_vector(), expected.to_vector());
}

TEST(GraphSaved, AnOutputItsBackwardReadsIsKeptAndThenReleased) {
  manual_seed(3);
  Tensor x = randn({256, 256}).requires_grad_();
  const Tensor x_copy = x.detach().clone();
  Tensor y = exp(x);  // dx = g * y: the op's own output is saved
  Tensor loss = (y * scalar_tensor(2.0)).sum();
  const std::size_t held = allocated_bytes();
  y = Tensor();
  EXPECT_EQ(held, allocated_bytes());
  loss.backward();
  const std::vector<double> got = x.grad().to_vector(), e = x_copy.to_vector();
  for (std::size_t i = 0; i < got.size(); i += 997) EXPECT_FLOAT_EQ(got[i], 2 * std::exp(static_cast<float>(e[i])));
  x.zero_grad();
  EXPECT_EQ(held - allocated_bytes(), kBytes);  // backward ran: the pin on y is gone
}

TEST(GraphSaved, ABackwardReadingDataItsOpDidNotSaveIsNamed) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor out = empty({2});
  out = record(out, {x}, "careless_op", saves_nothing(), [](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
    return std::vector<Tensor>{g * in[0]};  // reads x, which was not saved
  });
  try {
    out.sum().backward();
    FAIL() << "reading an unsaved input did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "backward of 'careless_op': the data of a float32 tensor of shape [2] is not held by this graph edge "
              "(the op's record call does not save it for backward)");
  }
}

TEST(GraphSaved, RetainedGraphKeepsWhatItSavedForASecondBackward) {
  Tensor x = tensor({0.5, -1.0}, kFloat64).requires_grad_();
  Tensor y = tanh(x);
  Tensor loss = y.sum();
  y = Tensor();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  const std::vector<double> g = x.grad().to_vector();
  EXPECT_DOUBLE_EQ(g[0], 2 * (1 - std::tanh(0.5) * std::tanh(0.5)));
  EXPECT_DOUBLE_EQ(g[1], 2 * (1 - std::tanh(-1.0) * std::tanh(-1.0)));
}

}  // namespace graph_saved_tests

// Tests for what the graph keeps alive: an op's inputs are edges, and only the tensors its
// backward reads (record's Saves) keep their data until backward.
#include "autograd/graph.hpp"

#include "autograd/elementwise.hpp"
#include "autograd/autocast.hpp"
#include "autograd/matmul.hpp"
#include "autograd/norm.hpp"
#include "autograd/random.hpp"
#include "autograd/reduce.hpp"
#include "autograd/swiglu.hpp"
#include "losses/cross_entropy.hpp"
#include "tests/torch_fixture.hpp"

namespace graph_saved_tests {

using namespace xg;

constexpr std::size_t kBytes = 256 * 256 * sizeof(float);  // above the 128 KB buffers allocated_bytes() counts

// The buffer cache may serve a 256 KB tensor from a cached buffer up to 5/4 its size, which
// allocated_bytes() counts at its own size; an earlier test in the same process (a sanitizer
// shard) leaves such buffers behind. The tests that count bytes start from an empty cache.
void start_from_an_empty_cache() { empty_cache(); }

TEST(GraphSaved, AFrozenProjectionLetsGoOfItsOutputWhenOnlyASumReadsIt) {
  start_from_an_empty_cache();
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
  start_from_an_empty_cache();
  manual_seed(2);
  Tensor x = randn({256, 256});  // needs no gradient, but dw = g^T x reads it
  const Tensor x_copy = x.detach().clone();
  Tensor w = randn({256, 256}).requires_grad_();
  Tensor loss = linear(x, w).sum();
  const std::size_t held = allocated_bytes();
  x = Tensor();
  EXPECT_EQ(held, allocated_bytes());
  loss.backward();
  // dw = g^T x with g all ones: each column's sum of x, in float64. Within float32 rounding,
  // not bitwise: backward's product reads g transposed, and a kernel may sum it in another
  // order (oneDNN's AVX2 kernels do); a released x would be far off.
  const std::vector<double> got = w.grad().to_vector(), xs = x_copy.to_vector();
  for (int64_t j = 0; j < 256; ++j) {
    double column = 0;
    for (int64_t i = 0; i < 256; ++i) column += xs[i * 256 + j];
    for (int64_t o = 0; o < 256; ++o) ASSERT_NEAR(got[o * 256 + j], column, 1e-4) << "dw[" << o << ", " << j << "]";
  }
}

TEST(GraphSaved, AnOutputItsBackwardReadsIsKeptAndThenReleased) {
  start_from_an_empty_cache();
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

// An op that tells whether its backward could take its saved input's buffer over.
Tensor probe(const Tensor& x, bool* reused) {
  Tensor out = empty(x.shape());
  return record(out, {x}, "probe", saves({0}), [reused](const Tensor& g, const Tensor&, const std::vector<Tensor>& in) {
    *reused = reuse_if_last_reader(in[0]).defined();
    return std::vector<Tensor>{g};
  });
}

TEST(GraphSaved, ABackwardTakesASavedBufferOverOnlyAsItsLastReader) {
  Tensor x = ones({4}).requires_grad_();
  bool reused = true;
  Tensor y = x * scalar_tensor(2.0);
  probe(y, &reused).sum().backward();  // the user still holds y
  EXPECT_FALSE(reused);
  Tensor loss = probe(x * scalar_tensor(2.0), &reused).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);  // a second backward will read it again
  EXPECT_FALSE(reused);
  loss.backward();
  EXPECT_TRUE(reused);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{6, 6, 6, 6}));
}

TEST(GraphSaved, CrossEntropyWritesItsGradientOverLogitsNothingElseHolds) {
  manual_seed(4);
  const Tensor x0 = randn({64, 1000}, kFloat64);
  const Tensor t = randint(0, 1000, {64});
  Tensor a = x0.clone().requires_grad_(), b = x0.clone().requires_grad_();
  const Tensor held = a * scalar_tensor(1.5, kFloat64);
  losses::cross_entropy(held, t).backward();  // logits held: a fresh gradient buffer
  Tensor loss = losses::cross_entropy(b * scalar_tensor(1.5, kFloat64), t);  // only the loss holds these logits
  loss.backward();  // so their buffer becomes their gradient
  EXPECT_EQ(a.grad().to_vector(), b.grad().to_vector());
  const std::vector<double> h = held.to_vector(), e = (x0 * scalar_tensor(1.5, kFloat64)).to_vector();
  EXPECT_EQ(h, e);  // the held logits were not written over
}

TEST(GraphSaved, UnderAutocastSwigluKeepsBf16CopiesOfItsInputs) {
  manual_seed(5);
  const Tensor x0 = randn({256, 256});
  auto run = [&](bool bf16, std::size_t* kept) {
    Tensor x = x0.clone().requires_grad_();
    autocast scope(bf16);
    start_from_an_empty_cache();
    const std::size_t before = allocated_bytes();
    Tensor y = swiglu(x * scalar_tensor(2.0), x * scalar_tensor(3.0));  // gate and up: held by the graph alone
    *kept = allocated_bytes() - before - kBytes;                          // beside y itself
    y.sum().backward();
    return x.grad().to_vector();
  };
  std::size_t kept32 = 0, kept16 = 0;
  run(false, &kept32);  // first calls: whatever a kernel keeps for later calls is made here
  run(true, &kept16);
  const std::vector<double> g32 = run(false, &kept32), g16 = run(true, &kept16);
  EXPECT_EQ(kept32, 2 * kBytes);  // gate and up in float32
  EXPECT_EQ(kept16, kBytes);      // their bf16 copies
  // d/dx silu(2x) 3x, from gate and up rounded to bf16: within a few bf16 ulps of float32's.
  for (std::size_t i = 0; i < g32.size(); ++i) EXPECT_NEAR(g16[i], g32[i], 2e-2 * (1 + std::abs(g32[i]))) << i;
}

// Bytes an op's graph keeps beside its own output: the buffers live after `make` returns
// (its inputs made inside are held by the graph alone), less the output's.
template <typename F>
std::size_t kept_beside_output(F make) {
  start_from_an_empty_cache();
  const std::size_t before = allocated_bytes();
  const Tensor y = make();
  return allocated_bytes() - before - kBytes;
}

TEST(GraphSaved, UnderAutocastRmsNormKeepsABf16CopyOfItsInput) {
  manual_seed(6);
  const Tensor x0 = randn({256, 256});
  Tensor w = randn({256}).requires_grad_();
  auto grads = [&](bool bf16, std::size_t* kept) {
    Tensor x = x0.clone().requires_grad_();
    autocast scope(bf16);
    Tensor y;
    *kept = kept_beside_output([&] { return y = rms_norm(x * scalar_tensor(2.0), w); });
    (y * y).sum().backward();
    std::vector<double> g = x.grad().to_vector(), gw = w.grad().to_vector();
    w.zero_grad();
    g.insert(g.end(), gw.begin(), gw.end());
    return g;
  };
  std::size_t kept32 = 0, kept16 = 0;
  grads(false, &kept32);  // first calls
  grads(true, &kept16);
  const std::vector<double> g32 = grads(false, &kept32), g16 = grads(true, &kept16);
  EXPECT_EQ(kept32, kBytes);      // the norm's float32 input
  EXPECT_EQ(kept16, kBytes / 2);  // its bf16 copy
  // xhat from the rounded input, rstd from the float32 one: within a few bf16 ulps.
  for (std::size_t i = 0; i < g32.size(); ++i) EXPECT_NEAR(g16[i], g32[i], 2e-2 * (1 + std::abs(g32[i]))) << i;
}

TEST(GraphSaved, UnderAutocastOpsReadingOneTensorShareItsBf16Copy) {
  manual_seed(7);
  const Tensor x0 = randn({256, 512});  // 512 KB: its bf16 copy is 256 KB
  Tensor x = x0.clone().requires_grad_();
  autocast scope(true);
  Tensor a, b;
  // Two SiLUs of one input (as an adapted q_proj and v_proj of one norm output): one copy.
  start_from_an_empty_cache();
  const std::size_t before = allocated_bytes();
  {
    const Tensor h = x * scalar_tensor(2.0);
    a = silu(h);
    b = silu(h);
  }
  EXPECT_EQ(allocated_bytes() - before, 2 * 2 * kBytes + kBytes);  // a, b and one bf16 copy of h
  (a + b).sum().backward();
  const Tensor expected = x.grad().clone();
  x.zero_grad();
  {
    const Tensor h = x * scalar_tensor(2.0);
    (silu(h) * scalar_tensor(2.0)).sum().backward();
  }
  EXPECT_EQ(x.grad().to_vector(), expected.to_vector());
}

}  // namespace graph_saved_tests

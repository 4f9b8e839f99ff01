// Tests for autograd/graph.cpp: the backward engine, grad mode, xg::grad, and its errors.
#include "autograd/graph.hpp"

#include <map>

#include "autograd/elementwise.hpp"
#include "autograd/grad_hook.hpp"
#include "autograd/shape.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;

TEST(Graph, AccumulatesAcrossBackwardCalls) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  backward({x * 3.0}, {ones({2})});
  backward({x * x}, {ones({2})});
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3 + 2, 3 + 4}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

TEST(Graph, DiamondSumsBothPaths) {
  // y = a*b + a*a: dy/da = b + 2a, dy/db = a
  Tensor a = tensor({3.0}, kFloat64).requires_grad_();
  Tensor b = tensor({5.0}, kFloat64).requires_grad_();
  Tensor y = a * b + a * a;
  y.backward();
  EXPECT_EQ(a.grad().item(), 5 + 6);
  EXPECT_EQ(b.grad().item(), 3);
}

TEST(Graph, BroadcastGradientReducedToInputShape) {
  Tensor a = ones({2, 3}).requires_grad_();
  Tensor b = ones({3}).requires_grad_();
  Tensor s = ones({1, 1}).requires_grad_();
  backward({(a + b) * s}, {full({2, 3}, 2.0)});
  EXPECT_EQ(b.grad().shape(), (Shape{3}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(s.grad().shape(), (Shape{1, 1}));
  EXPECT_EQ(s.grad().item(), 2 * 2 * 6);
}

TEST(Graph, LeafGradIsNotAliasedWithOtherLeaves) {
  Tensor a = tensor({1.0}).requires_grad_();
  Tensor b = tensor({1.0}).requires_grad_();
  (a + b).backward();  // both receive the same upstream tensor
  (a * 5.0).backward();
  EXPECT_EQ(a.grad().item(), 6);
  EXPECT_EQ(b.grad().item(), 1);
}

TEST(Graph, DeepChainOf10000OpsDoesNotOverflow) {
  Tensor x = tensor({1.0}, kFloat64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = y * 1.0001;
  y.backward();
  EXPECT_NEAR(x.grad().item(), std::pow(1.0001, 10000), 1e-9);
}

TEST(Graph, NoGradGuardRecordsNothingAndRestores) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    {
      EnableGradGuard on;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Graph, DetachCutsTheGraphAndSharesData) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor d = (x * 3.0).detach();
  EXPECT_FALSE(d.requires_grad());
  Tensor y = x * d;  // d is a constant 6
  y.backward();
  EXPECT_EQ(x.grad().item(), 6);
  Tensor e = x.detach();
  EXPECT_EQ(e.raw_data(), x.raw_data());
}

TEST(Graph, RetainGraphAllowsASecondBackward) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = x * x;
  y.backward(Tensor(), true);
  y.backward();
  EXPECT_EQ(x.grad().item(), 8);
}

TEST(Graph, SecondBackwardThroughFreedGraphIsAnError) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = exp(x * x);
  y.backward();
  EXPECT_XG_ERROR(y.backward(), "backward: trying to backward through the graph a second time (through 'exp'");
}

TEST(Graph, NonScalarBackwardNeedsAGradient) {
  Tensor x = ones({2, 3}).requires_grad_();
  EXPECT_XG_ERROR((x * 2.0).backward(),
                  "backward: grad can be implicitly created only for scalar outputs, got shape [2,3]");
  EXPECT_XG_ERROR((x * 2.0).backward(ones({3})), "backward: gradient shape [3] does not match output shape [2,3]");
  EXPECT_XG_ERROR(ones({1}).backward(), "does not require grad");
}

TEST(Graph, GradReturnsWithoutAccumulating) {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor w = tensor({3.0, 4.0}, kFloat64).requires_grad_();
  Tensor h = x * w;  // a non-leaf input can be asked for too
  Tensor y = h * h;
  std::vector<Tensor> g = grad({y}, {x, h}, {ones({2}, kFloat64)});
  EXPECT_EQ(g[0].to_vector(), (std::vector<double>{2 * 3 * 3 * 1, 2 * 4 * 4 * 2}));
  EXPECT_EQ(g[1].to_vector(), (std::vector<double>{2 * 3, 2 * 8}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
}

TEST(Graph, GradOfUnusedInputIsAnErrorUnlessAllowed) {
  Tensor x = tensor({1.0}).requires_grad_();
  Tensor z = tensor({1.0}).requires_grad_();
  EXPECT_XG_ERROR(grad({x * 2.0}, {z}), "grad: input 0 of shape [1] was not used in the graph");
  std::vector<Tensor> g = grad({x * 2.0}, {z}, {}, false, true);
  EXPECT_FALSE(g[0].defined());
}

TEST(Graph, RetainGradKeepsNonLeafGradient) {
  Tensor x = tensor({3.0}).requires_grad_();
  Tensor h = x * 2.0;
  h.retain_grad();
  (h * h).backward();
  EXPECT_EQ(h.grad().item(), 12);
  EXPECT_EQ(x.grad().item(), 24);
}

TEST(Graph, SavedTensorsAreReleasedAfterBackward) {
  Tensor x = ones({4}).requires_grad_();
  std::weak_ptr<Node> mid;
  Tensor y;
  {
    Tensor h = x * 2.0;
    mid = h.node_ptr();
    y = h * h;
  }
  EXPECT_FALSE(mid.expired());  // y's node holds h as an input
  y.backward(ones({4}));
  EXPECT_TRUE(mid.expired());  // released with the graph
  EXPECT_XG_ERROR(y.backward(ones({4})), "second time");
}

TEST(Graph, LeafGradNeverSharesStorageWithARetainedGrad) {
  // h's gradient reaches x through reshape's backward, a view of h.grad's storage.
  Tensor x = ones({4}).requires_grad_();
  Tensor h = reshape(x, {2, 2});
  h.retain_grad();
  Tensor y = h * 3.0;
  y.backward(ones({2, 2}), true);
  EXPECT_NE(x.grad().raw_data(), h.grad().raw_data());
  y.backward(ones({2, 2}));
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(4, 6.0));
  EXPECT_EQ(h.grad().to_vector(), std::vector<double>(4, 6.0));
}

TEST(Graph, UserGradientIsNeverModified) {
  Tensor x = ones({2}).requires_grad_();
  Tensor g = full({2}, 2.0);
  x.backward(g);  // the root is the leaf itself
  x.backward(g);
  EXPECT_EQ(g.to_vector(), (std::vector<double>{2, 2}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{4, 4}));
}

// Pending gradients of inner nodes add in place when nothing else holds them; these are the
// cases where something does.
TEST(Graph, PendingGradientSharedByTwoInputsStaysSeparate) {
  // add's backward hands the same gradient to both inputs, so s's and p's pending slots start
  // as one tensor; s's backward then adds into p's and q's. t = (2x + 3x) + 2x: dt/dx = 7.
  Tensor x = ones({3}).requires_grad_();
  Tensor p = x * 2.0, q = x * 3.0;
  Tensor s = p + q;
  Tensor t = s + p;
  t.backward(ones({3}));
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(3, 7.0));
}

TEST(Graph, UserGradientOfAnInnerOutputIsNeverModified) {
  // y is an output (its gradient the caller's gy) and an input of z: z's backward adds into
  // y's pending gradient, which must not be gy itself.
  Tensor x = ones({2}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor z = y * 3.0;
  const Tensor gy = full({2}, 1.0), gz = full({2}, 1.0);
  backward({z, y}, {gz, gy});
  EXPECT_EQ(gy.to_vector(), (std::vector<double>{1, 1}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{8, 8}));  // (1 + 3) * 2
}

TEST(Graph, LeafGradHookSeesEachLeafOnceWithItsWholeGradient) {
  // y = a*b + a*a (+ c, which does not need a's gradient): dy/da = b + 2a arrives in two parts,
  // and the hook must see the sum, once, and nothing after it.
  Tensor a = tensor({3.0}, kFloat64).requires_grad_();
  Tensor b = tensor({5.0}, kFloat64).requires_grad_();
  Tensor c = tensor({7.0}, kFloat64).requires_grad_();
  std::vector<std::pair<const Node*, double>> seen;
  {
    LeafGradHookGuard hook([&](const Tensor& leaf) { seen.emplace_back(leaf.node(), leaf.grad().item()); });
    (a * b + a * a + c).backward();
    EXPECT_EQ(grad({a * c}, {c})[0].item(), 3);  // xg::grad writes no .grad: no call
  }
  ASSERT_EQ(seen.size(), 3u);
  std::map<const Node*, double> by_leaf(seen.begin(), seen.end());
  EXPECT_EQ(by_leaf.size(), 3u);
  EXPECT_EQ(by_leaf[a.node()], 5 + 6);
  EXPECT_EQ(by_leaf[b.node()], 3);
  EXPECT_EQ(by_leaf[c.node()], 1);
  (a * 2.0).backward();  // the guard is gone
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(a.grad().item(), 5 + 6 + 2);
}

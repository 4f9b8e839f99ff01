// Tests for autograd/tensor.cpp: factories, access, dtype conversion, printing.
#include "autograd/tensor.hpp"

#include <sstream>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;

TEST(Tensor, Factories) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.to_vector(), std::vector<double>(6, 0.0));
  EXPECT_EQ(ones({2}, kFloat64).to_vector(), (std::vector<double>{1, 1}));
  EXPECT_EQ(full({3}, 2.5).to_vector(), (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_EQ(arange(4).to_vector(), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(arange(4).dtype(), kInt64);
  EXPECT_EQ(arange(1, 2, 0.25, kFloat64).to_vector(), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(empty({0, 4}).numel(), 0);
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
  EXPECT_EQ(scalar_tensor(3.0).item(), 3.0);
}

TEST(Tensor, NestedInitializerLists) {
  Tensor t = tensor({{1, 2, 3}, {4, 5, 6}}, kFloat64);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.data<double>()[4], 5.0);
  Tensor c = tensor({{{1, 2}}, {{3, 4}}});
  EXPECT_EQ(c.shape(), (Shape{2, 1, 2}));
  EXPECT_EQ(c.to_vector(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_XG_ERROR(tensor({{1, 2}, {3}}), "tensor: ragged nested list");
}

TEST(Tensor, SizeAndNegativeDims) {
  Tensor t = zeros({2, 3, 4});
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_XG_ERROR(t.size(3), "size: dim 3 out of range for a 3-d tensor of shape [2,3,4]");
}

TEST(Tensor, TypedDataChecksDtype) {
  Tensor t = zeros({2});
  EXPECT_NE(t.data<float>(), nullptr);
  EXPECT_XG_ERROR(t.data<double>(), "data<float64>: tensor is float32");
  EXPECT_XG_ERROR(zeros({2}).item(), "item: only a one-element tensor converts to a scalar, got shape [2]");
  EXPECT_XG_ERROR(Tensor().shape(), "undefined Tensor");
}

TEST(Tensor, ToDtypeIsDifferentiableBetweenFloats) {
  Tensor x = tensor({1.5, -2.25}).requires_grad_();
  Tensor y = x.to(kFloat64);
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_EQ(y.to_vector(), (std::vector<double>{1.5, -2.25}));
  backward({y * y}, {ones({2}, kFloat64)});
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3.0, -4.5}));
  EXPECT_EQ(tensor({2.7, -1.2}).to(kInt64).to_vector(), (std::vector<double>{2, -1}));  // truncates like torch
}

TEST(Tensor, CloneCopiesAndDetachShares) {
  Tensor x = tensor({1.0, 2.0});
  Tensor c = x.clone();
  EXPECT_NE(c.raw_data(), x.raw_data());
  c.data<float>()[0] = 9;
  EXPECT_EQ(x.to_vector()[0], 1.0);
  Tensor d = x.detach();
  d.data<float>()[0] = 7;
  EXPECT_EQ(x.to_vector()[0], 7.0);
}

TEST(Tensor, CopyAndFillInPlace) {
  Tensor x = zeros({2});
  void* before = x.raw_data();
  x.copy_(tensor({3.0, 4.0}));
  EXPECT_EQ(x.raw_data(), before);
  EXPECT_EQ(x.to_vector(), (std::vector<double>{3, 4}));
  x.fill_(1.5);
  EXPECT_EQ(x.to_vector(), (std::vector<double>{1.5, 1.5}));
  EXPECT_XG_ERROR(x.copy_(zeros({3})), "copy_: source shape [3] differs from destination shape [2]");
}

TEST(Tensor, RequiresGradOnlyOnFloatLeaves) {
  EXPECT_XG_ERROR(arange(3).requires_grad_(), "only float32/float64 tensors can require grad, got int64");
  Tensor x = ones({1}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_XG_ERROR(y.requires_grad_(false), "cannot turn off requires_grad of a non-leaf tensor (made by 'mul')");
}

TEST(Tensor, PrintsLikeTorch) {
  std::ostringstream a;
  a << tensor({{1, 2}, {3, 4}});
  EXPECT_EQ(a.str(), "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]])");
  std::ostringstream b;
  b << arange(3);
  EXPECT_EQ(b.str(), "tensor([0, 1, 2], dtype=int64)");
  std::ostringstream c;
  Tensor x = tensor({-1.5}, kFloat64).requires_grad_();
  c << x << " " << x * 2.0;
  EXPECT_EQ(c.str(), "tensor([-1.5000], dtype=float64, requires_grad=True) tensor([-3.0000], dtype=float64, grad_fn=<mul>)");
  std::ostringstream d;
  d << arange(10);
  EXPECT_EQ(d.str(), "tensor([0, 1, 2, ..., 7, 8, 9], dtype=int64)");
}

TEST(Tensor, LargeBuffersAreReusedAfterFree) {
  empty_cache();
  void* first;
  {
    Tensor big = empty({1 << 20});  // 4 MB
    first = big.raw_data();
  }
  EXPECT_GE(cached_bytes(), std::size_t{4} << 20);
  Tensor again = empty({1 << 20});
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(cached_bytes(), 0u);
  Tensor small = empty({16});  // small buffers go straight to malloc
  EXPECT_EQ(cached_bytes(), 0u);
}

// A training run with batches of varying length frees buffers of ever new sizes: the cache
// must not keep them all (it once held up to 1 GiB of buffers of exact sizes never asked for
// again).
TEST(Tensor, BufferCacheStaysBoundedUnderVaryingSizes) {
  empty_cache();
  for (int64_t i = 0; i < 200; ++i) {
    Tensor t = empty({(int64_t{1} << 18) + i * 3000});  // 1 MB .. 3.3 MB, each size once
    t.fill_(1.0);
  }
  EXPECT_LE(cached_bytes(), std::size_t{16} << 20);
  empty_cache();
  EXPECT_EQ(cached_bytes(), 0u);
}

TEST(Tensor, BufferCacheServesASizeClass) {
  empty_cache();
  void* first;
  {
    Tensor t = empty({1 << 20});  // 4 MB
    first = t.raw_data();
  }
  Tensor nearby = empty({(1 << 20) - 1000});  // a little less: the same 4 MB class
  EXPECT_EQ(nearby.raw_data(), first);
  EXPECT_EQ(cached_bytes(), 0u);
  EXPECT_GE(allocated_bytes(), std::size_t{4} << 20);
}

// A buffer takes at most a quarter more than it asks for, above 2 MB too (a 2.25 MB bf16
// activation once took a 4 MB buffer, whole huge pages).
TEST(Tensor, BufferSizeClassesAboveTwoMegabytesStayWithinAQuarter) {
  empty_cache();
  const std::size_t before = allocated_bytes();
  {
    const Tensor t = empty({4, 512, 576}, kBFloat16);  // 2.25 MB
    EXPECT_EQ(allocated_bytes() - before, std::size_t{2560} << 10);
  }
  const Tensor t = empty({1 << 20, 5});  // 20 MB: a multiple of 2 MB as it is
  EXPECT_EQ(allocated_bytes() - before, std::size_t{20} << 20);
  empty_cache();
}

// A step whose backward asks for other sizes than its forward evicts cached buffers to stay
// within the cache's bound. The evicted buffer's pages, already faulted in, become the new
// buffer's (its old values show through where fresh memory would read 0): without that a LoRA
// step of SmolLM2-135M's shape under --bf16 mapped and zero-filled 795 MB a step.
TEST(Tensor, ABufferMappedForAnEvictionTakesOverTheEvictedPages) {
  constexpr int64_t MB = 1 << 18;  // floats per MB
  empty_cache();
  {  // a larger request: the evicted 12 MB are the first 12 MB of the 32 MB buffer
    { Tensor a = empty({12 * MB}); a.fill_(7.0); }
    const Tensor b = empty({32 * MB});
    EXPECT_EQ(cached_bytes(), 0u);
    EXPECT_EQ(b.data<float>()[0], 7.0f);
    EXPECT_EQ(b.data<float>()[12 * MB - 1], 7.0f);
    EXPECT_EQ(b.data<float>()[12 * MB], 0.0f);  // the rest is fresh
  }
  empty_cache();
  {  // a smaller request: the evicted 32 MB buffer is cut to 12 MB
    void* first;
    {
      Tensor a = empty({32 * MB});
      a.fill_(5.0);
      first = a.raw_data();
    }
    const std::size_t before = allocated_bytes();
    const Tensor b = empty({12 * MB});
    EXPECT_EQ(b.raw_data(), first);
    EXPECT_EQ(b.data<float>()[12 * MB - 1], 5.0f);
    EXPECT_EQ(cached_bytes(), 0u);
    EXPECT_EQ(allocated_bytes() - before, std::size_t{12} << 20);
  }
  empty_cache();
}

// Batches of varying length ask for sizes a class apart from one step to the next: a cached
// buffer one class larger (at most 25% more) serves the request, so the cache does not map a
// fresh one (LoRA DPO of the README's model mapped 72 buffers a step, 30% of its time in page
// faults). Two classes larger it does not (50% more would be wasted).
TEST(Tensor, BufferCacheServesFromTheNextSizeClassUp) {
  empty_cache();
  constexpr int64_t KB = 1024 / 4;  // floats per KB
  void* first;
  { Tensor t = empty({1280 * KB}); first = t.raw_data(); }  // the 1.25 MB class
  const std::size_t live = allocated_bytes();
  Tensor smaller = empty({1024 * KB});                        // the 1 MB class, one below
  EXPECT_EQ(smaller.raw_data(), first);
  EXPECT_EQ(cached_bytes(), 0u);
  EXPECT_EQ(allocated_bytes(), live + (std::size_t{1280} << 10)) << "the buffer's own size is live";
  empty_cache();
  { Tensor t = empty({1536 * KB}); }  // the 1.5 MB class
  const std::size_t live2 = allocated_bytes();
  Tensor two_below = empty({1024 * KB});
  // Not served whole: a buffer of its own class, fresh, or the cached one cut to it when the
  // cache must evict for it (ABufferMappedForAnEvictionTakesOverTheEvictedPages): which one
  // depends on what else is live in the process, so only the size is asserted.
  EXPECT_EQ(allocated_bytes(), live2 + (std::size_t{1024} << 10)) << "a buffer of its own class";
  empty_cache();
}

// Live plus cached bytes stay within the most that was live at once plus a slack (a quarter of
// it, at most 8 MB): within the slack a buffer the cache cannot serve is mapped beside the
// cached ones (a cache of exactly the peak turned over every training step: 930 page faults a
// step of the tiny benchmark, 3 with the slack); beyond it, cached buffers are evicted.
TEST(Tensor, BufferCacheEvictsBeyondASlackOverThePeakLiveBytes) {
  empty_cache();
  const std::size_t before = allocated_bytes();
  ASSERT_LT(before, std::size_t{8} << 20) << "the arithmetic below assumes little else is live";
  constexpr std::size_t MB = std::size_t{1} << 20;
  { Tensor big = empty({4 << 20}); }  // 16 MB, then cached: the peak is before + 16 MB
  EXPECT_EQ(cached_bytes(), 16 * MB);
  Tensor a = empty({1 << 19});  // 2 MB of another class: 18 MB is within 16 MB + 4 MB, nothing evicted
  EXPECT_EQ(cached_bytes(), 16 * MB);
  Tensor b = empty({2 << 20});  // 8 MB more: 26 MB would pass the peak + at most 8 MB
  EXPECT_EQ(cached_bytes(), 0u);
  EXPECT_EQ(allocated_bytes(), before + 10 * MB);
  EXPECT_LE(allocated_bytes() + cached_bytes(), before + 16 * MB + 8 * MB);
  empty_cache();
}

// The bound follows the working set of the recent steps, not the largest one ever: a batch
// longer than the rest (or an evaluation pass) once left its buffers cached for the whole
// run (LoRA SFT of the README's model: 113 MB cached at step 10, 128 MB from step 60 to
// the end). They stay through many steps' worth of allocation (16 times the bound per
// window, two windows), then go.
TEST(Tensor, BufferCacheShrinksAfterALargerWorkingSetPasses) {
  empty_cache();
  constexpr std::size_t MB = std::size_t{1} << 20;
  ASSERT_LT(allocated_bytes(), 8 * MB) << "the arithmetic below assumes little else is live";
  { Tensor big = empty({16 << 20}); }  // 64 MB, then cached: the bound is about 64 MB
  ASSERT_EQ(cached_bytes(), 64 * MB);
  auto step = [] { Tensor t = empty({1 << 20}); };  // a step of 4 MB
  for (int i = 0; i < 100; ++i) step();  // 400 MB allocated: within the first window
  EXPECT_GE(cached_bytes(), 64 * MB) << "evicted after fewer than 16x its bytes of allocation";
  int steps = 100;
  while (cached_bytes() > 8 * MB && steps < 2000) {
    step();
    ++steps;
  }
  EXPECT_LE(cached_bytes(), 8 * MB) << "still cached after " << steps << " steps of 4 MB";
  EXPECT_GE(steps, 400) << "the window should span 16x the bound (1 GB), twice";
  empty_cache();
}

// --- libtorch's names -----------------------------------------------------------------

TEST(Tensor, SizesIsShape) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_EQ(x.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(&x.sizes(), &x.shape());
}

// Integer lists reach an int64 tensor exactly: 2^53 + 1 is not a double.
TEST(Tensor, IntegerListsAreExact) {
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor t = tensor({int64_t{0}, big, int64_t{-3}}, kInt64);
  ASSERT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.shape(), (Shape{3}));
  EXPECT_EQ(t.data<int64_t>()[1], big);
  EXPECT_EQ(t.data<int64_t>()[2], -3);
  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}}, kInt64);
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<int64_t>(m.data<int64_t>(), m.data<int64_t>() + 6), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  // Without a dtype an integer list is float32, as before (NOTE in tensor.hpp).
  EXPECT_EQ(tensor({1, 2, 3}).dtype(), kFloat32);
  EXPECT_EQ(tensor({1, 2, 3}).to_vector(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(tensor({1, 2}, kFloat64).dtype(), kFloat64);
  EXPECT_XG_ERROR(tensor({{1, 2}, {3}}, kInt64), "tensor: ragged nested list (rows of 2 and 1 values)");
}

TEST(Tensor, FromBlobCopies) {
  std::vector<int64_t> labels{2, 0, 1, 1};
  Tensor y = from_blob(labels.data(), {2, 2}, kInt64);
  labels[0] = 9;  // a copy: the tensor keeps its values
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<double>{2, 0, 1, 1}));
  const float xs[] = {0.5f, -1.5f};
  EXPECT_EQ(from_blob(xs, {2}, kFloat32).to_vector(), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(from_blob(nullptr, {0, 3}, kFloat32).numel(), 0);
  EXPECT_XG_ERROR(from_blob(nullptr, {2}, kFloat32), "from_blob: null data for shape [2]");
}

// In-place ops on a const handle write the shared data, as in libtorch.
TEST(Tensor, InPlaceOpsOnAConstHandle) {
  const Tensor p = tensor({1.0, 2.0, 3.0}, kFloat64);
  const Tensor alias = p;
  p.add_(tensor({1.0, 1.0, 1.0}, kFloat64), 2.0);
  EXPECT_EQ(alias.to_vector(), (std::vector<double>{3, 4, 5}));
  p.mul_(0.5).add_(tensor({1.0}, kFloat64));  // chained; the source broadcasts
  EXPECT_EQ(alias.to_vector(), (std::vector<double>{2.5, 3, 3.5}));
  p.zero_();
  EXPECT_EQ(alias.to_vector(), (std::vector<double>{0, 0, 0}));
  p.fill_(7).copy_(tensor({4.0, 5.0, 6.0}, kFloat64));
  EXPECT_EQ(alias.to_vector(), (std::vector<double>{4, 5, 6}));
  EXPECT_XG_ERROR(p.add_(zeros({2}, kFloat64)), "add_: shapes [2] and [3] cannot be broadcast");
  std::vector<Tensor> params{zeros({2}), ones({3})};
  for (const Tensor& q : params) q.fill_(2.0);
  EXPECT_EQ(params[1].to_vector(), (std::vector<double>{2, 2, 2}));
}

// Each member is the free function: the same op in the graph, the same values, and a
// gradient check in float64 for the differentiable ones.
TEST(Tensor, MethodsForwardToTheFreeFunctions) {
  const Tensor x = test::randn64({3, 4}, 21);
  const Tensor pos = (xg::abs(x) + 0.5).detach().requires_grad_();
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> member, free;
    bool positive;
  };
  const std::vector<Case> cases = {
      {"relu", [](const Tensor& t) { return t.relu(); }, [](const Tensor& t) { return relu(t); }, false},
      {"tanh", [](const Tensor& t) { return t.tanh(); }, [](const Tensor& t) { return xg::tanh(t); }, false},
      {"sigmoid", [](const Tensor& t) { return t.sigmoid(); }, [](const Tensor& t) { return sigmoid(t); }, false},
      {"exp", [](const Tensor& t) { return t.exp(); }, [](const Tensor& t) { return xg::exp(t); }, false},
      {"log", [](const Tensor& t) { return t.log(); }, [](const Tensor& t) { return xg::log(t); }, true},
      {"sqrt", [](const Tensor& t) { return t.sqrt(); }, [](const Tensor& t) { return xg::sqrt(t); }, true},
      {"abs", [](const Tensor& t) { return t.abs(); }, [](const Tensor& t) { return xg::abs(t); }, true},
      {"neg", [](const Tensor& t) { return t.neg(); }, [](const Tensor& t) { return neg(t); }, false},
      {"sum(-1)", [](const Tensor& t) { return t.sum(-1); }, [](const Tensor& t) { return sum(t, {1}); }, false},
      {"sum(0, keepdim)", [](const Tensor& t) { return t.sum(0, true); }, [](const Tensor& t) { return sum(t, {0}, true); }, false},
      {"mean(-2)", [](const Tensor& t) { return t.mean(-2); }, [](const Tensor& t) { return mean(t, {0}); }, false},
      {"softmax(-1)", [](const Tensor& t) { return t.softmax(-1); }, [](const Tensor& t) { return softmax(t, 1); }, false},
      {"slice", [](const Tensor& t) { return t.slice(1, 1, 3); }, [](const Tensor& t) { return slice(t, 1, 1, 3); }, false},
      {"narrow", [](const Tensor& t) { return t.narrow(-1, 2, 2); }, [](const Tensor& t) { return narrow(t, 1, 2, 2); }, false},
      {"view", [](const Tensor& t) { return t.view({4, 3}); }, [](const Tensor& t) { return view(t, {4, 3}); }, false},
      {"transpose", [](const Tensor& t) { return t.transpose(0, 1); }, [](const Tensor& t) { return transpose(t, 0, 1); }, false},
      {"matmul", [](const Tensor& t) { return t.matmul(t.t()); }, [](const Tensor& t) { return matmul(t, transpose(t, 0, 1)); }, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor in = c.positive ? pos : x;
    const Tensor a = c.member(in), b = c.free(in);
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.to_vector(), b.to_vector());
    EXPECT_STREQ(a.op_name(), b.op_name());
    const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& v) { return c.member(v[0]); }, {in});
    EXPECT_TRUE(r.ok) << r.message;
  }
  const Tensor logits = tensor({{0.1, 2.0, -1.0}, {3.0, 0.0, 3.0}}, kFloat64);
  EXPECT_EQ(logits.argmax(-1).to_vector(), (std::vector<double>{1, 0}));  // first maximum
  EXPECT_EQ(logits.argmax(1).dtype(), kInt64);
  EXPECT_EQ(logits.argmin(0, true).shape(), (Shape{1, 3}));
  EXPECT_XG_ERROR(x.sum(2), "sum");
}

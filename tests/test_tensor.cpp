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

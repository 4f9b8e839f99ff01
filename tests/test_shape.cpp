// Tests for autograd/shape.cpp: PyTorch values, float64 gradient checks, the no-copy
// guarantee of views, the strided-copy kernel's paths on large inputs, errors.
#include "autograd/shape.hpp"

#include <algorithm>
#include <cmath>

#include "tests/torch_fixture.hpp"

using namespace xg;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

void torch_case(const std::string& name, const test::Fn& fn) {
  SCOPED_TRACE(name);
  expect_matches_torch("shape", name, fn);
}

// Pieces joined back in reverse order (how the fixture checks split/chunk).
Tensor rcat(std::vector<Tensor> pieces, int64_t dim) {
  std::reverse(pieces.begin(), pieces.end());
  return cat(pieces, dim);
}

// Reference permute by index arithmetic: out[i] = x[i permuted back].
std::vector<double> naive_permute(const Tensor& x, const std::vector<int64_t>& perm) {
  const Shape& s = x.shape();
  const std::size_t n = s.size();
  Shape out_shape(n), in_strides(n);
  int64_t acc = 1;
  for (std::size_t d = n; d-- > 0;) {
    in_strides[d] = acc;
    acc *= s[d];
  }
  for (std::size_t i = 0; i < n; ++i) out_shape[i] = s[perm[i]];
  std::vector<double> xv = x.to_vector(), out(xv.size());
  for (std::size_t flat = 0; flat < out.size(); ++flat) {
    std::size_t rem = flat;
    int64_t src = 0;
    for (std::size_t i = n; i-- > 0;) {
      src += static_cast<int64_t>(rem % out_shape[i]) * in_strides[perm[i]];
      rem /= out_shape[i];
    }
    out[flat] = xv[src];
  }
  return out;
}

// 0, 1, 2, ... in the given shape and dtype.
Tensor iota(const Shape& s, Dtype dtype = kFloat32) { return reshape(arange(0, shape_numel(s), 1, dtype), s); }

}  // namespace

// ---------------------------------------------------------------------------------------
// values and gradients against PyTorch

TEST(ShapeTorch, Views) {
  torch_case("view", [](const V& x) { return view(x[0], {2, 3, 2}); });
  torch_case("view_infer", [](const V& x) { return view(x[0], {-1, 6}); });
  torch_case("reshape_infer_mid", [](const V& x) { return reshape(x[0], {2, -1, 4}); });
  torch_case("flatten_all", [](const V& x) { return flatten(x[0]); });
  torch_case("flatten_mid", [](const V& x) { return flatten(x[0], 1, 2); });
  torch_case("flatten_neg", [](const V& x) { return flatten(x[0], -3, -2); });
  torch_case("squeeze_all", [](const V& x) { return squeeze(x[0]); });
  torch_case("squeeze_0", [](const V& x) { return squeeze(x[0], 0); });
  torch_case("squeeze_neg2", [](const V& x) { return squeeze(x[0], -2); });
  torch_case("squeeze_noop", [](const V& x) { return squeeze(x[0], 1); });
  torch_case("unsqueeze_0", [](const V& x) { return unsqueeze(x[0], 0); });
  torch_case("unsqueeze_1", [](const V& x) { return unsqueeze(x[0], 1); });
  torch_case("unsqueeze_neg1", [](const V& x) { return unsqueeze(x[0], -1); });
  torch_case("unsqueeze_neg3", [](const V& x) { return unsqueeze(x[0], -3); });
}

TEST(ShapeTorch, TransposePermute) {
  torch_case("transpose_01", [](const V& x) { return transpose(x[0], 0, 1); });
  torch_case("transpose_last2", [](const V& x) { return transpose(x[0], -2, -1); });
  torch_case("transpose_heads", [](const V& x) { return transpose(x[0], 1, 2); });
  torch_case("transpose_tiles", [](const V& x) { return transpose(x[0], -1, -2); });
  torch_case("transpose_outer_inner", [](const V& x) { return transpose(x[0], 0, 2); });
  torch_case("permute_201", [](const V& x) { return permute(x[0], {2, 0, 1}); });
  torch_case("permute_neg", [](const V& x) { return permute(x[0], {-1, 0, -2, 1}); });
}

TEST(ShapeTorch, ExpandRepeat) {
  torch_case("expand_middle", [](const V& x) { return expand(x[0], {2, 3, 5, 4}); });
  torch_case("expand_leading", [](const V& x) { return expand(x[0], {2, -1, 4}); });
  torch_case("expand_scalar", [](const V& x) { return expand(x[0], {3, 2}); });
  torch_case("expand_as", [](const V& x) { return expand_as(x[0], x[1]); });
  torch_case("repeat_2d", [](const V& x) { return repeat(x[0], {2, 3}); });
  torch_case("repeat_lead", [](const V& x) { return repeat(x[0], {2, 1, 2}); });
  torch_case("repeat_3d", [](const V& x) { return repeat(x[0], {1, 3, 1, 2}); });
}

TEST(ShapeTorch, CatStack) {
  torch_case("cat_0", [](const V& x) { return cat({x[0], x[1]}, 0); });
  torch_case("cat_1", [](const V& x) { return cat({x[0], x[1], x[2]}, 1); });
  torch_case("cat_neg1", [](const V& x) { return cat({x[0], x[1]}, -1); });
  torch_case("cat_repeated", [](const V& x) { return cat({x[0], x[1], x[0]}, 1); });
  torch_case("stack_0", [](const V& x) { return stack({x[0], x[1]}, 0); });
  torch_case("stack_1", [](const V& x) { return stack({x[0], x[1], x[2]}, 1); });
  torch_case("stack_neg1", [](const V& x) { return stack({x[0], x[1]}, -1); });
}

TEST(ShapeTorch, Pieces) {
  torch_case("split_size", [](const V& x) { return rcat(split(x[0], 3, 0), 0); });
  torch_case("split_size_neg", [](const V& x) { return rcat(split(x[0], 2, -1), -1); });
  torch_case("split_sizes", [](const V& x) { return rcat(split(x[0], std::vector<int64_t>{2, 8}, 0), 0); });
  torch_case("split_sizes_1", [](const V& x) { return rcat(split(x[0], std::vector<int64_t>{1, 0, 3}, 1), 1); });
  torch_case("chunk_1", [](const V& x) { return rcat(chunk(x[0], 2, 1), 1); });
  torch_case("chunk_fewer", [](const V& x) { return rcat(chunk(x[0], 4, 0), 0); });
  torch_case("chunk_neg", [](const V& x) { return rcat(chunk(x[0], 3, -2), -2); });
  torch_case("split_one_piece", [](const V& x) { return split(x[0], 2, 1)[1]; });
  torch_case("narrow", [](const V& x) { return narrow(x[0], 1, 1, 2); });
  torch_case("narrow_neg", [](const V& x) { return narrow(x[0], -1, -3, 2); });
  torch_case("slice_step", [](const V& x) { return slice(x[0], 1, -10, 10, 3); });
  torch_case("slice_open", [](const V& x) { return slice(x[0], 0, 1, INT64_MAX, 2); });
  torch_case("slice_neg", [](const V& x) { return slice(x[0], -1, -3, -1); });
  torch_case("slice_mid", [](const V& x) { return slice(x[0], 1, 1, 4); });
  torch_case("slice_empty", [](const V& x) { return slice(x[0], 1, 3, 1); });
}

TEST(ShapeTorch, Triangles) {
  const std::vector<std::pair<int64_t, std::string>> diags = {{0, "0"}, {1, "p1"}, {2, "p2"}, {-1, "m1"}, {-2, "m2"}};
  for (const auto& [d, tag] : diags) {
    torch_case("tril_" + tag, [d = d](const V& x) { return tril(x[0], d); });
    torch_case("triu_" + tag, [d = d](const V& x) { return triu(x[0], d); });
  }
  torch_case("tril_wide", [](const V& x) { return tril(x[0], 10); });
  torch_case("triu_wide", [](const V& x) { return triu(x[0], -10); });
}

// Multi-head attention's head split and merge (view + transpose, transpose + contiguous +
// view), written as the usual PyTorch code reads.
TEST(ShapeTorch, MultiHeadAttentionExample) {
  torch_case("mha_split_heads", [](const V& x) { return transpose(view(x[0], {2, 10, 8, 8}), 1, 2); });
  torch_case("mha_merge_heads", [](const V& x) { return view(transpose(x[0], 1, 2).contiguous(), {2, 10, 64}); });
  torch_case("mha_example", [](const V& x) {
    const int64_t B = x[0].size(0), S = x[0].size(1), D = x[0].size(2), H = 8, hd = D / H;
    Tensor q = transpose(view(x[0], {B, S, H, hd}), 1, 2);
    Tensor k = transpose(view(x[1], {B, S, H, hd}), 1, 2);
    Tensor v = transpose(view(x[2], {B, S, H, hd}), 1, 2);
    Tensor scores = matmul(q, transpose(k, -2, -1)) / std::sqrt(static_cast<double>(hd));
    Tensor weights = softmax(scores, -1);
    Tensor context = matmul(weights, v);
    return view(transpose(context, 1, 2).contiguous(), {B, S, D});
  });
}

// ---------------------------------------------------------------------------------------
// float64 gradient checks (random upstream gradient)

TEST(ShapeGradcheck, Views) {
  const Tensor x = randn64({2, 3, 4}, 1);
  EXPECT_GRADCHECK([](const V& v) { return reshape(v[0], {4, -1}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return view(v[0], {3, 8}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return flatten(v[0], -2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return unsqueeze(v[0], -2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return squeeze(v[0]); }, {randn64({1, 3, 1}, 2)});
  EXPECT_GRADCHECK([](const V& v) { return squeeze(v[0], 2); }, {randn64({1, 3, 1}, 3)});
}

TEST(ShapeGradcheck, Layout) {
  const Tensor x = randn64({2, 3, 4, 5}, 4);
  EXPECT_GRADCHECK([](const V& v) { return transpose(v[0], 1, 2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return transpose(v[0], -1, -2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return permute(v[0], {3, 1, 0, 2}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return permute(v[0], {-1, -2, -3, -4}); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return expand(v[0], {2, 3, -1, 4}); }, {randn64({3, 1, 1}, 5)});
  EXPECT_GRADCHECK([](const V& v) { return expand(v[0], {4, 3}); }, {randn64({3}, 6)});
  EXPECT_GRADCHECK([](const V& v) { return repeat(v[0], {2, 1, 3}); }, {randn64({2, 2}, 7)});
  EXPECT_GRADCHECK([](const V& v) { return repeat(v[0], {3, 2}); }, {randn64({2, 3}, 8)});
}

TEST(ShapeGradcheck, CatStack) {
  const Tensor a = randn64({2, 3, 2}, 9), b = randn64({2, 1, 2}, 10), c = randn64({2, 3, 2}, 11);
  EXPECT_GRADCHECK([](const V& v) { return cat({v[0], v[1], v[2]}, 1); }, {a, b, c});
  EXPECT_GRADCHECK([](const V& v) { return cat({v[0], v[1], v[0]}, -2); }, {a, b});  // repeated input
  EXPECT_GRADCHECK([](const V& v) { return cat({v[0], v[1]}, 0); }, {a, c});
  EXPECT_GRADCHECK([](const V& v) { return stack({v[0], v[1]}, 2); }, {a, c});
  EXPECT_GRADCHECK([](const V& v) { return stack({v[0], v[1], v[0]}, -1); }, {a, c});
  // Only some inputs require grad.
  Tensor fixed = randn64({2, 3, 2}, 12).detach();
  EXPECT_GRADCHECK([fixed](const V& v) { return cat({fixed, v[0]}, 2); }, {a});
}

TEST(ShapeGradcheck, Pieces) {
  const Tensor x = randn64({4, 7, 3}, 13);
  EXPECT_GRADCHECK([](const V& v) { return rcat(split(v[0], 3, 1), 1); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return rcat(split(v[0], std::vector<int64_t>{1, 3}, 0), 0); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return rcat(chunk(v[0], 3, -1), -1); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return split(v[0], 2, 1)[2]; }, {x});  // one piece: zeros elsewhere
  EXPECT_GRADCHECK([](const V& v) { return narrow(v[0], -2, 2, 4); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return slice(v[0], 1, -6, 100, 2); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return slice(v[0], 2, 1, 3); }, {x});
  EXPECT_GRADCHECK([](const V& v) { return tril(v[0], 1); }, {randn64({2, 3, 4, 5}, 14)});
  EXPECT_GRADCHECK([](const V& v) { return triu(v[0], -1); }, {randn64({2, 3, 4, 5}, 15)});
}

// ---------------------------------------------------------------------------------------
// behaviour

TEST(Shape, ViewsShareStorage) {
  Tensor x = randn64({2, 3, 4}, 20);
  for (const Tensor& y : {reshape(x, {6, 4}), view(x, {-1}), flatten(x, 1), unsqueeze(x, 1), squeeze(x),
                          squeeze(unsqueeze(x, 0), 0)}) {
    EXPECT_EQ(y.raw_data(), x.raw_data()) << shape_str(y.shape());
    EXPECT_EQ(y.numel(), x.numel());
  }
  EXPECT_EQ(view(x, {4, 6}).shape(), (Shape{4, 6}));
  EXPECT_EQ(squeeze(unsqueeze(x, 3), -1).shape(), (Shape{2, 3, 4}));
  // A write through the view is seen by the original (PyTorch view semantics).
  Tensor y = view(x, {24});
  y.fill_(2.0);
  EXPECT_EQ(x.to_vector(), std::vector<double>(24, 2.0));
}

TEST(Shape, ZeroDimTensors) {
  Tensor s = scalar_tensor(3.0);
  EXPECT_EQ(flatten(s).shape(), (Shape{1}));
  EXPECT_EQ(unsqueeze(s, -1).shape(), (Shape{1}));
  EXPECT_EQ(squeeze(s, 0).shape(), Shape{});
  EXPECT_EQ(reshape(s, {1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(expand(s, {2, 3}).to_vector(), std::vector<double>(6, 3.0));
  EXPECT_EQ(repeat(s, {2}).to_vector(), (std::vector<double>{3.0, 3.0}));
}

TEST(Shape, ExamplesOfEachOp) {
  // transpose / permute shapes
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(transpose(x, 0, 1).shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(permute(x, {2, 0, 1}).shape(), (Shape{4, 2, 3}));
  // contiguous().view(-1) of a transpose
  Tensor xt = transpose(view(iota({12}, kInt64), {3, 4}), -2, -1);
  EXPECT_EQ(view(xt.contiguous(), {-1}).to_vector(),
            (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // squeeze / unsqueeze
  EXPECT_EQ(squeeze(ones({1, 3, 1, 4})).shape(), (Shape{3, 4}));
  EXPECT_EQ(squeeze(ones({1, 3, 1, 4}), 0).shape(), (Shape{3, 1, 4}));
  // expand and repeat
  EXPECT_EQ(expand(ones({1, 3, 1, 4}), {2, 3, 5, 4}).shape(), (Shape{2, 3, 5, 4}));
  EXPECT_EQ(repeat(tensor({{1, 2}}), {2, 3}).to_vector(),
            (std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}));
  // cat / stack of int64 tensors
  Tensor a = view(arange(6), {2, 3}), b = view(arange(6, 12), {2, 3});
  EXPECT_EQ(cat({a, b}, 1).to_vector(), (std::vector<double>{0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11}));
  EXPECT_EQ(cat({a, b}, 0).shape(), (Shape{4, 3}));
  EXPECT_EQ(stack({a, b}, 0).to_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(cat({a, b}).dtype(), kInt64);
  // split / chunk
  std::vector<Tensor> parts = split(arange(10), 3);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[3].to_vector(), (std::vector<double>{9}));
  parts = split(arange(10), std::vector<int64_t>{2, 8});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].to_vector(), (std::vector<double>{0, 1}));
  parts = chunk(view(arange(12), {3, 4}), 2, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].to_vector(), (std::vector<double>{2, 3, 6, 7, 10, 11}));
}

TEST(Shape, ChunkCountsFollowTorch) {
  auto sizes = [](const std::vector<Tensor>& ps) {
    std::vector<int64_t> s;
    for (const Tensor& p : ps) s.push_back(p.size(0));
    return s;
  };
  EXPECT_EQ(sizes(chunk(arange(5), 4)), (std::vector<int64_t>{2, 2, 1}));  // fewer than asked
  EXPECT_EQ(sizes(chunk(arange(6), 4)), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(sizes(chunk(arange(2), 5)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes(chunk(arange(3), INT64_MAX)), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(sizes(chunk(zeros({0}), 3)), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(sizes(split(zeros({0}), 3)), (std::vector<int64_t>{0}));
}

TEST(Shape, SliceSemantics) {
  Tensor x = arange(10);
  EXPECT_EQ(slice(x, 0, -3, INT64_MAX).to_vector(), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(slice(x, 0, -100, 3).to_vector(), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(slice(x, 0, 2, 9, 3).to_vector(), (std::vector<double>{2, 5, 8}));
  EXPECT_EQ(slice(x, 0, 8, 2).numel(), 0);
  EXPECT_EQ(slice(x, 0, 20, 30).numel(), 0);
  EXPECT_EQ(slice(x, 0, 3, INT64_MAX, INT64_MAX).to_vector(), (std::vector<double>{3}));
  EXPECT_EQ(slice(x, 0, INT64_MIN, 2).to_vector(), (std::vector<double>{0, 1}));
  EXPECT_EQ(narrow(x, 0, -2, 2).to_vector(), (std::vector<double>{8, 9}));
}

TEST(Shape, TrianglesOfMasks) {
  // tril of a bool mask (the usual causal mask, torch.tril(torch.ones(T, T))) and of int64
  Tensor m = tril(ones({3, 3}, kBool));
  EXPECT_EQ(m.dtype(), kBool);
  EXPECT_EQ(m.to_vector(), (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(triu(view(arange(1, 7), {2, 3}), 1).to_vector(), (std::vector<double>{0, 2, 3, 0, 0, 6}));
}

TEST(Shape, GradientsFlowToEveryCatInput) {
  Tensor a = randn64({2, 2}, 30), b = randn64({2, 3}, 31);
  Tensor out = cat({a, b}, 1);
  Tensor g = view(arange(0, 10, 1, kFloat64), {2, 5});
  out.backward(g);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{0, 1, 5, 6}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{2, 3, 4, 7, 8, 9}));
}

// Gradient accumulation over two backward passes must not let two leaves share a grad
// buffer: reshape's backward hands out views of the incoming gradient.
TEST(Shape, AccumulatedGradsOfViewsStayIndependent) {
  Tensor a = randn64({2, 3}, 32), b = randn64({3, 2}, 33);
  for (int pass = 0; pass < 2; ++pass) {
    Tensor out = reshape(a, {6}) + reshape(b, {6});
    out.backward(ones({6}, kFloat64));
  }
  EXPECT_EQ(a.grad().to_vector(), std::vector<double>(6, 2.0));
  EXPECT_EQ(b.grad().to_vector(), std::vector<double>(6, 2.0));
}

TEST(Shape, NoGraphWithoutGrad) {
  Tensor x = ones({2, 3});
  EXPECT_FALSE(transpose(x, 0, 1).requires_grad());
  EXPECT_TRUE(transpose(x, 0, 1).is_leaf());
  Tensor w = randn64({2, 3}, 34);
  EXPECT_STREQ(transpose(w, 0, 1).op_name(), "transpose");
  EXPECT_STREQ(view(w, {3, 2}).op_name(), "view");
  NoGradGuard guard;
  EXPECT_FALSE(view(w, {3, 2}).requires_grad());
}

// The kernel's paths (row copies, tiles, parallel loops) on inputs large enough to use
// threads, against index arithmetic; float32, float64, int64 and bool.
TEST(Shape, LargePermutesMatchIndexArithmetic) {
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  const std::vector<Case> cases = {
      {{4, 64, 8, 16}, {0, 2, 1, 3}},  // [B,T,H,hs] -> [B,H,T,hs]: rows of hs
      {{4, 8, 64, 16}, {0, 2, 1, 3}},  // and back
      {{3, 70, 200}, {0, 2, 1}},       // batched matrix transpose: tiles with a remainder
      {{5, 33, 41}, {2, 1, 0}},        // tiles, outer dims on both sides
      {{6, 7, 8, 9}, {3, 0, 2, 1}},
      {{2, 3, 4, 5, 6}, {4, 1, 3, 0, 2}},
      {{1, 300, 1, 200}, {3, 2, 1, 0}},  // size-1 dims dropped
  };
  for (const Case& c : cases) {
    for (Dtype dt : {kFloat32, kFloat64, kInt64}) {
      Tensor x = iota(c.shape, dt);
      SCOPED_TRACE(shape_str(c.shape) + " perm " + shape_str(c.perm) + " " + dtype_name(dt));
      Tensor y = permute(x, c.perm);
      EXPECT_EQ(y.to_vector(), naive_permute(x, c.perm));
      EXPECT_EQ(y.dtype(), dt);
    }
  }
  Tensor mask = gt(randn({300, 200}), scalar_tensor(0.0));
  EXPECT_EQ(transpose(mask, 0, 1).to_vector(), naive_permute(mask, {1, 0}));
}

TEST(Shape, LargeExpandRepeatCatSlice) {
  Tensor x = iota({64, 1, 600});
  std::vector<double> xv = x.to_vector();
  std::vector<double> e = expand(x, {2, 64, 3, 600}).to_vector();
  ASSERT_EQ(e.size(), 2u * 64 * 3 * 600);
  bool ok = true;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t r = 0; r < 64; ++r)
      for (int64_t k = 0; k < 3; ++k)
        for (int64_t c = 0; c < 600; ++c) ok = ok && e[((i * 64 + r) * 3 + k) * 600 + c] == xv[r * 600 + c];
  EXPECT_TRUE(ok) << "expand";

  Tensor m = iota({50, 40});
  std::vector<double> mv = m.to_vector(), rv = repeat(m, {3, 2, 5}).to_vector();
  ok = rv.size() == 3u * 100 * 200;
  for (int64_t t = 0; ok && t < 3; ++t)
    for (int64_t i = 0; i < 100; ++i)
      for (int64_t j = 0; j < 200; ++j) ok = ok && rv[(t * 100 + i) * 200 + j] == mv[(i % 50) * 40 + j % 40];
  EXPECT_TRUE(ok) << "repeat";

  Tensor a = iota({200, 300}), b = iota({200, 100});
  std::vector<double> cv = cat({a, b}, 1).to_vector(), av = a.to_vector(), bv = b.to_vector();
  ok = true;
  for (int64_t i = 0; i < 200; ++i)
    for (int64_t j = 0; j < 400; ++j) ok = ok && cv[i * 400 + j] == (j < 300 ? av[i * 300 + j] : bv[i * 100 + j - 300]);
  EXPECT_TRUE(ok) << "cat";

  std::vector<double> sv = slice(a, 1, 1, 300, 7).to_vector();
  ok = sv.size() == 200u * 43;
  for (int64_t i = 0; ok && i < 200; ++i)
    for (int64_t j = 0; j < 43; ++j) ok = ok && sv[i * 43 + j] == av[i * 300 + 1 + 7 * j];
  EXPECT_TRUE(ok) << "slice";
}

// ---------------------------------------------------------------------------------------
// errors

TEST(ShapeErrors, Views) {
  Tensor x = ones({3, 4});
  EXPECT_XG_ERROR(view(x, {4, 4}), "view: shape [4,4] is invalid for input of size 12");
  EXPECT_XG_ERROR(reshape(x, {5, -1}), "reshape: shape [5,-1] is invalid for input of size 12");
  EXPECT_XG_ERROR(view(x, {-1, -1}), "view: only one dimension can be inferred (shape [-1,-1])");
  EXPECT_XG_ERROR(view(x, {-2, -6}), "view: invalid size -2 in shape [-2,-6]");
  EXPECT_XG_ERROR(flatten(x, 1, 0), "flatten: start_dim 1 comes after end_dim 0");
  EXPECT_XG_ERROR(flatten(x, 2), "flatten: dim 2 out of range for a 2-d tensor of shape [3,4]");
  EXPECT_XG_ERROR(unsqueeze(x, 3), "unsqueeze: dim 3 out of range for a 2-d tensor of shape [3,4] (expected a dim in [-3, 2])");
  EXPECT_XG_ERROR(squeeze(x, -3), "squeeze: dim -3 out of range");
}

TEST(ShapeErrors, Layout) {
  Tensor x = ones({2, 3});
  EXPECT_XG_ERROR(transpose(x, 0, 2), "transpose: dim 2 out of range for a 2-d tensor of shape [2,3]");
  EXPECT_XG_ERROR(permute(x, {0}), "permute: got 1 dims [0] for a 2-d tensor of shape [2,3]");
  EXPECT_XG_ERROR(permute(x, {1, -1}), "permute: dim -1 repeated in [1,-1]");
  EXPECT_XG_ERROR(permute(x, {0, 5}), "permute: dim 5 out of range");
  EXPECT_XG_ERROR(expand(x, {2, 4}),
                  "expand: cannot expand dim 1 of size 3 to 4 (only size-1 dims expand; input [2,3], target [2,4])");
  EXPECT_XG_ERROR(expand(x, {3}), "expand: the target shape [3] has fewer dims than the input [2,3]");
  EXPECT_XG_ERROR(expand(x, {-1, 2, 3}), "expand: size -1 is not allowed for the new leading dim 0");
  EXPECT_XG_ERROR(repeat(x, {2}), "repeat: 1 repeat counts [2] for a 2-d tensor of shape [2,3]");
  EXPECT_XG_ERROR(repeat(x, {2, -1}), "repeat: repeat counts must be non-negative");
}

TEST(ShapeErrors, CatStack) {
  EXPECT_XG_ERROR(cat({ones({2, 3}), ones({2, 3}), ones({2, 4})}, 0),
                  "cat: input 2 has shape [2,4] but input 0 has shape [2,3] (shapes must match except along dim 0)");
  EXPECT_XG_ERROR(cat({ones({2, 3}), ones({2, 3, 1})}, 1), "cat: input 1 has shape [2,3,1] but input 0 has shape [2,3]");
  EXPECT_XG_ERROR(cat({ones({2, 3}), ones({2, 3}, kFloat64)}), "cat: input 1 is float64 but input 0 is float32");
  EXPECT_XG_ERROR(cat({}, 0), "cat: expected a non-empty list of tensors");
  EXPECT_XG_ERROR(cat({ones({2}), ones({2})}, 1), "cat: dim 1 out of range for a 1-d tensor of shape [2]");
  EXPECT_XG_ERROR(cat({scalar_tensor(1.0)}), "cat: zero-dimensional tensor");
  EXPECT_XG_ERROR(stack({ones({2, 3}), ones({3, 2})}, 0),
                  "stack: input 1 has shape [3,2] but input 0 has shape [2,3] (all inputs must have the same shape)");
  EXPECT_XG_ERROR(stack({ones({2, 3})}, 3), "stack: dim 3 out of range");
  EXPECT_XG_ERROR(stack({}), "stack: expected a non-empty list of tensors");
}

TEST(ShapeErrors, Pieces) {
  Tensor x = ones({4, 6});
  EXPECT_XG_ERROR(split(x, 0, 1), "split: split_size must be positive, got 0");
  EXPECT_XG_ERROR(split(x, std::vector<int64_t>{2, 3}, 1),
                  "split: sizes [2,3] sum to 5 but dim 1 of shape [4,6] has size 6");
  EXPECT_XG_ERROR(split(x, std::vector<int64_t>{5, -1}, 0), "split: sizes must be non-negative");
  EXPECT_XG_ERROR(chunk(x, 0), "chunk: chunks must be positive, got 0");
  EXPECT_XG_ERROR(chunk(x, 2, 2), "chunk: dim 2 out of range");
  EXPECT_XG_ERROR(narrow(x, 1, 4, 3), "narrow: start 4 + length 3 exceeds size 6 of dim 1 (shape [4,6])");
  EXPECT_XG_ERROR(narrow(x, 0, 5, 0), "narrow: start 5 out of range for dim 0 of size 4");
  EXPECT_XG_ERROR(narrow(x, 0, 0, -1), "narrow: length must be non-negative, got -1");
  EXPECT_XG_ERROR(slice(x, 1, 0, 6, 0), "slice: step must be positive, got 0");
  EXPECT_XG_ERROR(slice(x, -3, 0, 1), "slice: dim -3 out of range");
  EXPECT_XG_ERROR(tril(ones({3})), "tril: input must have at least 2 dims, got shape [3]");
  EXPECT_XG_ERROR(triu(scalar_tensor(1.0)), "triu: input must have at least 2 dims, got shape []");
}

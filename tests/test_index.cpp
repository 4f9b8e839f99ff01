// Tests for autograd/index.cpp: gather, index_select, embedding, index_add, topk,
// argmax/argmin, one_hot (gradient checks, PyTorch fixtures, errors, large parallel paths).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/torch_fixture.hpp"

namespace {

using xg::Tensor;
using xg::test::expect_matches_torch;
using xg::test::randn64;
using xg::test::ids;
using Ins = std::vector<Tensor>;


// Deterministic int64 indices in [0, n) of the given shape.
Tensor some_ids(const xg::Shape& shape, int64_t n, int64_t seed) {
  std::vector<int64_t> v(static_cast<std::size_t>(xg::shape_numel(shape)));
  uint64_t s = static_cast<uint64_t>(seed) * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto& e : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    e = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(n));
  }
  return xg::from_vector(v, shape);
}

std::vector<int64_t> as_ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

// ---------------------------------------------------------------------------------------
// gather

TEST(IndexGather, MatchesTorch) {
  for (const char* c : {"gather_dim0", "gather_dim1", "gather_dim_neg1", "gather_smaller"})
    expect_matches_torch("index", c, [c](const Ins& in) {
      const std::string name = c;
      const int64_t dim = name == "gather_dim0" ? 0 : name == "gather_dim_neg1" ? -1 : 1;
      return xg::gather(in[0], dim, in[1]);
    });
  expect_matches_torch("index", "gather_labels", [](const Ins& in) { return xg::gather(in[0], 2, in[1]); });
}

TEST(IndexGather, Gradcheck) {
  // Duplicate indices along dim (index larger than x along dim) accumulate in dx.
  EXPECT_GRADCHECK([](const Ins& in) { return xg::gather(in[0], 0, in[1]); },
                   {randn64({3, 4, 5}, 1), some_ids({5, 4, 5}, 3, 1)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::gather(in[0], 1, in[1]); },
                   {randn64({3, 4, 5}, 2), some_ids({3, 6, 5}, 4, 2)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::gather(in[0], -1, in[1]); },
                   {randn64({3, 4, 5}, 3), some_ids({3, 4, 2}, 5, 3)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::gather(in[0], 1, in[1]); },
                   {randn64({3, 4, 5}, 4), some_ids({2, 3, 3}, 4, 4)});
}

TEST(IndexGather, SmallExampleAndIntegers) {
  Tensor x = xg::tensor({{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(xg::gather(x, 1, ids({2, 0, 1, 1}, {2, 2})).to_vector(), (std::vector<double>{3, 1, 5, 5}));
  // Any dtype can be gathered (here int64), without autograd.
  Tensor xi = ids({10, 11, 12, 13}, {4});
  EXPECT_EQ(as_ints(xg::gather(xi, 0, ids({3, 3, 0}, {3}))), (std::vector<int64_t>{13, 13, 10}));
}

TEST(IndexGather, LargeParallelMatchesLoop) {
  // [B, T, V] log-probs gathered at K labels per position (with repeats), large enough for
  // the parallel forward and the parallel scatter-add backward.
  const int64_t B = 8, T = 64, V = 300, K = 70;
  Tensor x = randn64({B, T, V}, 5);
  Tensor idx = some_ids({B, T, K}, V, 5);
  Tensor out = xg::gather(x, -1, idx);
  Tensor g = randn64({B, T, K}, 6).detach();
  out.backward(g);
  const double* px = x.data<double>();
  const double* pg = g.data<double>();
  const int64_t* pi = idx.data<int64_t>();
  std::vector<double> want_dx(static_cast<std::size_t>(B * T * V), 0.0);
  bool values_ok = true;
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t k = 0; k < K; ++k) {
      values_ok &= out.data<double>()[r * K + k] == px[r * V + pi[r * K + k]];
      want_dx[r * V + pi[r * K + k]] += pg[r * K + k];
    }
  EXPECT_TRUE(values_ok);
  EXPECT_EQ(x.grad().to_vector(), want_dx);
}

TEST(IndexGather, Errors) {
  Tensor x = xg::zeros({2, 3});
  EXPECT_XG_ERROR(xg::gather(x, 1, xg::zeros({2, 1})), "gather: index must be an int64 tensor, got float32");
  EXPECT_XG_ERROR(xg::gather(x, 1, ids({0, 3}, {2, 1})),
                  "gather: index 3 out of range for dim 1 of size 3 (at position 1 of index [2,1])");
  EXPECT_XG_ERROR(xg::gather(x, 1, ids({0, -1}, {2, 1})), "negative indices are not allowed");
  EXPECT_XG_ERROR(xg::gather(x, 1, ids({0, 1}, {2})), "must have as many dims as x");
  EXPECT_XG_ERROR(xg::gather(x, 1, ids({0, 1, 2}, {3, 1})), "is larger than x [2,3] in dim 0");
  EXPECT_XG_ERROR(xg::gather(x, 2, ids({0, 1}, {2, 1})), "gather: dim 2 out of range");
}

// ---------------------------------------------------------------------------------------
// index_select

TEST(IndexSelect, MatchesTorch) {
  expect_matches_torch("index", "index_select_dim1", [](const Ins& in) { return xg::index_select(in[0], 1, in[1]); });
  expect_matches_torch("index", "index_select_dim_neg1",
                       [](const Ins& in) { return xg::index_select(in[0], -1, in[1]); });
  expect_matches_torch("index", "index_select_dim0", [](const Ins& in) { return xg::index_select(in[0], 0, in[1]); });
}

TEST(IndexSelect, Gradcheck) {
  EXPECT_GRADCHECK([](const Ins& in) { return xg::index_select(in[0], 1, in[1]); },
                   {randn64({3, 4, 5}, 7), ids({3, 0, 3, 1, 1}, {5})});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::index_select(in[0], -1, in[1]); },
                   {randn64({2, 3, 6}, 8), ids({5, 2, 2}, {3})});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::index_select(in[0], 0, in[1]); },
                   {randn64({4, 3}, 9), ids({2, 2, 0, 3}, {4})});
}

TEST(IndexSelect, ZeroDimIndexKeepsTheDim) {
  Tensor x = xg::tensor({{1, 2}, {3, 4}, {5, 6}});
  Tensor out = xg::index_select(x, 0, ids({2}, {}));
  EXPECT_EQ(out.shape(), (xg::Shape{1, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{5, 6}));
}

TEST(IndexSelect, Errors) {
  Tensor x = xg::zeros({2, 3});
  EXPECT_XG_ERROR(xg::index_select(x, 0, xg::zeros({1})), "index_select: index must be an int64 tensor");
  EXPECT_XG_ERROR(xg::index_select(x, 0, ids({0, 1}, {1, 2})), "index_select: index must be 1-D, got shape [1,2]");
  EXPECT_XG_ERROR(xg::index_select(x, -1, ids({1, 3}, {2})),
                  "index_select: index 3 out of range for dim 1 of size 3 (at position 1 of index [2])");
  EXPECT_XG_ERROR(xg::index_select(x, 0, ids({-1}, {1})), "negative indices are not allowed");
  EXPECT_XG_ERROR(xg::index_select(x, -3, ids({0}, {1})), "index_select: dim -3 out of range");
  EXPECT_XG_ERROR(xg::index_select(xg::scalar_tensor(1), 0, ids({0}, {1})), "at least 1 dim");
}

// ---------------------------------------------------------------------------------------
// embedding

TEST(IndexEmbedding, MatchesTorch) {
  expect_matches_torch("index", "embedding", [](const Ins& in) { return xg::embedding(in[0], in[1]); });
  expect_matches_torch("index", "embedding_padding", [](const Ins& in) { return xg::embedding(in[0], in[1], 4); });
  expect_matches_torch("index", "embedding_1d", [](const Ins& in) { return xg::embedding(in[0], in[1]); });
}

TEST(IndexEmbedding, Gradcheck) {
  Tensor dup = ids({1, 4, 1, 0, 2, 4, 4, 7}, {2, 4});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::embedding(in[0], in[1]); }, {randn64({8, 5}, 10), dup});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::embedding(in[0], in[1]); }, {randn64({6, 3}, 11), ids({5, 0, 5}, {3})});
  // NOTE: no gradcheck with padding_idx: its zero gradient for the padding row is a rule
  // (as in PyTorch), not the derivative; the fixture and PaddingRowGetsNoGradient cover it.
}

TEST(IndexEmbedding, PaddingRowGetsNoGradient) {
  Tensor w = randn64({5, 3}, 12);
  Tensor out = xg::embedding(w, ids({2, 0, 2, 2}, {4}), 2);
  EXPECT_EQ(out.shape(), (xg::Shape{4, 3}));
  // The padding row is still looked up (its values are copied) ...
  EXPECT_EQ(xg::index_select(out.detach(), 0, ids({0}, {1})).to_vector(),
            xg::index_select(w.detach(), 0, ids({2}, {1})).to_vector());
  xg::backward({out}, {xg::ones({4, 3}, xg::kFloat64)});
  // ... but gets no gradient; row 0 gets one g row, the others none.
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(IndexEmbedding, LargeParallelMatchesLoop) {
  // Enough work for the parallel paths (row copies forward, column-split accumulation
  // backward), with many duplicate ids.
  const int64_t V = 50, C = 256, N = 600;
  Tensor w = randn64({V, C}, 13);
  Tensor id = some_ids({3, N / 3}, V, 13);
  Tensor out = xg::embedding(w, id, 7);
  ASSERT_EQ(out.shape(), (xg::Shape{3, N / 3, C}));
  Tensor g = randn64({3, N / 3, C}, 14).detach();
  out.backward(g);
  const double* pw = w.data<double>();
  const double* pg = g.data<double>();
  const int64_t* pi = id.data<int64_t>();
  std::vector<double> want(static_cast<std::size_t>(V * C), 0.0);
  bool rows_ok = true;
  for (int64_t p = 0; p < N; ++p)
    for (int64_t c = 0; c < C; ++c) {
      rows_ok &= out.data<double>()[p * C + c] == pw[pi[p] * C + c];
      if (pi[p] != 7) want[pi[p] * C + c] += pg[p * C + c];
    }
  EXPECT_TRUE(rows_ok);
  const std::vector<double> got = w.grad().to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << "at " << i;
}

TEST(IndexEmbedding, Errors) {
  Tensor w = xg::zeros({10, 4});
  EXPECT_XG_ERROR(xg::embedding(w, ids({0, 1, 2, 12, 0, 0, 0, 0}, {2, 4})),
                  "embedding: index 12 out of range for 10 rows (at position 3 of ids [2,4])");
  EXPECT_XG_ERROR(xg::embedding(w, ids({-2}, {1})), "embedding: index -2 out of range for 10 rows");
  EXPECT_XG_ERROR(xg::embedding(w, xg::zeros({2})), "embedding: ids must be an int64 tensor, got float32");
  EXPECT_XG_ERROR(xg::embedding(xg::zeros({10}), ids({0}, {1})), "embedding: weight must be 2-D [V, C], got shape [10]");
  EXPECT_XG_ERROR(xg::embedding(w, ids({0}, {1}), 10), "embedding: padding_idx 10 out of range for 10 rows");
}

// ---------------------------------------------------------------------------------------
// index_add

TEST(IndexAdd, MatchesTorch) {
  expect_matches_torch("index", "index_add_dim0", [](const Ins& in) { return xg::index_add(in[0], 0, in[1], in[2]); });
  expect_matches_torch("index", "index_add_dim1", [](const Ins& in) { return xg::index_add(in[0], 1, in[1], in[2]); });
  expect_matches_torch("index", "index_add_dim_neg1",
                       [](const Ins& in) { return xg::index_add(in[0], -1, in[1], in[2]); });
}

TEST(IndexAdd, Gradcheck) {
  EXPECT_GRADCHECK([](const Ins& in) { return xg::index_add(in[0], 0, in[1], in[2]); },
                   {randn64({5, 3}, 15), ids({1, 3, 1, 1}, {4}), randn64({4, 3}, 16)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::index_add(in[0], -1, in[1], in[2]); },
                   {randn64({2, 3, 4}, 17), ids({3, 3, 0, 1, 3}, {5}), randn64({2, 3, 5}, 18)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::index_add(in[0], 1, in[1], in[2]); },
                   {randn64({2, 4, 3}, 19), ids({0, 2, 0}, {3}), randn64({2, 3, 3}, 20)});
}

TEST(IndexAdd, DuplicatesAccumulateAndInputIsUntouched) {
  Tensor x = xg::tensor({{1, 1}, {2, 2}, {3, 3}});
  Tensor s = xg::tensor({{10, 20}, {30, 40}, {50, 60}});
  Tensor out = xg::index_add(x, 0, ids({2, 0, 2}, {3}), s);
  EXPECT_EQ(out.to_vector(), (std::vector<double>{31, 41, 2, 2, 63, 83}));
  EXPECT_EQ(x.to_vector(), (std::vector<double>{1, 1, 2, 2, 3, 3}));
  // int64 works too (counting, e.g. tokens per expert).
  Tensor counts = xg::index_add(xg::zeros({3}, xg::kInt64), 0, ids({2, 2, 0, 2}, {4}), xg::ones({4}, xg::kInt64));
  EXPECT_EQ(as_ints(counts), (std::vector<int64_t>{1, 0, 3}));
}

TEST(IndexAdd, OnlySourceRequiresGrad) {
  Tensor x = xg::zeros({4, 2}, xg::kFloat64);
  Tensor s = randn64({3, 2}, 21);
  Tensor out = xg::index_add(x, 0, ids({3, 1, 3}, {3}), s);
  out.backward(xg::tensor({{1, 2}, {3, 4}, {5, 6}, {7, 8}}, xg::kFloat64));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(s.grad().to_vector(), (std::vector<double>{7, 8, 3, 4, 7, 8}));
}

TEST(IndexAdd, LargeParallelMatchesLoop) {
  // MoE-style combine: [E, T, C] scattered into [T_total, C] rows along dim 0, and along dim 1.
  const int64_t rows = 40, J = 300, C = 128;
  Tensor x = randn64({rows, C}, 22).detach();
  Tensor s = randn64({J, C}, 23).detach();
  Tensor idx = some_ids({J}, rows, 22);
  Tensor out = xg::index_add(x, 0, idx, s);
  std::vector<double> want = x.to_vector();
  const double* ps = s.data<double>();
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t j = 0; j < J; ++j)
    for (int64_t c = 0; c < C; ++c) want[pi[j] * C + c] += ps[j * C + c];
  const std::vector<double> got = out.to_vector();
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << "at " << i;

  Tensor x2 = randn64({64, 20, 40}, 24).detach();
  Tensor s2 = randn64({64, 30, 40}, 25).detach();
  Tensor idx2 = some_ids({30}, 20, 26);
  Tensor out2 = xg::index_add(x2, 1, idx2, s2);
  std::vector<double> want2 = x2.to_vector();
  for (int64_t o = 0; o < 64; ++o)
    for (int64_t j = 0; j < 30; ++j)
      for (int64_t c = 0; c < 40; ++c)
        want2[(o * 20 + idx2.data<int64_t>()[j]) * 40 + c] += s2.data<double>()[(o * 30 + j) * 40 + c];
  const std::vector<double> got2 = out2.to_vector();
  for (std::size_t i = 0; i < want2.size(); ++i) ASSERT_NEAR(got2[i], want2[i], 1e-12) << "at " << i;
}

TEST(IndexAdd, Errors) {
  Tensor x = xg::zeros({3, 2});
  EXPECT_XG_ERROR(xg::index_add(x, 0, xg::zeros({1}), xg::zeros({1, 2})), "index_add: index must be an int64 tensor");
  EXPECT_XG_ERROR(xg::index_add(x, 0, ids({0, 3}, {2}), xg::zeros({2, 2})),
                  "index_add: index 3 out of range for dim 0 of size 3 (at position 1 of index [2])");
  EXPECT_XG_ERROR(xg::index_add(x, 0, ids({-1}, {1}), xg::zeros({1, 2})), "negative indices are not allowed");
  EXPECT_XG_ERROR(xg::index_add(x, 0, ids({0, 1}, {2}), xg::zeros({2, 3})),
                  "index_add: source [2,3] must have x's shape [3,2] with dim 0 of size 2");
  EXPECT_XG_ERROR(xg::index_add(x, 0, ids({0}, {1}), xg::zeros({1, 2}, xg::kFloat64)), "index_add: dtype mismatch");
  EXPECT_XG_ERROR(xg::index_add(x, 0, ids({0, 1}, {2, 1}), xg::zeros({2, 2})), "index_add: index must be 1-D");
  EXPECT_XG_ERROR(xg::index_add(x, 2, ids({0}, {1}), xg::zeros({1, 2})), "index_add: dim 2 out of range");
}

// ---------------------------------------------------------------------------------------
// topk

TEST(IndexTopk, MatchesTorch) {
  expect_matches_torch("index", "topk_largest_dim1", [](const Ins& in) { return xg::topk(in[0], 3, 1).values; });
  expect_matches_torch("index", "topk_largest_dim1_idx", [](const Ins& in) { return xg::topk(in[0], 3, 1).indices; });
  expect_matches_torch("index", "topk_smallest_dim1",
                       [](const Ins& in) { return xg::topk(in[0], 2, 1, false).values; });
  expect_matches_torch("index", "topk_smallest_dim1_idx",
                       [](const Ins& in) { return xg::topk(in[0], 2, 1, false).indices; });
  expect_matches_torch("index", "topk_last", [](const Ins& in) { return xg::topk(in[0], 4).values; });
  expect_matches_torch("index", "topk_last_idx", [](const Ins& in) { return xg::topk(in[0], 4).indices; });
}

TEST(IndexTopk, Gradcheck) {
  EXPECT_GRADCHECK([](const Ins& in) { return xg::topk(in[0], 3, 1).values; }, {randn64({2, 6, 4}, 27)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::topk(in[0], 2, -2, false).values; }, {randn64({3, 5, 2}, 28)});
  EXPECT_GRADCHECK([](const Ins& in) { return xg::topk(in[0], 4, -1, true, false).values; }, {randn64({3, 9}, 29)});
}

TEST(IndexTopk, TiesNanUnsortedAndWholeDim) {
  Tensor x = xg::tensor({2, 5, 5, 1, 5});
  xg::TopK t = xg::topk(x, 3);
  EXPECT_EQ(as_ints(t.indices), (std::vector<int64_t>{1, 2, 4}));  // ties: lower index first
  EXPECT_EQ(t.indices.dtype(), xg::kInt64);
  Tensor y = xg::tensor({3, 1, 4, 0, 2});
  xg::TopK u = xg::topk(y, 3, 0, true, false);  // unsorted: in index order
  EXPECT_EQ(as_ints(u.indices), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(u.values.to_vector(), (std::vector<double>{3, 4, 2}));
  xg::TopK all = xg::topk(y, 5, 0, false);
  EXPECT_EQ(all.values.to_vector(), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(xg::topk(y, 0).values.shape(), (xg::Shape{0}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor z = xg::from_vector(std::vector<double>{1.0, nan, 3.0}, {3}, xg::kFloat64);
  EXPECT_EQ(as_ints(xg::topk(z, 2).indices), (std::vector<int64_t>{1, 2}));         // NaN is the largest
  EXPECT_EQ(as_ints(xg::topk(z, 2, 0, false).indices), (std::vector<int64_t>{0, 2}));  // and never the smallest
}

TEST(IndexTopk, SmallKOfLongLineTiesAndNan) {
  // k * 8 <= size takes the one-pass heap selection: same order rules.
  std::vector<double> v(40, 1.0);
  v[7] = 2.0;
  v[30] = 2.0;
  v[12] = 0.5;
  v[3] = 0.5;
  Tensor x = xg::from_vector(v, {40}, xg::kFloat64);
  xg::TopK big = xg::topk(x, 4);
  EXPECT_EQ(as_ints(big.indices), (std::vector<int64_t>{7, 30, 0, 1}));
  EXPECT_EQ(big.values.to_vector(), (std::vector<double>{2, 2, 1, 1}));
  EXPECT_EQ(as_ints(xg::topk(x, 3, 0, false).indices), (std::vector<int64_t>{3, 12, 0}));
  EXPECT_EQ(as_ints(xg::topk(x, 4, 0, true, false).indices), (std::vector<int64_t>{0, 1, 7, 30}));
  v[20] = std::numeric_limits<double>::quiet_NaN();
  Tensor y = xg::from_vector(v, {40}, xg::kFloat64);
  EXPECT_EQ(as_ints(xg::topk(y, 2).indices), (std::vector<int64_t>{20, 7}));
  EXPECT_EQ(as_ints(xg::topk(y, 2, 0, false).indices), (std::vector<int64_t>{3, 12}));
}

TEST(IndexTopk, LargeParallelMatchesSort) {
  const int64_t rows = 64, V = 1000, k = 5;
  Tensor x = randn64({rows, V}, 30).detach();
  xg::TopK t = xg::topk(x, k);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<double, int64_t>> line;
    for (int64_t j = 0; j < V; ++j) line.emplace_back(-x.data<double>()[r * V + j], j);
    std::sort(line.begin(), line.end());
    for (int64_t j = 0; j < k; ++j) {
      ASSERT_EQ(t.indices.data<int64_t>()[r * k + j], line[j].second) << "row " << r;
      ASSERT_EQ(t.values.data<double>()[r * k + j], -line[j].first);
    }
  }
}

TEST(IndexTopk, Errors) {
  Tensor x = xg::zeros({2, 5});
  EXPECT_XG_ERROR(xg::topk(x, 6, 1), "topk: k = 6 out of range for dim 1 of size 5 in x [2,5]");
  EXPECT_XG_ERROR(xg::topk(x, -1, 1), "topk: k = -1 out of range");
  EXPECT_XG_ERROR(xg::topk(x, 1, 2), "topk: dim 2 out of range");
  EXPECT_XG_ERROR(xg::topk(xg::zeros({2}, xg::kBool), 1), "topk: expected a float32, float64 or int64 tensor, got bool");
}

// ---------------------------------------------------------------------------------------
// argmax / argmin

TEST(IndexArgmax, MatchesTorch) {
  expect_matches_torch("index", "argmax_keepdim", [](const Ins& in) { return xg::argmax(in[0], 1, true); });
  expect_matches_torch("index", "argmax_last", [](const Ins& in) { return xg::argmax(in[0], -1); });
  expect_matches_torch("index", "argmin_dim0", [](const Ins& in) { return xg::argmin(in[0], 0); });
  expect_matches_torch("index", "argmin_neg2_keepdim", [](const Ins& in) { return xg::argmin(in[0], -2, true); });
}

TEST(IndexArgmax, FirstOccurrenceNanAndNoGrad) {
  Tensor x = xg::tensor({{1, 3, 3, 2}, {0, 0, -1, -1}}, xg::kFloat64).requires_grad_();
  Tensor amax = xg::argmax(x, 1);
  EXPECT_EQ(as_ints(amax), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(as_ints(xg::argmin(x, 1)), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(amax.dtype(), xg::kInt64);
  EXPECT_FALSE(amax.requires_grad());
  EXPECT_EQ(xg::argmax(x, 0, true).shape(), (xg::Shape{1, 4}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor z = xg::from_vector(std::vector<double>{1.0, nan, 3.0, nan}, {4}, xg::kFloat64);
  EXPECT_EQ(xg::argmax(z, 0).item<int64_t>(), 1);
  EXPECT_EQ(xg::argmin(z, 0).item<int64_t>(), 1);
  EXPECT_EQ(xg::argmax(ids({4, 9, 9}, {3}), 0).item<int64_t>(), 1);  // int64 input
}

TEST(IndexArgmax, LargeParallelMatchesLoop) {
  // Along the last dim (contiguous rows) and along dim 1 (strided columns).
  const int64_t A = 40, N = 50, I = 30;
  Tensor x = randn64({A, N, I}, 31).detach();
  const double* px = x.data<double>();
  Tensor last = xg::argmax(x, -1);
  Tensor mid = xg::argmin(x, 1);
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t n = 0; n < N; ++n) {
      const double* row = px + (a * N + n) * I;
      ASSERT_EQ(last.data<int64_t>()[a * N + n], std::max_element(row, row + I) - row);
    }
    for (int64_t i = 0; i < I; ++i) {
      int64_t best = 0;
      for (int64_t n = 1; n < N; ++n)
        if (px[(a * N + n) * I + i] < px[(a * N + best) * I + i]) best = n;
      ASSERT_EQ(mid.data<int64_t>()[a * I + i], best);
    }
  }
}

TEST(IndexArgmax, Errors) {
  EXPECT_XG_ERROR(xg::argmax(xg::zeros({2, 0}), 1), "argmax: cannot reduce dim 1 of size 0 in x [2,0]");
  EXPECT_XG_ERROR(xg::argmin(xg::zeros({2, 3}), -3), "argmin: dim -3 out of range");
  EXPECT_XG_ERROR(xg::argmax(xg::zeros({2}, xg::kBool), 0), "argmax: expected a float32, float64 or int64 tensor");
}

// ---------------------------------------------------------------------------------------
// one_hot

TEST(IndexOneHot, MatchesTorch) {
  expect_matches_torch("index", "one_hot", [](const Ins& in) { return xg::one_hot(in[0], 6); });
  expect_matches_torch("index", "one_hot_infer", [](const Ins& in) { return xg::one_hot(in[0]); });
}

TEST(IndexOneHot, Errors) {
  EXPECT_XG_ERROR(xg::one_hot(ids({0, 4}, {2}), 4),
                  "one_hot: index 4 out of range for 4 classes (at position 1 of ids [2])");
  EXPECT_XG_ERROR(xg::one_hot(ids({0, -1}, {2}), 4), "one_hot: index -1 out of range");
  EXPECT_XG_ERROR(xg::one_hot(xg::zeros({2}), 4), "one_hot: ids must be an int64 tensor, got float32");
  EXPECT_XG_ERROR(xg::one_hot(ids({}, {0})), "one_hot: cannot infer num_classes from an empty ids tensor");
  EXPECT_XG_ERROR(xg::one_hot(ids({0}, {1}), -2), "one_hot: num_classes must be -1 (infer) or >= 0");
}

}  // namespace

// Tests for autograd/rope.cpp: PyTorch values of both RoPE layouts (with offsets), float64
// gradient checks, the rotation's invariants (pair norms, relative positions) and errors.
#include "autograd/rope.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/graph.hpp"
#include "autograd/random.hpp"
#include "autograd/shape.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using test::expect_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

namespace {

constexpr RopeLayout kLayouts[] = {RopeLayout::Interleaved, RopeLayout::RotateHalf};

test::Fn rope_fn(int64_t offset, RopeLayout layout) {
  return [offset, layout](const V& in) { return apply_rope(in[0], in[1], in[2], offset, layout); };
}

// Index of the two features of pair i in a row of hs features.
std::pair<int64_t, int64_t> pair_of(RopeLayout layout, int64_t i, int64_t hs) {
  return layout == RopeLayout::Interleaved ? std::make_pair(2 * i, 2 * i + 1) : std::make_pair(i, i + hs / 2);
}

// Float64 tables of rope_tables with no gradient.
std::pair<Tensor, Tensor> tables64(int64_t hs, int64_t rows, double base = 10000.0) {
  return rope_tables(hs, rows, base, kFloat64);
}

}  // namespace

// --- values against PyTorch (tests/fixtures/gen_rope.py) ------------------------------------

TEST(RopeTorch, BothLayoutsWithOffsets) {
  for (RopeLayout layout : kLayouts) {
    const std::string name = rope_layout_name(layout);
    SCOPED_TRACE(name);
    expect_matches_torch("rope", name + "_4d", rope_fn(0, layout));
    expect_matches_torch("rope", name + "_offset", rope_fn(4, layout));
    expect_matches_torch("rope", name + "_offset_to_last_row", rope_fn(8, layout));
    expect_matches_torch("rope", name + "_3d", rope_fn(2, layout));
    expect_matches_torch("rope", name + "_2d", rope_fn(1, layout));
  }
}

TEST(RopeTorch, TableGradients) {
  expect_matches_torch("rope", "interleaved_table_grad", rope_fn(3, RopeLayout::Interleaved));
  expect_matches_torch("rope", "rotate_half_table_grad", rope_fn(3, RopeLayout::RotateHalf));
}

TEST(RopeTorch, HandCheckableExample) {
  // d_head = 4, the vector [1, 0, 0.5, 0.5] at three positions, interleaved pairs.
  expect_matches_torch("rope", "interleaved_seed_example", rope_fn(0, RopeLayout::Interleaved));
  // By hand: position 1, pair 0 is (cos 1, sin 1) for the input pair (1, 0).
  Tensor q = test::fixture("rope").at("interleaved_seed_example.f64.in0");
  auto [c, s] = tables64(4, 3);
  std::vector<double> y = apply_rope(q, c, s, 0, RopeLayout::Interleaved).to_vector();
  EXPECT_NEAR(y[4], std::cos(1.0), 1e-15);
  EXPECT_NEAR(y[5], std::sin(1.0), 1e-15);
}

TEST(RopeTorch, Tables) {
  for (const auto& [name, hs, rows, base] :
       std::vector<std::tuple<std::string, int64_t, int64_t, double>>{{"tables_hs8", 8, 12, 10000.0},
                                                                       {"tables_llama3", 16, 20, 500000.0}}) {
    const int64_t hs_ = hs, rows_ = rows;
    const double base_ = base;
    expect_matches_torch("rope", name, [=](const V& in) {
      auto [c, s] = rope_tables(hs_, rows_, base_, in[0].dtype());
      EXPECT_EQ(c.shape(), (Shape{rows_, hs_ / 2}));
      return cat({c, s}, 0);
    });
  }
}

// --- gradient checks ---------------------------------------------------------------------------

TEST(Rope, Gradcheck) {
  for (RopeLayout layout : kLayouts) {
    SCOPED_TRACE(rope_layout_name(layout));
    auto [c, s] = tables64(6, 9);
    auto fn = [c = c, s = s, layout](int64_t offset) {
      return [=](const V& in) { return apply_rope(in[0], c, s, offset, layout); };
    };
    EXPECT_GRADCHECK(fn(0), {randn64({2, 3, 5, 6}, 1)});
    EXPECT_GRADCHECK(fn(3), {randn64({2, 5, 6}, 2)});
    EXPECT_GRADCHECK(fn(8), {randn64({1, 6}, 3)});  // one cached-decoding token at the last row
    // Tables as inputs that require grad: their gradient sums over the rows of each position.
    EXPECT_GRADCHECK(rope_fn(2, layout), {randn64({2, 2, 4, 6}, 4), randn64({7, 3}, 5), randn64({7, 3}, 6)});
  }
}

// apply_rope_packed on [B, T, H, hs] rotates the first heads of each position as apply_rope
// rotates [B, H, T, hs] and copies the rest; its gradient (and the tables') likewise, float64.
TEST(Rope, PackedRotatesTheLeadingHeadsAndCopiesTheRest) {
  for (RopeLayout layout : kLayouts) {
    SCOPED_TRACE(rope_layout_name(layout));
    Tensor c = randn64({9, 3}, 7).requires_grad_(), s = randn64({9, 3}, 8).requires_grad_();
    Tensor x = randn64({2, 4, 5, 6}, 9).requires_grad_();  // [B, T, H, hs], heads 0..2 rotated
    Tensor g = randn64({2, 4, 5, 6}, 10);
    Tensor packed = apply_rope_packed(x, c, s, 3, layout, 3);
    backward({packed}, {g});
    const Tensor dx = x.grad(), dc = c.grad(), ds = s.grad();
    for (Tensor* t : {&x, &c, &s}) t->zero_grad();
    Tensor rotated = transpose(apply_rope(transpose(narrow(x, 2, 0, 3), 1, 2), c, s, 3, layout), 1, 2);
    Tensor expected = cat({rotated, narrow(x, 2, 3, 2)}, 2);
    backward({expected}, {g});
    EXPECT_TRUE(test::tensors_close(packed, expected, 1e-12, 1e-12));
    EXPECT_TRUE(test::tensors_close(dx, x.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(test::tensors_close(dc, c.grad(), 1e-12, 1e-12));
    EXPECT_TRUE(test::tensors_close(ds, s.grad(), 1e-12, 1e-12));
    auto fn = [layout](const V& in) { return apply_rope_packed(in[0], in[1], in[2], 1, layout, 2); };
    EXPECT_GRADCHECK(fn, {randn64({2, 3, 4, 6}, 11), randn64({5, 3}, 12), randn64({5, 3}, 13)});
    // one head: positions are still dim 1
    Tensor one = randn64({2, 4, 1, 6}, 14);
    EXPECT_TRUE(test::tensors_close(apply_rope_packed(one, c, s, 2, layout, 1),
                                    transpose(apply_rope(transpose(one, 1, 2), c, s, 2, layout), 1, 2), 1e-14, 1e-14));
  }
  auto [c, s] = rope_tables(8, 12);
  EXPECT_XG_ERROR(apply_rope_packed(ones({2, 3, 8}), c, s, 0, RopeLayout::RotateHalf, 1),
                  "apply_rope_packed: expected x of shape [B, T, H, hs], got [2,3,8]");
  EXPECT_XG_ERROR(apply_rope_packed(ones({2, 3, 4, 8}), c, s, 0, RopeLayout::RotateHalf, 5),
                  "apply_rope_packed: rotated_heads must be in [0, H = 4], got 5");
  EXPECT_XG_ERROR(apply_rope_packed(ones({2, 13, 4, 8}), c, s, 0, RopeLayout::RotateHalf, 4),
                  "apply_rope_packed: positions 0..12 with offset 0 exceed the table's 12 rows");
}

TEST(Rope, NoGraphWhenNothingRequiresGrad) {
  auto [c, s] = rope_tables(8, 4);
  Tensor x = ones({1, 4, 8});
  EXPECT_FALSE(apply_rope(x, c, s, 0, RopeLayout::RotateHalf).requires_grad());
  // With x requiring grad only x gets a gradient; the tables stay without one.
  x.requires_grad_(true);
  Tensor y = apply_rope(x, c, s, 0, RopeLayout::RotateHalf);
  EXPECT_STREQ(y.op_name(), "apply_rope");
  y.backward(ones_like(y));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

// --- properties of the rotation ------------------------------------------------------------------

// Each rotated pair keeps its length (rotation), hence so does every row.
TEST(Rope, PreservesPairAndRowNorms) {
  const int64_t hs = 10, T = 7;
  for (RopeLayout layout : kLayouts) {
    for (Dtype dt : {kFloat64, kFloat32}) {
      SCOPED_TRACE(str_cat(rope_layout_name(layout), " ", dtype_name(dt)));
      const double tol = dt == kFloat64 ? 1e-12 : 1e-5;
      Generator gen(7);
      Tensor x = randn({2, 3, T, hs}, dt, &gen);
      auto [c, s] = rope_tables(hs, T + 5, 10000.0, dt);
      std::vector<double> xv = x.to_vector(), yv = apply_rope(x, c, s, 5, layout).to_vector();
      double moved = 0;
      for (int64_t r = 0; r < 2 * 3 * T; ++r) {
        double nx = 0, ny = 0;
        for (int64_t i = 0; i < hs / 2; ++i) {
          auto [a, b] = pair_of(layout, i, hs);
          const double* px = &xv[static_cast<std::size_t>(r * hs)];
          const double* py = &yv[static_cast<std::size_t>(r * hs)];
          const double px2 = px[a] * px[a] + px[b] * px[b], py2 = py[a] * py[a] + py[b] * py[b];
          EXPECT_NEAR(std::sqrt(py2), std::sqrt(px2), tol * (1 + std::sqrt(px2))) << "row " << r << " pair " << i;
          nx += px2;
          ny += py2;
          moved = std::max(moved, std::abs(py[a] - px[a]));
        }
        EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), tol * (1 + std::sqrt(nx))) << "row " << r;
      }
      EXPECT_GT(moved, 0.1);  // it did rotate
    }
  }
}

// RoPE's defining property (RoFormer, Su et al.): <R(m) q, R(n) k> depends only on m - n.
TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  const int64_t hs = 16, T = 12;
  for (RopeLayout layout : kLayouts) {
    for (int64_t offset : {0, 5}) {
      SCOPED_TRACE(str_cat(rope_layout_name(layout), " offset ", offset));
      Generator gen(21);
      Tensor q = randn({1, hs}, kFloat64, &gen), k = randn({1, hs}, kFloat64, &gen);
      auto [c, s] = tables64(hs, T + offset);
      // Row t is the vector at position offset + t.
      std::vector<double> rq = apply_rope(expand(q, {T, hs}), c, s, offset, layout).to_vector();
      std::vector<double> rk = apply_rope(expand(k, {T, hs}), c, s, offset, layout).to_vector();
      auto dot = [&](int64_t m, int64_t n) {
        double d = 0;
        for (int64_t j = 0; j < hs; ++j) d += rq[static_cast<std::size_t>(m * hs + j)] * rk[static_cast<std::size_t>(n * hs + j)];
        return d;
      };
      // Reference for distance m - n: the pair (m - n, 0) or (0, n - m).
      for (int64_t m = 0; m < T; ++m)
        for (int64_t n = 0; n < T; ++n) {
          const double ref = m >= n ? dot(m - n, 0) : dot(0, n - m);
          EXPECT_NEAR(dot(m, n), ref, 1e-12) << "m=" << m << " n=" << n;
        }
      // ... and does depend on the distance (so the check above is not vacuous).
      EXPECT_GT(std::abs(dot(1, 0) - dot(0, 0)), 1e-3);
      EXPECT_GT(std::abs(dot(3, 0) - dot(0, 3)), 1e-3);
    }
  }
}

// Cached decoding: the last token alone at offset T - 1 equals the last row of the full pass.
TEST(Rope, OffsetMatchesFullSequence) {
  for (RopeLayout layout : kLayouts) {
    SCOPED_TRACE(rope_layout_name(layout));
    Generator gen(3);
    Tensor x = randn({2, 3, 10, 8}, kFloat64, &gen);
    auto [c, s] = tables64(8, 16);
    Tensor full = apply_rope(x, c, s, 0, layout);
    for (int64_t t : {0, 4, 9}) {
      Tensor one = apply_rope(narrow(x, 2, t, 1), c, s, t, layout);
      EXPECT_TRUE(test::tensors_close(one, narrow(full, 2, t, 1), 0, 0)) << "t=" << t;
    }
    // An offset reads the table from that row: same as slicing the table.
    Tensor a = apply_rope(narrow(x, 2, 0, 6), c, s, 4, layout);
    Tensor b = apply_rope(narrow(x, 2, 0, 6), narrow(c, 0, 4, 6), narrow(s, 0, 4, 6), 0, layout);
    EXPECT_TRUE(test::tensors_close(a, b, 0, 0));
  }
}

// Sizes above the parallel threshold, against plain double loops: forward and backward.
TEST(Rope, LargeInputsMatchNaiveLoops) {
  const int64_t B = 2, H = 4, T = 64, hs = 64, offset = 7;
  for (RopeLayout layout : kLayouts) {
    SCOPED_TRACE(rope_layout_name(layout));
    Generator gen(5);
    Tensor x = randn({B, H, T, hs}, kFloat32, &gen).requires_grad_();
    Tensor g = randn({B, H, T, hs}, kFloat32, &gen);
    auto [c, s] = rope_tables(hs, T + offset, 10000.0, kFloat32);
    Tensor y = apply_rope(x, c, s, offset, layout);
    backward({y}, {g});
    std::vector<double> xv = x.to_vector(), gv = g.to_vector(), yv = y.to_vector(), dx = x.grad().to_vector();
    std::vector<double> cv = c.to_vector(), sv = s.to_vector();
    double worst_y = 0, worst_dx = 0;
    for (int64_t r = 0; r < B * H * T; ++r) {
      const int64_t p = offset + r % T;
      for (int64_t i = 0; i < hs / 2; ++i) {
        auto [ia, ib] = pair_of(layout, i, hs);
        const std::size_t a = static_cast<std::size_t>(r * hs + ia), b = static_cast<std::size_t>(r * hs + ib);
        const double co = cv[static_cast<std::size_t>(p * hs / 2 + i)], si = sv[static_cast<std::size_t>(p * hs / 2 + i)];
        worst_y = std::max({worst_y, std::abs(yv[a] - (xv[a] * co - xv[b] * si)),
                            std::abs(yv[b] - (xv[b] * co + xv[a] * si))});
        worst_dx = std::max({worst_dx, std::abs(dx[a] - (gv[a] * co + gv[b] * si)),
                             std::abs(dx[b] - (gv[b] * co - gv[a] * si))});
      }
    }
    EXPECT_LT(worst_y, 1e-5);
    EXPECT_LT(worst_dx, 1e-5);
  }
}

// --- errors -------------------------------------------------------------------------------------

TEST(Rope, Errors) {
  auto [c, s] = rope_tables(8, 12);
  const auto L = RopeLayout::RotateHalf;
  EXPECT_XG_ERROR(apply_rope(ones({2, 4, 7}), c, s, 0, L), "apply_rope: head size hs=7 must be a positive even number");
  EXPECT_XG_ERROR(apply_rope(ones({8}), c, s, 0, L), "expected x of shape [..., T, hs] (at least 2 dims), got [8]");
  EXPECT_XG_ERROR(apply_rope(ones({2, 10, 8}), c, s, 4, L),
                  "apply_rope: positions 0..9 with offset 4 exceed the table's 12 rows");
  EXPECT_XG_ERROR(apply_rope(ones({2, 3, 8}), c, s, -1, L), "apply_rope: offset must be non-negative, got -1");
  auto [c6, s6] = rope_tables(6, 12);
  EXPECT_XG_ERROR(apply_rope(ones({2, 3, 8}), c6, s6, 0, L),
                  "cos and sin must both be [max_T, hs/2] = [max_T, 4] tables for x [2,3,8], got cos [12,3] and sin [12,3]");
  EXPECT_XG_ERROR(apply_rope(ones({2, 3, 8}), c, s6, 0, L), "got cos [12,4] and sin [12,3]");
  EXPECT_XG_ERROR(apply_rope(ones({2, 3, 8}), reshape(c, {48}), reshape(s, {48}), 0, L), "got cos [48] and sin [48]");
  auto [c64, s64] = rope_tables(8, 12, 10000.0, kFloat64);
  EXPECT_XG_ERROR(apply_rope(ones({2, 3, 8}), c64, s64, 0, L), "apply_rope: dtype mismatch: x is float32, cos is float64");
  EXPECT_XG_ERROR(apply_rope(zeros({2, 3, 8}, kInt64), c, s, 0, L), "apply_rope: expected a float32 or float64 x, got int64");
  EXPECT_XG_ERROR(rope_tables(7, 12), "rope_tables: head_dim must be a positive even number, got 7");
  EXPECT_XG_ERROR(rope_tables(8, -1), "rope_tables: max_seq_len must be non-negative, got -1");
  EXPECT_XG_ERROR(rope_tables(8, 12, 0.0), "rope_tables: base must be positive, got 0");
  EXPECT_XG_ERROR(rope_tables(8, 12, 10000.0, kInt64), "rope_tables: dtype must be float32 or float64, got int64");
}

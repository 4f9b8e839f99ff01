// Tests for nn/position.cpp: sinusoidal, learned and rotary position modules against their
// PyTorch versions (same weights), the sinusoidal table of "Attention Is All You Need",
// gradchecks and errors.
#include "nn/position.hpp"

#include <cmath>

#include "autograd/elementwise.hpp"
#include "autograd/random.hpp"
#include "autograd/shape.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using test::expect_matches_torch;
using test::expect_module_matches_torch;
using test::randn64;
using V = std::vector<Tensor>;

// --- sinusoidal -----------------------------------------------------------------------------

TEST(NnPositionTorch, Sinusoidal) {
  SinusoidalPositionalEncoding m(8, 16);
  expect_module_matches_torch("nn_position", "sinusoidal", m, [&](const V& x) { return m(x[0]); });
  expect_module_matches_torch("nn_position", "sinusoidal_offset", m, [&](const V& x) { return m(x[0], 12); });
  expect_module_matches_torch("nn_position", "sinusoidal_2d", m, [&](const V& x) { return m(x[0], 3); });
}

// The table against the usual get_sinusoidal_encoding, pe[t, 2i] = sin(t / 10000^(2i/d)),
// pe[t, 2i+1] = cos(...) (computed by PyTorch in float64).
TEST(NnPositionTorch, SinusoidalTableMatchesTheFormula) {
  for (const auto& [name, max_len, d] :
       std::vector<std::tuple<std::string, int64_t, int64_t>>{{"sinusoidal_table_16x8", 16, 8},
                                                              {"sinusoidal_table_64x32", 64, 32}}) {
    const int64_t n = max_len, dm = d;
    expect_matches_torch("nn_position", name, [=](const V& in) {
      return SinusoidalPositionalEncoding(dm, n, 0.0, in[0].dtype()).pe();
    });
  }
  // By hand: pe[t, 2i] = sin(t / 10000^(2i/d)), pe[t, 2i+1] = cos(t / 10000^(2i/d)).
  SinusoidalPositionalEncoding m(6, 10, 0.0, kFloat64);
  std::vector<double> pe = m.pe().to_vector();
  for (int t : {0, 3, 9})
    for (int i = 0; i < 3; ++i) {
      const double a = t / std::pow(10000.0, 2.0 * i / 6);
      EXPECT_NEAR(pe[static_cast<std::size_t>(t * 6 + 2 * i)], std::sin(a), 1e-14);
      EXPECT_NEAR(pe[static_cast<std::size_t>(t * 6 + 2 * i + 1)], std::cos(a), 1e-14);
    }
}

TEST(NnPosition, SinusoidalStateDictAndRepr) {
  SinusoidalPositionalEncoding m(8, 16, 0.1);
  EXPECT_TRUE(m.named_parameters().empty());
  TensorMap sd = m.state_dict();
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd.at("pe").shape(), (Shape{16, 8}));  // a persistent buffer, as in PyTorch
  EXPECT_EQ(m.repr(), "SinusoidalPositionalEncoding(d_model=8, max_len=16\n  (dropout): Dropout(p=0.1)\n)");
}

TEST(NnPosition, SinusoidalDropoutOnlyInTraining) {
  SinusoidalPositionalEncoding m(8, 16, 0.5, kFloat64);
  Tensor x = randn64({4, 10, 8}, 3).detach();
  std::vector<double> ref = add(x, narrow(m.pe(), 0, 2, 10)).to_vector();
  m.eval();
  EXPECT_TRUE(test::tensors_close(m(x, 2), add(x, narrow(m.pe(), 0, 2, 10)), 0, 0));
  m.train();
  std::vector<double> y = m(x, 2).to_vector();
  int zeros = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) ++zeros;
    else EXPECT_NEAR(y[i], 2 * ref[i], 1e-12) << i;  // kept values scaled by 1 / (1 - p)
  }
  EXPECT_GT(zeros, 80);  // of 320, about half
  EXPECT_LT(zeros, 240);
}

// --- learned -------------------------------------------------------------------------------

TEST(NnPositionTorch, Learned) {
  LearnedPositionalEmbedding m(12, 8);
  expect_module_matches_torch("nn_position", "learned", m, [&](const V& x) { return m(x[0]); });
  expect_module_matches_torch("nn_position", "learned_offset", m, [&](const V& x) { return m(x[0], 8); });
  EXPECT_EQ(m.named_parameters().at(0).first, "weight");
  EXPECT_EQ(m.repr(), "LearnedPositionalEmbedding(12, 8)");
}

// --- rotary --------------------------------------------------------------------------------

TEST(NnPositionTorch, Rotary) {
  for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
    const std::string name = std::string("rotary_") + rope_layout_name(layout);
    SCOPED_TRACE(name);
    RotaryEmbedding m(8, 16, 10000.0, layout);
    expect_module_matches_torch("nn_position", name, m, [&](const V& x) { return m(x[0], 3); });
    expect_module_matches_torch("nn_position", name + "_3d", m, [&](const V& x) { return m(x[0]); });
  }
}

TEST(NnPosition, RotaryBuffersAreNonPersistentTables) {
  RotaryEmbedding m(64, 128);
  EXPECT_TRUE(m.state_dict().empty());  // a PyTorch attention state dict loads without them
  NamedTensors bufs = m.named_buffers();
  ASSERT_EQ(bufs.size(), 2u);
  EXPECT_EQ(bufs[0].first, "cos");
  EXPECT_EQ(bufs[1].first, "sin");
  auto [c, s] = rope_tables(64, 128);
  EXPECT_TRUE(test::tensors_close(m.cos(), c, 0, 0));
  EXPECT_TRUE(test::tensors_close(m.sin(), s, 0, 0));
  EXPECT_EQ(m.cos().shape(), (Shape{128, 32}));
  EXPECT_EQ(m.layout(), RopeLayout::RotateHalf);  // the default (x * cos + rotate_half(x) * sin)
  EXPECT_EQ(m.repr(), "RotaryEmbedding(head_dim=64, max_seq_len=128, base=10000, layout=rotate_half)");
  // to() converts the tables with the module; handles stay valid.
  m.to(kFloat64);
  EXPECT_EQ(m.cos().dtype(), kFloat64);
  Tensor x = randn64({1, 2, 5, 64}, 1).detach();
  EXPECT_TRUE(test::tensors_close(m(x, 7), apply_rope(x, m.cos(), m.sin(), 7, RopeLayout::RotateHalf), 0, 0));
}

// --- gradient checks ------------------------------------------------------------------------

TEST(NnPosition, Gradcheck) {
  SinusoidalPositionalEncoding sin_pe(8, 16, 0.0, kFloat64);
  EXPECT_GRADCHECK([&](const V& in) { return sin_pe(in[0], 2); }, {randn64({2, 5, 8}, 1)});

  LearnedPositionalEmbedding learned(12, 6);
  learned.to(kFloat64);
  EXPECT_GRADCHECK([&](const V& in) { return learned(in[0], 4); }, {randn64({3, 5, 6}, 2), learned.weight()});

  for (RopeLayout layout : {RopeLayout::RotateHalf, RopeLayout::Interleaved}) {
    RotaryEmbedding rope(8, 16, 10000.0, layout, kFloat64);
    EXPECT_GRADCHECK([&](const V& in) { return rope(in[0], 3); }, {randn64({2, 2, 4, 8}, 3)});
  }
}

// --- errors ---------------------------------------------------------------------------------

TEST(NnPosition, Errors) {
  RotaryEmbedding rope(64, 12);
  EXPECT_XG_ERROR(rope(zeros({2, 4, 10, 32})), "RotaryEmbedding(head_dim=64): expected input [..., T, 64], got [2,4,10,32]");
  EXPECT_XG_ERROR(rope(zeros({64})), "RotaryEmbedding(head_dim=64): expected input [..., T, 64], got [64]");
  EXPECT_XG_ERROR(rope(zeros({2, 10, 64}), 4),
                  "RotaryEmbedding(head_dim=64, max_seq_len=12): positions 0..9 with offset 4 exceed max_seq_len 12");
  EXPECT_XG_ERROR(rope(zeros({2, 10, 64}), -2), "RotaryEmbedding(head_dim=64, max_seq_len=12): offset must be non-negative, got -2");
  EXPECT_XG_ERROR(rope(zeros({2, 10, 64}, kFloat64)), "RotaryEmbedding: input is float64 but the cos/sin tables are float32");
  EXPECT_XG_ERROR(RotaryEmbedding(7), "RotaryEmbedding: head_dim must be a positive even number, got 7");
  EXPECT_XG_ERROR(RotaryEmbedding(8, 0), "RotaryEmbedding: max_seq_len must be positive, got 0");

  SinusoidalPositionalEncoding sin_pe(8, 16);
  EXPECT_XG_ERROR(sin_pe(zeros({2, 3, 7})), "SinusoidalPositionalEncoding(d_model=8): expected input [..., T, 8], got [2,3,7]");
  EXPECT_XG_ERROR(sin_pe(zeros({2, 10, 8}), 10),
                  "SinusoidalPositionalEncoding(max_len=16): positions 0..9 with offset 10 exceed max_len 16");
  EXPECT_XG_ERROR(sin_pe(zeros({2, 3, 8}, kFloat64)), "SinusoidalPositionalEncoding: input is float64 but pe is float32");
  EXPECT_XG_ERROR(SinusoidalPositionalEncoding(7), "SinusoidalPositionalEncoding: d_model must be a positive even number, got 7");
  EXPECT_XG_ERROR(SinusoidalPositionalEncoding(8, 0), "SinusoidalPositionalEncoding: max_len must be positive, got 0");
  EXPECT_XG_ERROR(SinusoidalPositionalEncoding(8, 16, 1.5), "Dropout: probability must be in [0, 1], got 1.5");

  LearnedPositionalEmbedding learned(12, 8);
  EXPECT_XG_ERROR(learned(zeros({2, 3, 4})), "LearnedPositionalEmbedding(max_len=12, d_model=8): expected input [..., T, 8], got [2,3,4]");
  EXPECT_XG_ERROR(learned(zeros({1, 5, 8}), 8),
                  "LearnedPositionalEmbedding(max_len=12): positions 0..4 with offset 8 exceed max_len 12");
  EXPECT_XG_ERROR(LearnedPositionalEmbedding(0, 8), "LearnedPositionalEmbedding: sizes must be positive, got max_len=0 and d_model=8");
}

// Every RotaryEmbedding of the same settings (a model's layers) reads one pair of tables;
// converting one module to float64 leaves the others' float32 tables as they were.
TEST(NnPosition, RotaryTablesAreSharedAcrossModules) {
  RotaryEmbedding a(8, 32, 10000.0), b(8, 32, 10000.0), other_base(8, 32, 500000.0);
  EXPECT_EQ(a.cos().raw_data(), b.cos().raw_data());
  EXPECT_EQ(a.sin().raw_data(), b.sin().raw_data());
  EXPECT_NE(a.cos().raw_data(), other_base.cos().raw_data());
  RopeScaling llama3;
  llama3.kind = RopeScalingKind::Llama3;
  llama3.original_max_seq_len = 16;
  RotaryEmbedding scaled(8, 32, 10000.0, RopeLayout::RotateHalf, kFloat32, llama3);
  EXPECT_NE(a.cos().raw_data(), scaled.cos().raw_data());
  const std::vector<double> before = b.cos().to_vector();
  a.to(kFloat64);
  EXPECT_EQ(a.cos().dtype(), kFloat64);
  EXPECT_EQ(b.cos().dtype(), kFloat32);
  EXPECT_EQ(b.cos().to_vector(), before);
  RotaryEmbedding c(8, 32, 10000.0, RopeLayout::RotateHalf, kFloat64);
  EXPECT_EQ(a.cos().raw_data(), c.cos().raw_data());  // a's rebuilt float64 tables
}

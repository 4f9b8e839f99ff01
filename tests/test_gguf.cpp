// The GGUF container (io/gguf.hpp): metadata and tensors round trip in every type, the
// layout is GGUF's (checked byte by byte for a small file), and a header or tensor table that
// does not fit the file is an error naming the file and the rule.
#include "io/gguf.hpp"

#include "io/safetensors.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace {

namespace fs = std::filesystem;

Tensor gguf_ramp(const Shape& shape) {
  std::vector<double> v;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::sin(0.37 * static_cast<double>(i)) * (1 + i % 7));
  return from_vector(v, shape);
}

TEST(Gguf, MetadataAndTensorsRoundTrip) {
  const std::string path = (test::fresh_test_dir() / "m.gguf").string();
  io::GgufValue u64;
  u64.type = io::GgufType::UInt64;
  u64.ints = {1ll << 40};
  const io::GgufMetadata meta = {{"general.architecture", io::GgufValue::string("llama")},
                             {"a.u32", io::GgufValue::u32(7)},
                             {"a.f32", io::GgufValue::f32(0.5f)},
                             {"a.bool", io::GgufValue::boolean(true)},
                             {"a.u64", u64},
                             {"a.strings", io::GgufValue::strings_array({"x", "", "Ġthe"})},
                             {"a.ints", io::GgufValue::i32_array({-1, 2})},
                             {"a.bools", io::GgufValue::bools_array({true, false, true})},
                             {"a.empty", io::GgufValue::strings_array({})}};
  const Tensor w = gguf_ramp({3, 64}), v = gguf_ramp({5});
  io::save_gguf(path, meta,
            {{"f32", w, io::GgmlType::F32}, {"f16", w, io::GgmlType::F16}, {"bf16", w, io::GgmlType::BF16},
             {"q8", w, io::GgmlType::Q8_0}, {"q4", w, io::GgmlType::Q4_0}, {"v", v, io::GgmlType::F32}});
  io::GgufReader r(path);
  ASSERT_EQ(r.metadata().size(), meta.size());
  EXPECT_EQ(r.get_string("general.architecture"), "llama");
  EXPECT_EQ(r.get_int("a.u32"), 7);
  EXPECT_EQ(r.get_float("a.f32"), 0.5);
  EXPECT_TRUE(r.get_bool("a.bool"));
  EXPECT_EQ(r.get_int("a.u64"), 1ll << 40);
  EXPECT_EQ(r.at("a.strings").strings, (std::vector<std::string>{"x", "", "Ġthe"}));
  EXPECT_EQ(r.at("a.ints").ints, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(r.at("a.bools").element, io::GgufType::Bool);
  EXPECT_EQ(r.at("a.bools").ints, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(r.at("a.empty").size(), 0u);
  EXPECT_EQ(r.tensor("q8").shape, (Shape{3, 64}));
  EXPECT_TRUE(test::tensors_close(r.read("f32"), w, 0, 0));
  EXPECT_TRUE(test::tensors_close(r.read("v"), v, 0, 0));
  const Tensor h = r.read("f16"), b = r.read("bf16"), q = r.read("q8"), q4 = r.read("q4");
  // Q4_0's blocks are what xgrad's q4_0 stores (autograd/q4_0.hpp), widened to float32
  EXPECT_TRUE(test::tensors_close(q4, w.to(kQ4_0).to(kFloat32), 0, 0));
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float x = w.data<float>()[i];
    ASSERT_EQ(h.data<float>()[i], half_to_float(float_to_half(x))) << i;
    ASSERT_EQ(b.data<float>()[i], bfloat16_to_float(float_to_bfloat16(x))) << i;
    // half a step d / 2 = max|x| / 254 (|x| <= 7), plus d's rounding to half precision times |q| <= 127
    ASSERT_NEAR(q.data<float>()[i], x, 7.0 / 254 + 7.0 / 2048) << i;
    // Q4_0: codes -8..7 of d = max / -8, so up to |d| off (a value near -max clamps to 7 steps)
    ASSERT_NEAR(q4.data<float>()[i], x, 7.0 / 8 + 7.0 / 256) << i;
  }
  // Alignment: every tensor's data starts at a multiple of 32 bytes after the header.
  for (const io::GgufTensorInfo& t : r.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
  EXPECT_XG_ERROR(r.get_int("a.f32"), "metadata key 'a.f32' must be an integer, got float32");
  EXPECT_XG_ERROR(r.at("missing"), "metadata key 'missing' is missing");
}

TEST(Gguf, LayoutIsGgufs) {
  const std::string path = (test::fresh_test_dir() / "tiny.gguf").string();
  io::save_gguf(path, {{"k", io::GgufValue::u32(1)}}, {{"t", from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}), io::GgmlType::F32}});
  const std::string b = test::slurp(path);
  std::string want("GGUF", 4);
  const auto u32 = [&](uint32_t v) { want.append(reinterpret_cast<const char*>(&v), 4); };
  const auto u64 = [&](uint64_t v) { want.append(reinterpret_cast<const char*>(&v), 8); };
  u32(3);  // version
  u64(1);  // tensors
  u64(1);  // key/values
  u64(1); want += "k"; u32(4); u32(1);             // "k": uint32 1
  u64(1); want += "t"; u32(2); u64(3); u64(2);     // "t": 2 dims, ne = {3, 2} (innermost first)
  u32(0); u64(0);                                   // F32 at offset 0
  ASSERT_EQ(want.size(), 82u);
  want.resize(96, '\0');                            // the data starts aligned to 32
  for (float f : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) want.append(reinterpret_cast<const char*>(&f), 4);
  want.resize(128, '\0');                           // and each tensor's data is padded to 32
  EXPECT_EQ(b, want);
}

TEST(Gguf, FloatToHalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);      // the tie above the largest half goes to infinity
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // a tie to even (down)
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);  // a tie to even (up)
  EXPECT_EQ(float_to_half(5.96046448e-08f), 0x0001);     // the smallest subnormal
  EXPECT_EQ(float_to_half(2.98023224e-08f), 0x0000);     // half of it: a tie to even, zero
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  for (uint32_t h = 0; h < 0x7c00; ++h) ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << h;
}

// Bad files: each is an xg::Error naming the file and what was wrong.
TEST(Gguf, MalformedFilesAreErrorsNamingTheFile) {
  const fs::path dir = test::fresh_test_dir();
  const std::string good = (dir / "good.gguf").string();
  io::save_gguf(good, {{"k", io::GgufValue::string("v")}}, {{"t", gguf_ramp({2, 32}), io::GgmlType::F32}});
  const std::string bytes = test::slurp(good);
  const auto with = [&](const std::string& name, std::string b) {
    const std::string p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << b;
    return p;
  };
  const auto patch64 = [&](std::string b, std::size_t at, uint64_t v) {
    std::memcpy(&b[at], &v, 8);
    return b;
  };
  const auto patch32 = [&](std::string b, std::size_t at, uint32_t v) {
    std::memcpy(&b[at], &v, 4);
    return b;
  };
  std::string p = with("magic.gguf", "GGML" + bytes.substr(4));
  EXPECT_XG_ERROR(io::GgufReader r(p), p + ": not a valid GGUF file: it does not start with \"GGUF\"");
  p = with("v2.gguf", patch32(bytes, 4, 2));
  EXPECT_XG_ERROR(io::GgufReader r(p), "version 2 (xgrad reads version 3)");
  p = with("short.gguf", patch64(bytes, 8, 0).substr(0, 40));  // no tensors claimed, a value cut short
  EXPECT_XG_ERROR(io::GgufReader r(p), p + ": not a valid GGUF file: the value of 'k''s length needs 8 bytes but the file has 3 left");
  p = with("count.gguf", patch64(bytes, 8, 1ull << 40));
  EXPECT_XG_ERROR(io::GgufReader r(p), "claims 1099511627776 tensors, more than the file can hold");
  // Header: magic 4, version 4, counts 16, key (8 + 1), type 4, string (8 + 1) = 46; then the
  // tensor "t": name 9, dims 4, ne 16, type at 75, offset at 79.
  p = with("type.gguf", patch32(bytes, 75, 16));
  EXPECT_XG_ERROR(io::GgufReader r(p), p + ": tensor 't' has type IQ2_XXS (16); xgrad reads F32, F16, BF16, Q8_0, Q4_0, "
                                           "Q4_1, Q5_0, Q5_1, Q2_K to Q6_K, IQ4_NL and IQ4_XS");
  p = with("iq4_xs_rows.gguf", patch32(bytes, 75, 23));  // IQ4_XS: super-blocks of 256 too
  EXPECT_XG_ERROR(io::GgufReader r(p), p + ": not a valid GGUF file: IQ4_XS tensor 't' has rows of 32 values, not a multiple of 256");
  p = with("k_rows.gguf", patch32(bytes, 75, 12));  // rows of 32: not whole 256-value super-blocks
  EXPECT_XG_ERROR(io::GgufReader r(p), p + ": not a valid GGUF file: Q4_K tensor 't' has rows of 32 values, not a multiple of 256");
  p = with("offset.gguf", patch64(bytes, 79, 4096));
  EXPECT_XG_ERROR(io::GgufReader r(p), "tensor 't' (256 bytes at offset 4096) does not fit in the 256 bytes of data");
  p = with("misaligned.gguf", patch64(bytes, 79, 4));
  EXPECT_XG_ERROR(io::GgufReader r(p), "tensor 't' has offset 4, not a multiple of 32");
  p = with("dims.gguf", patch32(bytes, 55, 9));
  EXPECT_XG_ERROR(io::GgufReader r(p), "tensor 't' has 9 dims (at most 4)");
  p = with("truncated.gguf", bytes.substr(0, bytes.size() - 8));
  EXPECT_XG_ERROR(io::GgufReader r(p), "does not fit in the 248 bytes of data");
  EXPECT_XG_ERROR(io::save_gguf((dir / "q.gguf").string(), {}, {{"t", gguf_ramp({2, 30}), io::GgmlType::Q8_0}}),
                  "save_gguf: tensor 't' has rows of 30 values; Q8_0 needs a multiple of 32");
  EXPECT_FALSE(fs::exists(dir / "q.gguf"));
}

// A value the stored type cannot hold is refused, naming the tensor and the element, and no file
// is left: NaN or Inf in any type (Q8_0's block maximum used to skip a NaN, which then went to
// int8 by an undefined conversion and was written as 0), beyond 65504 in F16 (1e6 used to be
// written as +Inf), beyond bfloat16's range, and a Q8_0 block whose scale F16 cannot hold.
TEST(Gguf, ValuesTheTypeCannotHoldAreRefusedNamingTheElement) {
  const fs::path dir = test::fresh_test_dir();
  const std::string path = (dir / "out.gguf").string();
  const auto with = [](int64_t i, double v) {
    Tensor t = gguf_ramp({2, 32});
    t.data<float>()[i] = static_cast<float>(v);
    return t;
  };
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (io::GgmlType type :
       {io::GgmlType::F32, io::GgmlType::F16, io::GgmlType::BF16, io::GgmlType::Q8_0, io::GgmlType::Q4_0}) {
    const std::string name = io::ggml_type_name(type);
    EXPECT_XG_ERROR(io::save_gguf(path, {}, {{"blk.0.w", with(37, nan), type}}),
                    "save_gguf: tensor 'blk.0.w' element 37 is nan, and an exported weight must be finite");
    EXPECT_XG_ERROR(io::save_gguf(path, {}, {{"blk.0.w", with(5, -inf), type}}),
                    "save_gguf: tensor 'blk.0.w' element 5 is -inf, and an exported weight must be finite");
    EXPECT_FALSE(fs::exists(path)) << name;
  }
  EXPECT_XG_ERROR(io::save_gguf(path, {}, {{"w", with(3, 1e6), io::GgmlType::F16}}),
                  "save_gguf: tensor 'w' element 3 is 1e+06, beyond F16's largest finite value 65504");
  EXPECT_XG_ERROR(io::save_gguf(path, {}, {{"w", with(3, -3.4e38), io::GgmlType::BF16}}),
                  "save_gguf: tensor 'w' element 3 is -3.4e+38, beyond BF16's largest finite value 3.38953e+38");
  // |x| / 127 is Q8_0's F16 scale: 1e7 / 127 = 78740 > 65504.
  EXPECT_XG_ERROR(io::save_gguf(path, {}, {{"w", with(40, 1e7), io::GgmlType::Q8_0}}),
                  "save_gguf: tensor 'w' elements 32..63 (a Q8_0 block) reach 1e+07: the block's F16 scale (max / 127 = 78740.2) would overflow");
  // |x| / 8 is Q4_0's: 6e5 / 8 = 75000.
  EXPECT_XG_ERROR(io::save_gguf(path, {}, {{"w", with(40, 6e5), io::GgmlType::Q4_0}}),
                  "save_gguf: tensor 'w' elements 32..63 (a Q4_0 block) reach 600000: the block's F16 scale (max / 8 = 75000) would overflow");
  EXPECT_FALSE(fs::exists(path));
  // What fits is written: 65504 in F16, 8e6 in a Q8_0 block (scale 62992), 3e38 in BF16.
  io::save_gguf(path, {}, {{"a", with(3, 65504), io::GgmlType::F16}, {"b", with(40, 8e6), io::GgmlType::Q8_0},
                           {"c", with(3, 3e38), io::GgmlType::BF16}});
  io::GgufReader r(path);
  EXPECT_EQ(r.read("a").data<float>()[3], 65504.0f);
  EXPECT_NEAR(r.read("b").data<float>()[40], 8e6, 8e6 / 254);
  EXPECT_NEAR(r.read("c").data<float>()[3], 3e38, 3e38 / 128);
}

// Every prefix of a valid file, and the file with each byte of its header set to 0xff, is read or
// refused with an xg::Error (never a crash or another exception): a fixed sweep of what
// fuzz/fuzz_gguf.cpp explores at random, run by every test build (and under the sanitizers).
TEST(Gguf, CutOrCorruptedFilesAreReadOrRefusedCleanly) {
  const fs::path dir = test::fresh_test_dir();
  const std::string bytes = test::slurp(std::string(XGRAD_SOURCE_DIR) + "/fuzz/corpus/gguf/llama_f32");
  ASSERT_GT(bytes.size(), 1000u);
  const std::string p = (dir / "x.gguf").string();
  int refused = 0, read = 0;
  const auto attempt = [&](const std::string& b) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
    try {
      io::GgufReader r(p);
      for (const io::GgufTensorInfo& t : r.tensors()) r.read(t.name);
      ++read;
    } catch (const Error&) {
      ++refused;
    }
  };
  for (std::size_t n = 0; n < bytes.size(); n += 7) attempt(bytes.substr(0, n));
  const std::size_t header = std::min<std::size_t>(bytes.size(), 1400);  // the seed's metadata and tensor table
  for (std::size_t i = 0; i < header; ++i) {
    std::string b = bytes;
    b[i] = static_cast<char>(0xff);
    attempt(b);
  }
  EXPECT_GT(refused, 100);
  EXPECT_GT(read, 0);
}

}  // namespace
}  // namespace xg

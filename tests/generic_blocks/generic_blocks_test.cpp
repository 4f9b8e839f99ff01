// The block formats' widening and one-row dots as a CPU without AVX-512 runs them. xgrad's
// libraries are built with -march=native, so on the AVX-512 machines CI mostly runs on, the suite
// only ever reaches the formats' AVX-512 code; this program includes the format headers into a
// build without AVX-512 (and links no xgrad library, so that no AVX-512 copy of the same inline
// functions meets this one in the link) and checks that code against libggml: every block type's
// pseudo-random blocks (tests/random_blocks.hpp) widen to libggml's float32 values bit for bit
// (random_blocks.json), and each dot equals a float64 sum of the widened values. It is built
// twice (CMakeLists.txt): for the x86-64 baseline, the portable loops, and with AVX2, FMA and
// F16C (XGRAD_BLOCKS_AVX2), every format's kernels written for those (block_formats.hpp,
// f16_format.hpp, legacy_formats.hpp, iq4_formats.hpp, k_formats_avx2.hpp).
#if defined(__AVX512F__)
#error "tests/generic_blocks must be built without AVX-512 (its CMakeLists.txt says -mno-avx512f)"
#endif
#if defined(XGRAD_BLOCKS_AVX2) && !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#error "the AVX2 build of tests/generic_blocks needs -mavx2 -mfma -mf16c"
#endif
#if !defined(XGRAD_BLOCKS_AVX2) && defined(__AVX2__)
#error "the portable build of tests/generic_blocks must be built for the x86-64 baseline"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "autograd/detail/block_formats.hpp"
#include "autograd/detail/f16_format.hpp"
#include "autograd/detail/iq4_formats.hpp"
#include "autograd/detail/k_formats.hpp"
#include "autograd/detail/legacy_formats.hpp"
#include "tests/random_blocks.hpp"

namespace {

using namespace xg;

const nlohmann::json& ggml_values() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(XGRAD_FIXTURE_DIR) + "/gguf/random_blocks.json");
    std::stringstream s;
    s << in.rdbuf();
    return nlohmann::json::parse(s.str());
  }();
  return j;
}

// Whether this CPU runs this build's instructions (the AVX2 build on a CPU without AVX2 skips).
bool cpu_runs_this_build() {
#if defined(XGRAD_BLOCKS_AVX2)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return true;
#endif
}

// Each dot of a row of `per_row` blocks of Fmt (values v, widened) with x, against float64.
template <class Fmt>
void check_dots(const std::vector<uint8_t>& b, const std::vector<float>& v, int64_t per_row) {
  const int64_t count = static_cast<int64_t>(v.size()) / Fmt::kValues;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(v.size());
  for (float& xi : x) xi = u(rng);
  for (int64_t r = 0; r + per_row <= count; r += per_row) {
    double want = 0, size = 0;
    for (int64_t i = r * Fmt::kValues; i < (r + per_row) * Fmt::kValues; ++i) {
      want += static_cast<double>(v[i]) * x[i];
      size += std::fabs(static_cast<double>(v[i]) * x[i]);
    }
    const double got = Fmt::template dot<float>(b.data() + r * Fmt::kBytes, x.data() + r * Fmt::kValues, per_row);
    ASSERT_LE(std::fabs(got - want), 1e-6 * size + 1e-30) << "row " << r;
  }
}

// Widens and dots type t's random blocks with Fmt; checks both.
template <class Fmt>
void check(const char* name) {
  SCOPED_TRACE(name);
  const test::RandomBlockType* t = nullptr;
  for (const test::RandomBlockType& r : test::random_block_types())
    if (std::string(r.name) == name) t = &r;
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(Fmt::kValues, t->values);
  ASSERT_EQ(Fmt::kBytes, t->bytes);
  const std::vector<uint8_t> b = test::random_blocks(*t);
  const int64_t count = test::kRandomBlockValues / Fmt::kValues;
  std::vector<float> v(static_cast<std::size_t>(test::kRandomBlockValues));
  for (int64_t i = 0; i < count; ++i) Fmt::template widen<float>(b.data() + i * Fmt::kBytes, v.data() + i * Fmt::kValues);
  const nlohmann::json& e = ggml_values().at(name);
  const std::vector<float> first = e.at("first").get<std::vector<float>>();
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(v[i], first[i]) << "value " << i;
  EXPECT_EQ(test::fnv1a64_hex(v.data(), test::kRandomBlockValues), e.at("fnv1a64").get<std::string>());
  // The dot of each row of 8 blocks (or 1 super-block) with x, against float64; rows of 1 and 3
  // blocks too, which end in a block of their own (the dots take two at a time), and of 3
  // super-blocks (their dots keep sums across super-blocks).
  check_dots<Fmt>(b, v, Fmt::kValues == 32 ? 8 : 1);
  check_dots<Fmt>(b, v, 3);
  if (Fmt::kValues == 32) check_dots<Fmt>(b, v, 1);
}

TEST(GenericBlocks, EveryFormatWidensToLibggmlsValuesAndDotsItsWidening) {
  if (!cpu_runs_this_build()) GTEST_SKIP() << "this CPU lacks AVX2, FMA or F16C";
  check<blocks::Q4>("Q4_0");
  check<blocks::Q41>("Q4_1");
  check<blocks::Q50>("Q5_0");
  check<blocks::Q51>("Q5_1");
  check<blocks::Q8>("Q8_0");
  check<blocks::Q2K>("Q2_K");
  check<blocks::Q3K>("Q3_K");
  check<blocks::Q4K>("Q4_K");
  check<blocks::Q5K>("Q5_K");
  check<blocks::Q6K>("Q6_K");
  check<blocks::IQ4NL>("IQ4_NL");
  check<blocks::IQ4XS>("IQ4_XS");
  EXPECT_EQ(ggml_values().size(), test::random_block_types().size());
}

// float16 blocks: 32 halves each, widened exactly (half_to_float, one at a time) and dotted
// against float64, over every finite half's bit pattern once.
TEST(GenericBlocks, Float16WidensExactlyAndDotsItsWidening) {
  if (!cpu_runs_this_build()) GTEST_SKIP() << "this CPU lacks AVX2, FMA or F16C";
  std::vector<uint16_t> halves;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00u) != 0x7c00u) halves.push_back(static_cast<uint16_t>(h));
  halves.resize(halves.size() / 256 * 256);  // whole rows of 8 blocks
  std::vector<uint8_t> b(halves.size() * 2);
  std::memcpy(b.data(), halves.data(), b.size());
  std::vector<float> v(halves.size());
  for (std::size_t i = 0; i < halves.size(); i += 32) blocks::F16::widen<float>(b.data() + 2 * i, v.data() + i);
  for (std::size_t i = 0; i < halves.size(); ++i) ASSERT_EQ(v[i], half_to_float(halves[i])) << "half " << halves[i];
  check_dots<blocks::F16>(b, v, 8);
  check_dots<blocks::F16>(b, v, 3);
}

}  // namespace

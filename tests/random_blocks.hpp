// The pseudo-random blocks of tests/fixtures/gguf/random_blocks.json, made the same way here and
// by the fixture tool (tests/fixtures/ggml_dequantize.c --random, which has libggml widen them):
// for each block type, `values` values' worth of blocks whose bytes are successive SplitMix64
// outputs' low bytes, then each of the block's half scales (and mins) with bit 14 cleared, so that
// its exponent is at most 15: finite, below 2 in size, zero and subnormal included. Every byte
// pattern of the codes and sub-block scales occurs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace xg::test {

// One of ggml's block types: its number (ggml.h's enum ggml_type), values and bytes a block, and
// where its halves sit.
struct RandomBlockType {
  const char* name;
  int ggml_type;
  int values, bytes;
  int halves[2];  // byte offsets; -1: none
};

inline const std::vector<RandomBlockType>& random_block_types() {
  static const std::vector<RandomBlockType> types = {
      {"Q4_0", 2, 32, 18, {0, -1}},     {"Q4_1", 3, 32, 20, {0, 2}},      {"Q5_0", 6, 32, 22, {0, -1}},
      {"Q5_1", 7, 32, 24, {0, 2}},      {"Q8_0", 8, 32, 34, {0, -1}},     {"Q2_K", 10, 256, 84, {80, 82}},
      {"Q3_K", 11, 256, 110, {108, -1}}, {"Q4_K", 12, 256, 144, {0, 2}},  {"Q5_K", 13, 256, 176, {0, 2}},
      {"Q6_K", 14, 256, 210, {208, -1}}, {"IQ4_NL", 20, 32, 18, {0, -1}}, {"IQ4_XS", 23, 256, 136, {0, -1}}};
  return types;
}

constexpr int64_t kRandomBlockValues = 32768;  // per type
constexpr uint64_t kRandomBlockSeed = 0x5eed5eedull;

// The blocks of type t: kRandomBlockValues / t.values of them.
inline std::vector<uint8_t> random_blocks(const RandomBlockType& t) {
  uint64_t state = kRandomBlockSeed + static_cast<uint64_t>(t.ggml_type);
  const auto next = [&state] {  // SplitMix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const int64_t count = kRandomBlockValues / t.values;
  std::vector<uint8_t> b(static_cast<std::size_t>(count * t.bytes));
  for (uint8_t& x : b) x = static_cast<uint8_t>(next());
  for (int64_t i = 0; i < count; ++i)
    for (int at : t.halves)
      if (at >= 0) b[static_cast<std::size_t>(i * t.bytes + at + 1)] &= 0xBF;  // bit 14 of the little-endian half
  return b;
}

// FNV-1a 64 of n floats' bytes (little-endian) in 16 hex digits, as the fixture tool prints it
// (ggml_dequantize.c: dequantized.json and random_blocks.json).
inline std::string fnv1a64_hex(const float* v, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n) * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace xg::test

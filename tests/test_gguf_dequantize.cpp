// llama.cpp's block types read from files llama.cpp itself quantized (tests/fixtures/gguf, made by
// gen_gguf.sh with llama_model_quantize): every tensor widens to the float32 values ggml's own
// dequantize_row_* gives (dequantized.json, ggml_dequantize.c), bit for bit, and the models read
// from them give llama.cpp's log-probs, widened to float32 or kept as stored (--base-dtype auto).
#include <cctype>
#include <cstring>

#include "autograd/blocks.hpp"
#include "finetune/base_model.hpp"
#include "io/gguf.hpp"
#include "nn/weight_dtype.hpp"
#include "tests/gguf_test_util.hpp"
#include "tests/random_blocks.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace {

namespace fs = std::filesystem;

const nlohmann::json& ggml_widened() {
  static const nlohmann::json j = nlohmann::json::parse(test::slurp(test::gguf_fixture("dequantized.json").string()));
  return j;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The files of llama.cpp's other block types and the k-quant mixes, with what each holds.
const char* const kBlockTypeFiles[] = {"trained_llamacpp_q4_1", "trained_llamacpp_q5_0", "trained_llamacpp_q5_1",
                                       "wide_q4_k_m", "wide_q3_k_m", "wide_q2_k", "trained_llamacpp_iq4_nl",
                                       "wide_iq4_xs"};

TEST(GgufDequantize, EveryBlockTypeWidensToGgmlsValuesBitForBit) {
  std::set<std::string> types;
  int tensors = 0;
  for (const auto& [file, expected] : ggml_widened().items()) {
    io::GgufReader r(test::gguf_fixture(file + ".gguf").string());
    for (const auto& [name, e] : expected.items()) {
      SCOPED_TRACE(file + ": " + name);
      const io::GgufTensorInfo& t = r.tensor(name);
      ASSERT_EQ(io::ggml_type_name(t.type), upper(e.at("type")));
      const Tensor v = r.read(name);
      ASSERT_EQ(v.numel(), e.at("values").get<int64_t>());
      const std::vector<float> first = e.at("first").get<std::vector<float>>();
      for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(v.data<float>()[i], first[i]) << "value " << i;
      EXPECT_EQ(test::fnv1a64_hex(v.data<float>(), v.numel()), e.at("fnv1a64").get<std::string>());
      types.insert(io::ggml_type_name(t.type));
      ++tensors;
    }
  }
  EXPECT_EQ(types, (std::set<std::string>{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                                          "IQ4_NL", "IQ4_XS"}));
  EXPECT_GE(tensors, 100);
}

// Pseudo-random blocks of every type (every byte pattern of codes and sub-block scales, finite half
// scales from zero and subnormals up) widen as libggml widens them, bit for bit, through the
// library as this machine runs it; tests/generic_blocks checks the portable code on the same.
TEST(GgufDequantize, RandomBlocksOfEveryTypeWidenToGgmlsValuesBitForBit) {
  const nlohmann::json expected = nlohmann::json::parse(test::slurp(test::gguf_fixture("random_blocks.json").string()));
  ASSERT_EQ(expected.size(), test::random_block_types().size());
  for (const test::RandomBlockType& t : test::random_block_types()) {
    SCOPED_TRACE(t.name);
    const Dtype d = io::block_dtype(static_cast<io::GgmlType>(t.ggml_type));
    ASSERT_EQ(block_values(d), t.values);
    ASSERT_EQ(block_bytes(d), t.bytes);
    const std::vector<uint8_t> b = test::random_blocks(t);
    std::vector<float> v(static_cast<std::size_t>(test::kRandomBlockValues));
    dequantize_blocks(d, b.data(), test::kRandomBlockValues, v.data());
    EXPECT_EQ(test::fnv1a64_hex(v.data(), test::kRandomBlockValues), expected.at(t.name).at("fnv1a64").get<std::string>());
  }
}

// A Q4_K block written by hand, read by the layout's definition (ggml-common.h's block_q4_K,
// ggml-quants.c's get_scale_min_k4): the first sub-block's 6-bit scale and min sit in bytes 0 and
// 4 of the 12, the sixth's are split between a nibble of byte 9 and the top bits of bytes 1 and 5.
TEST(GgufDequantize, Q4KSubBlockScalesAndMinsAreUnpackedAsGgmlPacksThem) {
  uint8_t b[144] = {};
  const uint16_t d = float_to_half(0.0123f), dmin = float_to_half(0.0071f);
  std::memcpy(b, &d, 2);
  std::memcpy(b + 2, &dmin, 2);
  for (int j = 0; j < 12; ++j) b[4 + j] = static_cast<uint8_t>(37 * j + 200);
  for (int j = 0; j < 128; ++j) b[16 + j] = static_cast<uint8_t>(j * 29 + 7);
  float got[256];
  dequantize_blocks(kQ4_K, b, 256, got);
  const uint8_t* s = b + 4;
  // Values 0..31: the low nibbles of code bytes 0..31, scale s[0] & 63, min s[4] & 63.
  const float d0 = half_to_float(d) * static_cast<float>(s[0] & 63), m0 = half_to_float(dmin) * static_cast<float>(s[4] & 63);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(got[l], d0 * static_cast<float>(b[16 + l] & 0xF) - m0) << l;
  // Values 160..191 (sub-block 5): the high nibbles of code bytes 64..95.
  const int sc5 = (s[9] & 0xF) | ((s[1] >> 6) << 4), m5 = (s[9] >> 4) | ((s[5] >> 6) << 4);
  EXPECT_GE(sc5, 16);  // the top bits are in use
  const float d5 = half_to_float(d) * static_cast<float>(sc5), mm5 = half_to_float(dmin) * static_cast<float>(m5);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(got[160 + l], d5 * static_cast<float>(b[16 + 64 + l] >> 4) - mm5) << l;
}

TEST(GgufDequantize, FilesOfEveryBlockTypeGiveLlamaCppsLogprobs) {
  for (const char* file : kBlockTypeFiles) {
    SCOPED_TRACE(file);
    const nlohmann::json& c = test::gguf_case(file);
    const fs::path path = test::gguf_fixture(std::string(file) + ".gguf");
    EXPECT_EQ(test::gguf_fnv1a64(path), c.at("model_fnv1a64").get<std::string>());
    const std::vector<int64_t> ids = c.at("ids").get<std::vector<int64_t>>();
    const std::vector<double> want = c.at("logprobs").get<std::vector<double>>();
    // NOTE: llama.cpp's CPU kernels round the activations to 8 bits before these products
    // (ggml's vec_dot_q4_K_q8_K and the like); xgrad multiplies the widened weights in float32.
    nn::LoadOptions exact;
    exact.weights = nn::WeightDtype::F32;
    finetune::BaseModel f32 = finetune::load_base(path.string(), "test", exact);
    const std::vector<double> from_f32 = test::gguf_logprobs(*f32.model, ids, c.at("window"), 256);
    const test::GgufWorst wf = test::gguf_worst(from_f32, want);
    // auto: every block type kept as stored.
    nn::LoadOptions automatic;
    automatic.weights = nn::WeightDtype::Auto;
    finetune::BaseModel kept = finetune::load_base(path.string(), "test", automatic);
    io::GgufReader r(path.string());
    std::map<std::string, int> by_dtype;
    bool all_as_stored = true;
    for (const io::GgufTensorInfo& t : r.tensors()) all_as_stored = all_as_stored && io::is_block_type(t.type);
    for (const auto& [name, p] : kept.model->state_dict())
      if (is_blocked(p.dtype())) ++by_dtype[dtype_name(p.dtype())];
    const std::vector<double> from_kept = test::gguf_logprobs(*kept.model, ids, c.at("window"), 256);
    const test::GgufWorst wk = test::gguf_worst(from_kept, want), wkf = test::gguf_worst(from_kept, from_f32);
    std::string kinds;
    for (const auto& [d, n] : by_dtype) kinds += str_cat(" ", d, " x ", n);
    std::printf("  %s vs llama.cpp: max |d log p| %.2e widened to float32, %.2e as loaded (%s), %.2e between them\n",
                file, wf.diff, wk.diff, kinds.c_str(), wkf.diff);
    EXPECT_LE(wf.diff, 0.05) << "position " << wf.at;
    EXPECT_LE(wk.diff, 0.05) << "position " << wk.at;
    if (all_as_stored) {  // the same values in the products: only the sums' order differs
      EXPECT_LE(wkf.diff, 1e-4) << "position " << wkf.at;
      const std::vector<int64_t> prompt = c.at("prompt").get<std::vector<int64_t>>();
      EXPECT_EQ(test::gguf_greedy(*kept.model, prompt, 32), test::gguf_greedy(*f32.model, prompt, 32));
    }
  }
}

// The fuzzers' seed of these types (fuzz/make_corpus.py writes their layouts by hand) reads, and
// gives the values the layouts define.
TEST(GgufDequantize, TheFuzzSeedOfTheReadOnlyTypesReadsAsItsLayoutsSay) {
  io::GgufReader r(std::string(XGRAD_SOURCE_DIR) + "/fuzz/corpus/gguf/k_quants_q4_1_q5");
  ASSERT_EQ(r.tensors().size(), 8u);
  for (const io::GgufTensorInfo& t : r.tensors()) {
    const Tensor v = r.read(t.name);
    for (int64_t i = 0; i < v.numel(); ++i) ASSERT_TRUE(std::isfinite(v.data<float>()[i])) << t.name << " " << i;
  }
  // Q4_1: code byte 0 is 11: value 0 = 11 d + m = 5.5 - 1, value 16 (its high nibble, 0) = m.
  EXPECT_EQ(r.read("q4_1").data<float>()[0], 4.5f);
  EXPECT_EQ(r.read("q4_1").data<float>()[16], -1.0f);
  // Q6_K: ql[0] = 11, the low 2 bits of qh[0] = 11 are 3: code 11 + 48 - 32 = 27; scale 11, d 1/16.
  EXPECT_EQ(r.read("q6_k").data<float>()[0], 0.0625f * 11 * 27);
  // IQ4_NL: code byte 0 is 11: value 0 is level 11 (38) times d, value 16 (its high nibble, 0) level 0 (-127).
  io::GgufReader iq(std::string(XGRAD_SOURCE_DIR) + "/fuzz/corpus/gguf/iq4_nl_xs");
  EXPECT_EQ(iq.read("iq4_nl").data<float>()[0], 0.5f * 38);
  EXPECT_EQ(iq.read("iq4_nl").data<float>()[16], 0.5f * -127);
  // IQ4_XS: sub-block 0's scale is scales_l[0]'s low nibble (11) with scales_h's low 2 bits (11 & 3) on top: 59 - 32.
  EXPECT_EQ(iq.read("iq4_xs").data<float>()[0], 0.0625f * 27 * 38);
  EXPECT_EQ(iq.read("iq4_xs").data<float>()[16], 0.0625f * 27 * -127);
  // and as stored, the same values
  const Tensor kept = empty({1, 256}, kIQ4_XS);
  iq.read_into("iq4_xs", kept);
  EXPECT_TRUE(test::tensors_close(kept.to(kFloat32), iq.read("iq4_xs"), 0, 0));
}

// A damaged scale is refused by name before the model is used, and xgrad does not write these types.
TEST(GgufDequantize, ANonFiniteSuperBlockScaleIsRefusedAndTheTypesAreNotWritten) {
  const fs::path dir = test::fresh_test_dir();
  const fs::path src = test::gguf_fixture("wide_q4_k_m.gguf");
  io::GgufReader good(src.string());
  const io::GgufTensorInfo& t = good.tensor("blk.0.ffn_gate.weight");
  ASSERT_EQ(t.type, io::GgmlType::Q4_K);
  std::string bytes = test::slurp(src.string());
  const uint16_t nan = 0x7e00;
  std::memcpy(&bytes[good.file_offset(t.name) + 3 * 144], &nan, 2);  // the 4th super-block's d
  const std::string bad = (dir / "bad.gguf").string();
  std::ofstream(bad, std::ios::binary) << bytes;
  io::GgufReader r(bad);
  EXPECT_XG_ERROR(r.read("blk.0.ffn_gate.weight"), bad + ": tensor 'blk.0.ffn_gate.weight' element 768 is nan");
  // and read as stored (--base-dtype auto), the super-block itself is named
  EXPECT_XG_ERROR(r.read_into("blk.0.ffn_gate.weight", empty(t.shape, kQ4_K)),
                  bad + ": tensor 'blk.0.ffn_gate.weight' elements 768..1023 (a Q4_K block) have a scale that is NaN or Inf");
  // the min's scale (dmin, the half after d) counts as much
  std::string min_bytes = test::slurp(src.string());
  std::memcpy(&min_bytes[good.file_offset(t.name) + 5 * 144 + 2], &nan, 2);
  const std::string bad_min = (dir / "bad_min.gguf").string();
  std::ofstream(bad_min, std::ios::binary) << min_bytes;
  io::GgufReader rm(bad_min);
  EXPECT_XG_ERROR(rm.read_into("blk.0.ffn_gate.weight", empty(t.shape, kQ4_K)),
                  "elements 1280..1535 (a Q4_K block) have a scale that is NaN or Inf");
  EXPECT_XG_ERROR(io::save_gguf((dir / "out.gguf").string(), {}, {{"w", zeros({2, 256}), io::GgmlType::Q4_K}}),
                  "save_gguf: tensor 'w': xgrad writes F32, F16, BF16, Q8_0 and Q4_0, not Q4_K");
  EXPECT_FALSE(fs::exists(dir / "out.gguf"));
}

}  // namespace
}  // namespace xg

// GGUF models (nn/gguf_model.hpp) against llama.cpp itself: the files xgrad exports are the
// files llama.cpp evaluated (tests/fixtures/gguf/expected.json, made by gen_gguf.sh with
// node-llama-cpp), xgrad's next-token log-probs equal llama.cpp's within 1e-4 at 256 positions,
// greedy tokens are identical, and the GGUFs llama.cpp itself wrote read back to its logits.
#include "nn/gguf_model.hpp"

#include "finetune/base_model.hpp"
#include "finetune/gguf_export.hpp"
#include "nn/hf.hpp"
#include "tests/gguf_test_util.hpp"
#include "tests/torch_fixture.hpp"

namespace xg {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> gguf_ids_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

// xgrad's log-probs on `model` against a case's, within tol; prints the worst position.
void expect_logprobs(nn::DecoderLM& model, const nlohmann::json& c, double tol) {
  const std::vector<double> want = c.at("logprobs").get<std::vector<double>>();
  const std::vector<double> got = test::gguf_logprobs(model, gguf_ids_of(c.at("ids")), c.at("window"), 256);
  ASSERT_EQ(got.size(), want.size());
  const test::GgufWorst w = test::gguf_worst(got, want);
  EXPECT_LE(w.diff, tol) << "position " << w.at << ": xgrad " << got[w.at] << ", llama.cpp " << want[w.at];
  std::printf("  %s vs llama.cpp: max |d log p| = %.2e over 256 positions\n", c.at("model").get<std::string>().c_str(), w.diff);
}

TEST(NnGgufModel, ExportsAreTheFilesLlamaCppEvaluatedAndMatchItsLogprobs) {
  const fs::path dir = test::fresh_test_dir();
  const std::string text = test::gguf_expected().at("text");
  for (const char* name : {"trained", "llama3", "qwen2", "qwen3"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& c = test::gguf_case(name);
    const fs::path folder = test::gguf_source_folder(name, dir);
    finetune::BaseModel src = finetune::load_base(folder.string(), "test");
    const fs::path gguf = dir / (std::string(name) + ".gguf");
    nn::GgufExportOptions o;
    o.name = name;  // xg-export's default: the base's folder name
    finetune::save_gguf_model(*src.model, io::ModelSource::open(folder.string()), gguf.string(), o);
    EXPECT_EQ(test::gguf_fnv1a64(gguf), c.at("model_fnv1a64").get<std::string>()) << "not the file llama.cpp evaluated";

    const std::vector<int64_t> ids = gguf_ids_of(c.at("ids"));
    std::vector<int64_t> mine = src.tokenizer->encode(text, false);
    ASSERT_GE(mine.size(), ids.size());
    mine.resize(ids.size());
    EXPECT_EQ(mine, ids) << "the source folder's tokenizer";
    expect_logprobs(*src.model, c, 1e-4);
    const std::vector<int64_t> prompt = gguf_ids_of(c.at("prompt")), greedy = gguf_ids_of(c.at("greedy"));
    EXPECT_EQ(test::gguf_greedy(*src.model, prompt, 32), greedy);

    // The GGUF read back: its tokenizer and model are llama.cpp's too.
    finetune::BaseModel back = finetune::load_base(gguf.string(), "test");
    std::vector<int64_t> again = back.tokenizer->encode(text, false);
    again.resize(ids.size());
    EXPECT_EQ(again, ids) << "the GGUF's tokenizer";
    expect_logprobs(*back.model, c, 1e-4);
    EXPECT_EQ(test::gguf_greedy(*back.model, prompt, 32), greedy);
  }
}

// A GGUF llama.cpp itself wrote (llama_model_quantize: an F32 copy, Q8_0 and Q4_0) read by xgrad.
TEST(NnGgufModel, FilesLlamaCppWroteReadBackToItsLogprobs) {
  for (const char* name : {"trained_llamacpp_f32", "trained_llamacpp_q8_0", "trained_llamacpp_q4_0"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& c = test::gguf_case(name);
    const fs::path file = test::gguf_fixture(std::string(name) + ".gguf");
    EXPECT_EQ(test::gguf_fnv1a64(file), c.at("model_fnv1a64").get<std::string>());
    finetune::BaseModel m = finetune::load_base(file.string(), "test");
    // NOTE: llama.cpp's CPU kernels quantize the activations to Q8 as well before a Q8_0 or Q4_0
    // product (ggml's vec_dot_q8_0_q8_0, vec_dot_q4_0_q8_0); xgrad multiplies the dequantized
    // weights in float32. So these agree to the activations' rounding only, F32 to float32's.
    const bool q8 = std::string(name).find("_q") != std::string::npos;
    expect_logprobs(*m.model, c, q8 ? 0.05 : 1e-4);
    if (q8) {  // the dequantized weights are what brings xgrad to llama.cpp's values
      finetune::BaseModel f32 = finetune::load_base(test::gguf_fixture("trained_llamacpp_f32.gguf").string(), "test");
      const std::vector<double> want = c.at("logprobs").get<std::vector<double>>();
      const double from_q8 = test::gguf_worst(test::gguf_logprobs(*m.model, gguf_ids_of(c.at("ids")), c.at("window"), 256), want).diff;
      const double from_f32 = test::gguf_worst(test::gguf_logprobs(*f32.model, gguf_ids_of(c.at("ids")), c.at("window"), 256), want).diff;
      std::printf("  %s's log-probs: %.2e from xgrad's read of it, %.2e from the F32 weights\n", name, from_q8, from_f32);
      EXPECT_LT(from_q8, from_f32);
    }
    if (!q8) {
      EXPECT_EQ(test::gguf_greedy(*m.model, gguf_ids_of(c.at("prompt")), 32), gguf_ids_of(c.at("greedy")));
    }
  }
  // Q8_0 dequantized is the original within half a quantization step, d / 2 = max|x| / 254 per
  // block, plus the rounding of d to half precision (times |q| <= 127: max|x| / 2048).
  io::GgufReader q(test::gguf_fixture("trained_llamacpp_q8_0.gguf").string()), f(test::gguf_fixture("trained_llamacpp_f32.gguf").string());
  EXPECT_EQ(q.tensor("blk.0.attn_q.weight").type, io::GgmlType::Q8_0);
  const Tensor a = q.read("blk.0.attn_q.weight"), b = f.read("blk.0.attn_q.weight");
  for (int64_t blk = 0; blk < a.numel() / kQ8Block; ++blk) {
    float amax = 0, worst = 0;
    for (int64_t j = 0; j < kQ8Block; ++j) {
      amax = std::max(amax, std::fabs(b.data<float>()[blk * kQ8Block + j]));
      worst = std::max(worst, std::fabs(a.data<float>()[blk * kQ8Block + j] - b.data<float>()[blk * kQ8Block + j]));
    }
    ASSERT_LE(worst, amax / 254 + amax / 2048 + 1e-7f) << "block " << blk;
  }
}

// xgrad's F16 and Q8_0 exports: llama.cpp read the same files, and xgrad reading them back
// gives llama.cpp's log-probs to the precision llama.cpp computes them in (it rounds the
// activations to F16 / 8 bits before those products).
TEST(NnGgufModel, HalfAndBlockExportsReadByBothRuntimesAlike) {
  const fs::path dir = test::fresh_test_dir();
  finetune::BaseModel src = finetune::load_base(test::gguf_fixture("trained").string(), "test");
  for (const auto& [name, type, tol] : {std::tuple<const char*, io::GgmlType, double>{"trained_f16", io::GgmlType::F16, 2e-3},
                                        {"trained_q8_0", io::GgmlType::Q8_0, 0.05},
                                        {"trained_q4_0", io::GgmlType::Q4_0, 0.05}}) {
    SCOPED_TRACE(name);
    const nlohmann::json& c = test::gguf_case(name);
    nn::GgufExportOptions o;
    o.name = "trained";
    o.dtype = type;
    const fs::path gguf = dir / (std::string(name) + ".gguf");
    finetune::save_gguf_model(*src.model, io::ModelSource::open(test::gguf_fixture("trained").string()), gguf.string(), o);
    EXPECT_EQ(test::gguf_fnv1a64(gguf), c.at("model_fnv1a64").get<std::string>()) << "not the file llama.cpp evaluated";
    finetune::BaseModel back = finetune::load_base(gguf.string(), "test");
    expect_logprobs(*back.model, c, tol);
  }
  // xgrad's Q8_0 blocks are ggml's: every tensor of llama.cpp's own Q8_0 rewrite has the type and
  // the values of xgrad's.
  io::GgufReader mine((dir / "trained_q8_0.gguf").string()), theirs(test::gguf_fixture("trained_llamacpp_q8_0.gguf").string());
  ASSERT_EQ(mine.tensors().size(), theirs.tensors().size());
  for (const io::GgufTensorInfo& t : theirs.tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(mine.tensor(t.name).type, t.type);
    EXPECT_TRUE(test::tensors_close(mine.read(t.name), theirs.read(t.name), 0, 0));
  }
  // And its Q4_0 blocks: llama.cpp's Q4_0 rewrite stores the head (output.weight, rows of 32 values:
  // not whole 256-value K blocks) as Q8_0, as llama_model_quantize does; every tensor it stored as
  // Q4_0 is byte for byte the block xgrad's quantizer writes from the same float32 values.
  io::GgufReader mine4((dir / "trained_q4_0.gguf").string());
  io::GgufReader theirs4(test::gguf_fixture("trained_llamacpp_q4_0.gguf").string());
  io::GgufReader f32(test::gguf_fixture("trained_llamacpp_f32.gguf").string());
  int q4_tensors = 0;
  for (const io::GgufTensorInfo& t : theirs4.tensors()) {
    SCOPED_TRACE(t.name);
    if (t.type != io::GgmlType::Q4_0) continue;
    ++q4_tensors;
    EXPECT_EQ(mine4.tensor(t.name).type, io::GgmlType::Q4_0);
    Tensor a = empty(t.shape, kQ4_0), b = empty(t.shape, kQ4_0);
    mine4.read_into(t.name, a);
    theirs4.read_into(t.name, b);
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), storage_bytes(kQ4_0, a.numel())), 0);
    const Tensor c = f32.read(t.name).to(kQ4_0);  // xgrad's quantizer on llama.cpp's F32 copy
    EXPECT_EQ(std::memcmp(c.raw_data(), b.raw_data(), storage_bytes(kQ4_0, c.numel())), 0);
  }
  EXPECT_EQ(q4_tensors, 15);
  EXPECT_EQ(theirs4.tensor("output.weight").type, io::GgmlType::Q8_0);
}

// Llama 3.1's RoPE scaling from a file llama.cpp's converter wrote (rope_freqs.weight, no keys):
// Meta's parameters are recognised from the divisors; other divisors are refused by name.
TEST(NnGgufModel, Llama31RopeFreqsWithoutXgradKeys) {
  const fs::path dir = test::fresh_test_dir();
  nn::LMConfig c;
  c.vocab_size = 64;
  c.n_layers = 1;
  c.block = nn::BlockConfig::llama(64, 2, 1);  // head_dim 32: wavelengths on both sides of 8192 / 4 and 8192
  c.block.rope_base = 500000;
  c.block.max_seq_len = 256;
  c.block.rope_scaling.kind = RopeScalingKind::Llama3;
  c.block.rope_scaling.factor = 8;  // Llama 3.1's: low 1, high 4, original 8192
  manual_seed(3);
  nn::DecoderLM model(c);
  const auto without_keys = [&](const nn::DecoderLM& m, const std::string& name) {
    io::GgufMetadata meta;
    for (auto& kv : nn::gguf_model_metadata(m))
      if (kv.first.rfind("xgrad.", 0) != 0) meta.push_back(kv);
    const std::string p = (dir / name).string();
    io::save_gguf(p, meta, nn::gguf_model_tensors(m));
    return p;
  };
  io::GgufReader f(without_keys(model, "meta.gguf"));
  auto back = nn::load_gguf_model(f);
  EXPECT_EQ(back->config().block.rope_scaling.original_max_seq_len, 8192);
  const Tensor tokens = from_vector(std::vector<int64_t>{1, 5, 9, 2, 60, 33}, {1, 6});
  NoGradGuard no_grad;
  EXPECT_TRUE(test::tensors_close((*back)(tokens), model(tokens), 1e-6, 1e-6));
  c.block.rope_scaling.original_max_seq_len = 64;  // not Meta's
  nn::DecoderLM other(c);
  io::GgufReader g(without_keys(other, "other.gguf"));
  EXPECT_XG_ERROR(nn::load_gguf_model(g), "of Llama 3.1's scaling (factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192)");
}

// convert_hf_to_gguf.py's LlamaModel.permute, restated: w.reshape(n_head, 2, hs / 2, in)
// .swapaxes(1, 2).reshape(w.shape), i.e. GGUF row h*hs + 2i + j is HF row h*hs + j*hs/2 + i.
Tensor gguf_converter_permute(const Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), in = w.size(1), hs = rows / heads;
  Tensor out = empty(w.shape(), kFloat32);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hs / 2; ++i)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t c = 0; c < in; ++c)
          out.data<float>()[(h * hs + 2 * i + j) * in + c] = w.data<float>()[(h * hs + j * hs / 2 + i) * in + c];
  return out;
}

TEST(NnGgufModel, LlamaPermutesQKRowsAsTheConverterAndQwenKeepsThem) {
  const fs::path dir = test::fresh_test_dir();
  for (const char* name : {"llama3", "qwen3"}) {
    SCOPED_TRACE(name);
    const fs::path folder = test::gguf_source_folder(name, dir);
    auto model = nn::load_hf(folder.string());
    const std::string arch = nn::gguf_architecture(model->config());
    EXPECT_EQ(arch, name == std::string("llama3") ? "llama" : "qwen3");
    std::map<std::string, Tensor> gguf;
    for (const io::GgufTensorData& t : nn::gguf_model_tensors(*model)) gguf[t.name] = t.data;
    // The HF checkpoint's tensors (load_hf reads them unpermuted, as tests/test_nn_hf.cpp checks).
    const TensorMap st = model->state_dict(nn::NamingScheme::get("hf_llama"));
    const auto& gqa = std::get<nn::GQASpec>(model->config().block.attention);
    for (const auto& [hf, g, heads] : {std::tuple<const char*, const char*, int64_t>{"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", gqa.n_heads},
                                       {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", gqa.n_kv_heads},
                                       {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight", 0}}) {
      const Tensor w = st.at(hf);
      const Tensor want = arch == "llama" && heads > 0 ? gguf_converter_permute(w, heads) : w;
      EXPECT_TRUE(test::tensors_close(gguf.at(g), want, 0, 0)) << g;
      if (arch == "llama" && heads > 0) {
        EXPECT_FALSE(test::tensors_close(gguf.at(g), w, 1e-6, 1e-6)) << g << " must be permuted";
      }
    }
  }
}

TEST(NnGgufModel, ModelsLlamaCppCannotRunAreRefusedByName) {
  nn::LMConfig c;
  c.vocab_size = 16;
  c.block = nn::BlockConfig::teaching(8, 2);
  EXPECT_XG_ERROR(nn::gguf_architecture(c), "norm_position pre");
  EXPECT_XG_ERROR(nn::gguf_naming("falcon"), "architecture 'falcon' is not supported");
  // A file of another architecture.
  const fs::path dir = test::fresh_test_dir();
  const std::string path = (dir / "falcon.gguf").string();
  io::save_gguf(path, {{"general.architecture", io::GgufValue::string("falcon")}}, {});
  io::GgufReader f(path);
  EXPECT_XG_ERROR(nn::load_gguf_model(f), "general.architecture 'falcon' is not supported");
  // The llama.cpp-written model with a tensor left out, or one too many.
  io::GgufReader good(test::gguf_fixture("trained_llamacpp_f32.gguf").string());
  std::vector<io::GgufTensorData> tensors;
  for (const io::GgufTensorInfo& t : good.tensors()) tensors.push_back({t.name, good.read(t.name), io::GgmlType::F32});
  const auto rewrite = [&](const std::vector<io::GgufTensorData>& ts) {
    const std::string p = (dir / "edited.gguf").string();
    io::save_gguf(p, good.metadata(), ts);
    return p;
  };
  std::vector<io::GgufTensorData> fewer;
  for (const io::GgufTensorData& t : tensors)
    if (t.name != "blk.1.ffn_up.weight") fewer.push_back(t);
  io::GgufReader missing(rewrite(fewer));
  EXPECT_XG_ERROR(nn::load_gguf_model(missing), "edited.gguf: tensor 'blk.1.ffn_up.weight' is missing (llama with this metadata)");
  std::vector<io::GgufTensorData> more = tensors;
  more.push_back({"blk.0.ffn_gate_exps.weight", tensors[0].data, io::GgmlType::F32});
  io::GgufReader extra(rewrite(more));
  EXPECT_XG_ERROR(nn::load_gguf_model(extra), "tensor 'blk.0.ffn_gate_exps.weight' is not part of a llama model with this metadata");
  io::GgufMetadata meta = good.metadata();
  for (auto& [k, v] : meta)
    if (k == "llama.feed_forward_length") v = io::GgufValue::u32(1 << 30);
  const std::string wide = (dir / "wide.gguf").string();
  io::save_gguf(wide, meta, tensors);
  io::GgufReader w(wide);
  EXPECT_XG_ERROR(nn::load_gguf_model(w), "tensor 'blk.0.ffn_gate.weight' has shape [64,32], the metadata gives [1073741824,32]");
}

}  // namespace
}  // namespace xg

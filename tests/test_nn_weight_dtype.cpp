// Frozen bases in low precision (nn/weight_dtype.hpp): Hugging Face folders and GGUF files read
// straight into bf16 or q8_0 matrices (never through a whole float32 copy), the logits and the
// LoRA gradients of such a model against a float32 model holding the same (widened) values, and
// a NaN or Inf in a low-precision file refused at load naming the file, the tensor and the
// element (these loaded silently before).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "finetune/lora.hpp"
#include "io/gguf.hpp"
#include "io/read_file.hpp"
#include "io/safetensors.hpp"
#include "nn/gguf_model.hpp"
#include "nn/hf.hpp"
#include "nn/weight_dtype.hpp"
#include "tests/cli_run.hpp"
#include "tests/torch_fixture.hpp"

namespace test_nn_weight_dtype {

using namespace xg;
namespace fs = std::filesystem;

std::string hf_folder(const std::string& name) { return std::string(XGRAD_FIXTURE_DIR) + "/hf/" + name; }

Tensor eval_logits(nn::DecoderLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  return model(tokens);
}

Tensor some_tokens() { return from_vector(std::vector<int64_t>{3, 17, 250, 9, 42, 42, 7, 128}, {2, 4}); }

// A float32 copy of `model` whose parameters hold `model`'s values widened.
std::shared_ptr<nn::DecoderLM> widened_copy(const nn::DecoderLM& model) {
  auto copy = std::make_shared<nn::DecoderLM>(model.config());
  TensorMap state;
  for (const auto& [name, t] : model.state_dict()) state.emplace(name, t.dtype() == kFloat32 ? t : t.to(kFloat32));
  copy->load_state_dict(state, true);
  return copy;
}

// A safetensors file with these tensors' raw bytes as given (no xgrad checksum, as the Hub's).
struct RawTensor {
  std::string dtype;
  Shape shape;
  std::string bytes;
};
void write_raw_safetensors(const fs::path& path, const std::map<std::string, RawTensor>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t at = 0;
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.bytes.size()}}};
    at += t.bytes.size();
    data += t.bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << h << data;
}

std::string bf16_bytes(const Tensor& t) {
  const Tensor b = t.to(kBFloat16);
  return std::string(static_cast<const char*>(b.raw_data()), static_cast<std::size_t>(b.numel()) * 2);
}

::testing::AssertionResult throws_naming(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const std::string& p : parts)
      if (m.find(p) == std::string::npos) return ::testing::AssertionFailure() << "'" << m << "' does not name " << p;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no error";
}

TEST(WeightDtype, HfFolderLoadsIntoBf16F16Q8_0AndQ4_0Matrices) {
  const auto f32 = nn::load_hf(hf_folder("llama3"));
  for (const nn::WeightDtype wd :
       {nn::WeightDtype::BF16, nn::WeightDtype::F16, nn::WeightDtype::Q8_0, nn::WeightDtype::Q4_0}) {
    SCOPED_TRACE(nn::weight_dtype_name(wd));
    const Dtype d = nn::weight_dtype_tensor(wd);
    nn::LoadOptions opts;
    opts.weights = wd;
    const auto low = nn::load_hf(hf_folder("llama3"), nullptr, opts);
    const TensorMap a = f32->state_dict(), b = low->state_dict();
    const std::vector<std::string> matrices = nn::weight_matrix_names(*low, d);
    ASSERT_FALSE(matrices.empty());
    for (const auto& [name, t] : b) {
      const bool matrix = std::find(matrices.begin(), matrices.end(), name) != matrices.end();
      EXPECT_EQ(t.dtype(), matrix ? d : kFloat32) << name;
      EXPECT_FALSE(matrix && t.requires_grad()) << name;
      if (matrix)  // exactly the float32 file's values rounded or quantized
        EXPECT_EQ(std::memcmp(t.raw_data(), a.at(name).to(d).raw_data(), storage_bytes(d, t.numel())), 0) << name;
      else
        EXPECT_TRUE(test::tensors_close(t, a.at(name), 0, 0)) << name;
    }
    EXPECT_TRUE(low->widen_embeddings());
    // The low-precision model computes what a float32 model of its (widened) values computes:
    // q8_0 and q4_0 exactly up to the sums' order; bf16 rounds the products' other operand too, as autocast
    // does. (Autocast on bf16 kernels also runs attention's products in bf16; the bf16 weights
    // alone leave attention in float32, as autocast on the widened kernels does.)
    const auto wide = widened_copy(*low);
    Tensor expected;
    if (d == kBFloat16) {
      test::Bf16GemmScope widened(Bf16Gemm::Widened);
      autocast bf16;
      expected = eval_logits(*wide, some_tokens());
    } else {
      expected = eval_logits(*wide, some_tokens());
    }
    EXPECT_TRUE(test::tensors_close(eval_logits(*low, some_tokens()), expected, 1e-4, 1e-4));
  }
}

TEST(WeightDtype, AutoKeepsABf16FoldersMatricesInBf16) {
  nn::LoadOptions opts;
  opts.weights = nn::WeightDtype::Auto;
  const auto low = nn::load_hf(hf_folder("qwen3"), nullptr, opts);  // torch_dtype bfloat16
  EXPECT_EQ(low->tok_embeddings()->weight().dtype(), kBFloat16);
  const auto f32 = nn::load_hf(hf_folder("qwen3"));
  EXPECT_EQ(f32->tok_embeddings()->weight().dtype(), kFloat32);  // the library's default widens
  io::SafetensorsReader reader(hf_folder("qwen3") + "/model.safetensors");
  for (const std::string& name : nn::weight_matrix_names(*low)) EXPECT_EQ(low->state_dict().at(name).dtype(), kBFloat16);
  // and a float32 folder stays float32 under auto
  const auto auto32 = nn::load_hf(hf_folder("llama3"), nullptr, opts);
  EXPECT_EQ(auto32->tok_embeddings()->weight().dtype(), kFloat32);
}

// A float16 folder (torch_dtype "float16", F16 tensors, as many Hub checkpoints are) keeps its
// matrices as float16 under auto, as stored: 2 bytes a value and every bit of each, where the
// float32 default takes 4 and bf16 would round off 3 bits.
TEST(WeightDtype, AutoKeepsAFloat16FoldersMatricesInFloat16) {
  const fs::path dir = test::fresh_test_dir();
  const std::string source = hf_folder("llama_linear");  // float32, one model.safetensors
  nlohmann::json config = nlohmann::json::parse(io::read_file(source + "/config.json", "test"));
  config["torch_dtype"] = "float16";
  std::ofstream(dir / "config.json") << config.dump();
  std::map<std::string, RawTensor> raw;
  io::SafetensorsReader reader(source + "/model.safetensors");
  for (const auto& [name, e] : reader.entries()) {
    std::string bytes;
    for (double v : reader.read(name).to_vector()) {
      const uint16_t h = float_to_half(static_cast<float>(v));
      bytes.append(reinterpret_cast<const char*>(&h), 2);
    }
    raw[name] = {"F16", e.shape, bytes};
  }
  write_raw_safetensors(dir / "model.safetensors", raw);
  nn::LoadOptions opts;
  opts.weights = nn::WeightDtype::Auto;
  const auto low = nn::load_hf(dir.string(), nullptr, opts);
  const std::vector<std::string> matrices = nn::weight_matrix_names(*low, kF16);
  ASSERT_FALSE(matrices.empty());
  for (const std::string& name : matrices) EXPECT_EQ(low->state_dict().at(name).dtype(), kF16) << name;
  // The same values as the float32 default's load of that folder (which widens each half
  // exactly, so these are the file's halves), and the same logits.
  const auto wide = nn::load_hf(dir.string());
  for (const std::string& name : matrices) {
    EXPECT_EQ(wide->state_dict().at(name).dtype(), kFloat32);
    EXPECT_TRUE(test::tensors_close(low->state_dict().at(name).to(kFloat32), wide->state_dict().at(name), 0, 0)) << name;
  }
  EXPECT_TRUE(test::tensors_close(eval_logits(*low, some_tokens()), eval_logits(*wide, some_tokens()), 1e-4, 1e-4));
  EXPECT_LT(nn::store_weights_in(*nn::load_hf(dir.string(), nullptr, opts), kF16), 0.6 * nn::store_weights_in(*wide, kFloat32));
}

TEST(WeightDtype, LoraGradientsOnALowPrecisionBaseEqualThoseOnItsWidenedValues) {
  for (const Dtype d : {kBFloat16, kF16, kQ8_0, kQ4_0}) {
    SCOPED_TRACE(dtype_name(d));
    auto low = nn::load_hf(hf_folder("llama3"));
    nn::store_weights_in(*low, d);
    auto wide = widened_copy(*low);
    finetune::LoRAConfig lc;
    lc.r = 4;
    lc.targets = "q,v,down";
    Generator g1(7), g2(7);
    finetune::inject_lora(*low, lc, g1);
    finetune::inject_lora(*wide, lc, g2);
    for (auto* m : {low.get(), wide.get()})  // B nonzero, so that the adapters' own products matter
      for (auto& [name, p] : finetune::named_lora_parameters(*m))
        if (name.find("lora_B") != std::string::npos) {
          NoGradGuard no_grad;
          p.copy_(test::randn64(p.shape(), 3).detach().to(kFloat32) * 0.1);
        }
    // Under autocast both round every product's operands (the bf16 base's products round the
    // other operand whether or not autocast is on, the adapters' products only under it).
    const Tensor tokens = some_tokens();
    {
      std::optional<autocast> bf16;
      if (d == kBFloat16) bf16.emplace();
      low->forward(tokens).sum().backward();
      wide->forward(tokens).sum().backward();
    }
    const nn::NamedTensors a = finetune::named_lora_parameters(*low), b = finetune::named_lora_parameters(*wide);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].second.dtype(), kFloat32) << a[i].first;  // adapters train in float32
      EXPECT_TRUE(test::tensors_close(a[i].second.grad(), b[i].second.grad(), 1e-3, 1e-4)) << a[i].first;
    }
  }
}

TEST(WeightDtype, ANanInALowPrecisionSafetensorsIsRefusedAtLoad) {
  const fs::path dir = test::fresh_test_dir();
  Tensor w = test::randn64({2, 64}, 1).detach().to(kFloat32);
  std::string bf = bf16_bytes(w);
  const uint16_t nan_bits = 0x7fc0;
  std::memcpy(&bf[2 * 37], &nan_bits, 2);
  Tensor h = test::randn64({2, 32}, 2).detach().to(kFloat32);
  std::string f16(static_cast<std::size_t>(h.numel()) * 2, '\0');
  for (int64_t i = 0; i < h.numel(); ++i) {
    const uint16_t v = i == 5 ? 0x7c00 : float_to_half(h.data<float>()[i]);  // element 5: +Inf
    std::memcpy(&f16[2 * i], &v, 2);
  }
  const fs::path file = dir / "weights.safetensors";
  write_raw_safetensors(file, {{"layer.w", {"BF16", {2, 64}, bf}}, {"layer.h", {"F16", {2, 32}, f16}}});
  io::SafetensorsReader reader(file.string());
  for (const Dtype d : {kFloat32, kBFloat16, kQ8_0, kQ4_0}) {
    SCOPED_TRACE(dtype_name(d));
    EXPECT_TRUE(throws_naming([&] { reader.read_into("layer.w", empty({2, 64}, d)); },
                              {file.string(), "'layer.w'", "element 37", "nan"}));
    EXPECT_TRUE(throws_naming([&] { reader.read_into("layer.h", empty({2, 32}, d)); },
                              {"'layer.h'", "element 5", "inf"}));
  }
  EXPECT_TRUE(throws_naming([&] { reader.read_into("layer.w", empty({2, 64}, kFloat64)); }, {"element 37"}));
}

TEST(WeightDtype, ANanInAnHfFoldersBf16WeightIsRefusedByLoadHf) {
  // qwen3's folder with one weight of its BF16 file set to NaN: refused whatever the dtype asked for.
  const fs::path dir = test::fresh_test_dir();
  for (const char* f : {"config.json"}) fs::copy_file(hf_folder("qwen3") + "/" + f, dir / f);
  const TensorMap tensors = io::load_safetensors(hf_folder("qwen3") + "/model.safetensors");
  std::map<std::string, RawTensor> raw;
  for (const auto& [name, t] : tensors) raw[name] = {"BF16", t.shape(), bf16_bytes(t)};
  const std::string bad = "model.layers.1.mlp.up_proj.weight";
  const uint16_t nan_bits = 0xffc0;
  std::memcpy(&raw.at(bad).bytes[2 * 70], &nan_bits, 2);
  write_raw_safetensors(dir / "model.safetensors", raw);
  for (const nn::WeightDtype wd : {nn::WeightDtype::Auto, nn::WeightDtype::F32, nn::WeightDtype::Q8_0,
                                   nn::WeightDtype::Q4_0}) {
    nn::LoadOptions opts;
    opts.weights = wd;
    EXPECT_TRUE(throws_naming([&] { nn::load_hf(dir.string(), nullptr, opts); }, {"'" + bad + "'", "element 70", "nan"}))
        << nn::weight_dtype_name(wd);
  }
}

// A model exported as a Q8_0 or Q4_0 GGUF (no tokenizer: load_gguf_model reads the model's
// metadata only).
fs::path write_blocked_gguf(const nn::DecoderLM& model, io::GgmlType type, const fs::path& dir) {
  nn::GgufExportOptions o;
  o.dtype = type;
  const fs::path path = dir / "model.gguf";
  io::save_gguf(path.string(), nn::gguf_model_metadata(model, o), nn::gguf_model_tensors(model, o));
  return path;
}

TEST(WeightDtype, ABlockedGgufLoadsAsItsBlocksAndANanScaleIsRefused) {
  const auto model = nn::load_hf(hf_folder("qwen3"));  // qwen3: no RoPE permutation on export
  for (const io::GgmlType type : {io::GgmlType::Q8_0, io::GgmlType::Q4_0, io::GgmlType::F16}) {
    SCOPED_TRACE(io::ggml_type_name(type));
    const Dtype d = type == io::GgmlType::F16 ? kF16 : io::block_dtype(type);  // F16: halves as stored
    const fs::path path = write_blocked_gguf(*model, type, test::fresh_test_dir());
    io::GgufReader file(path.string());
    nn::LoadOptions opts;
    opts.weights = nn::WeightDtype::Auto;
    const auto low = nn::load_gguf_model(file, opts);
    const std::string q = "layers.0.attention.w_q.weight";
    const Tensor wq = low->state_dict().at(q);
    ASSERT_EQ(wq.dtype(), d);
    // the file's blocks as they are: the float32 weight quantized as the export quantized it
    EXPECT_EQ(std::memcmp(wq.raw_data(), model->state_dict().at(q).to(d).raw_data(), storage_bytes(d, wq.numel())), 0);
    const auto f32 = nn::load_gguf_model(file);  // widened: exactly the blocks' values
    EXPECT_TRUE(test::tensors_close(f32->state_dict().at(q), wq.to(kFloat32), 0, 0));
    EXPECT_TRUE(test::tensors_close(eval_logits(*low, some_tokens()), eval_logits(*f32, some_tokens()), 1e-4, 1e-4));

    // One block's half scale set to NaN, then to +Inf: refused naming the tensor and the block.
    const uint64_t at = file.file_offset("blk.1.ffn_up.weight") + 3 * static_cast<uint64_t>(block_bytes(d));  // the 4th
    for (const uint16_t scale : {uint16_t{0x7e00}, uint16_t{0x7c00}}) {
      fs::copy_file(path, path.string() + ".bad", fs::copy_options::overwrite_existing);
      {
        std::fstream f(path.string() + ".bad", std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(static_cast<std::streamoff>(at));
        f.write(reinterpret_cast<const char*>(&scale), 2);
      }
      io::GgufReader bad(path.string() + ".bad");
      for (const nn::WeightDtype wd : {nn::WeightDtype::Auto, nn::WeightDtype::F32, nn::WeightDtype::BF16}) {
        opts.weights = wd;
        EXPECT_TRUE(throws_naming([&] { nn::load_gguf_model(bad, opts); }, {"'blk.1.ffn_up.weight'", "96"}))
            << nn::weight_dtype_name(wd) << " scale " << scale;
      }
    }
  }
}

}  // namespace test_nn_weight_dtype

// What the Hugging Face folder tests share (tests/test_nn_hf.cpp, test_nn_hf_arch.cpp, the GGUF
// and PEFT tests of those architectures): the fixture folders, eval logits, greedy generation
// against a fixture's PyTorch ids, and the fixture folders made runnable.
#pragma once

#include <filesystem>
#include <string>

#include "tests/torch_fixture.hpp"

namespace xg::test {

// A torch-made Hugging Face folder of tests/fixtures/hf.
inline std::string hf_fixture_folder(const std::string& name) {
  return std::string(XGRAD_FIXTURE_DIR) + "/hf/" + name;
}

// The model's logits for tokens, in eval mode and without a graph.
inline Tensor eval_logits(nn::DecoderLM& model, const Tensor& tokens) {
  NoGradGuard no_grad;
  nn::EvalModeGuard eval(model);
  return model(tokens);
}

// The model's greedy generation of 32 tokens from fx's <name>.prompt is fx's <name>.generated,
// token for token.
inline void expect_greedy_like_torch(nn::DecoderLM& model, const TensorMap& fx, const std::string& name) {
  nn::GenerateOptions greedy;
  greedy.temperature = 0;
  const Tensor out = model.generate(fx.at(name + ".prompt"), 32, greedy);
  const Tensor expected = fx.at(name + ".generated");
  ASSERT_EQ(out.shape(), expected.shape());
  for (int64_t i = 0; i < out.numel(); ++i)
    EXPECT_EQ(out.data<int64_t>()[i], expected.data<int64_t>()[i]) << name << ": position " << i;
}

// <d>/<name>: the HF fixture folder tests/fixtures/hf/<name> with the byte-level tokenizer files
// of tests/fixtures/gguf/byte256 beside it, a base xg-finetune and xg-generate take.
inline std::filesystem::path byte_tokenizer_folder(const std::filesystem::path& d, const std::string& name) {
  const std::filesystem::path fx = XGRAD_FIXTURE_DIR, out = d / name;
  std::filesystem::create_directories(out);
  for (const char* f : {"config.json", "model.safetensors"}) std::filesystem::copy_file(fx / "hf" / name / f, out / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(fx / "gguf" / "byte256" / f, out / f);
  return out;
}

}  // namespace xg::test

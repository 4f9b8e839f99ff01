// io/model_source.cpp: what a model path is, told once (Hugging Face folder, sharded or not, a Hub
// cache folder, an xgrad folder, a GGUF file), the files and stored dtypes found, and the
// one-line errors for anything else; the loaders (nn::load_model, text::load_tokenizer,
// text::load_chat_template) read the same source.
#include <filesystem>
#include <fstream>

#include "io/model_source.hpp"
#include "nn/hf.hpp"
#include "tests/cli_run.hpp"
#include "tests/gguf_test_util.hpp"
#include "tests/torch_fixture.hpp"
#include "text/chat_template.hpp"
#include "text/tokenizer.hpp"

namespace xg {
namespace {

namespace fs = std::filesystem;
using io::ModelFormat;
using io::ModelSource;
using test::fresh_test_dir;

std::string source_fixture(const std::string& sub) { return std::string(XGRAD_FIXTURE_DIR) + "/" + sub; }

// An HF folder with a tokenizer and a chat template: qwen3's config and weights beside the
// byte256 tokenizer files.
fs::path hf_folder_with_tokenizer(const fs::path& dir) {
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(source_fixture("hf/qwen3/") + f, dir / f, fs::copy_options::overwrite_existing);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(source_fixture("gguf/byte256/") + f, dir / f, fs::copy_options::overwrite_existing);
  std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}";
  return dir;
}

TEST(ModelSource, AHuggingFaceFolderWithItsFilesAndDtypes) {
  const fs::path dir = hf_folder_with_tokenizer(fresh_test_dir() / "qwen3");
  const ModelSource s = ModelSource::open(dir.string());
  EXPECT_EQ(s.format, ModelFormat::HuggingFace);
  EXPECT_EQ(s.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(s.config_file, (dir / "config.json").string());
  EXPECT_EQ(s.tokenizer_file, (dir / "tokenizer.json").string());
  EXPECT_EQ(s.tokenizer_config_file, (dir / "tokenizer_config.json").string());
  EXPECT_EQ(s.chat_template_file, (dir / "chat_template.jinja").string());
  EXPECT_FALSE(s.sharded());
  ASSERT_EQ(s.shards.size(), 1u);
  EXPECT_EQ(s.shards.begin()->first, (dir / "model.safetensors").string());
  ASSERT_TRUE(s.dtypes.count("model.embed_tokens.weight"));
  EXPECT_EQ(s.dtypes.at("model.embed_tokens.weight"), "BF16");  // the fixture is stored as transformers saved it
  EXPECT_EQ(s.gguf, nullptr);
  // The loaders read the same source: the model, its tokenizer, the .jinja template.
  EXPECT_EQ(nn::load_model(s)->config().vocab_size, nn::load_hf(source_fixture("hf/qwen3"))->config().vocab_size);
  EXPECT_EQ(text::load_tokenizer(s)->vocab_size(), text::load_tokenizer(source_fixture("gguf/byte256"))->vocab_size());
  const std::unique_ptr<text::ChatTemplate> chat = text::load_chat_template(s);
  ASSERT_NE(chat, nullptr);
  EXPECT_EQ(chat->render_prompt({{"user", "hi"}}), "<user>hi");
}

TEST(ModelSource, AShardedFolderListsItsShardsAndTheirDtypes) {
  const fs::path dir = fresh_test_dir();
  const auto model = nn::load_hf(source_fixture("hf/qwen3"));
  nn::SaveHFOptions o;
  o.dtype = io::StoredFloat::BFloat16;
  o.max_shard_bytes = 4096;
  nn::save_hf(*model, (dir / "sharded").string(), o);
  const ModelSource s = ModelSource::open((dir / "sharded").string());
  EXPECT_EQ(s.format, ModelFormat::HuggingFace);
  EXPECT_TRUE(s.sharded());
  EXPECT_EQ(s.index_file, (dir / "sharded" / "model.safetensors.index.json").string());
  EXPECT_GT(s.shards.size(), 2u);
  EXPECT_EQ(s.weight_map.size(), s.dtypes.size());
  for (const auto& [name, file] : s.weight_map) {
    EXPECT_TRUE(s.shards.at(file).count(name)) << name;
    EXPECT_EQ(s.dtypes.at(name), "BF16") << name;
  }
  EXPECT_NE(s.describe().find(str_cat(s.shards.size(), " shards, BF16 x ", s.dtypes.size())), std::string::npos)
      << s.describe();
}

TEST(ModelSource, AHubCacheFolderIsReadAsTheSnapshotRefsMainNames) {
  const fs::path cache = fresh_test_dir() / "models--Qwen--Qwen3-tiny";
  hf_folder_with_tokenizer(cache / "snapshots" / "abc123");
  hf_folder_with_tokenizer(cache / "snapshots" / "old456");
  fs::create_directories(cache / "refs");
  std::ofstream(cache / "refs" / "main") << "abc123";
  const ModelSource s = ModelSource::open(cache.string());
  EXPECT_EQ(s.path, cache.string());
  EXPECT_EQ(s.dir, (cache / "snapshots" / "abc123").string());
  EXPECT_EQ(s.format, ModelFormat::HuggingFace);
  EXPECT_EQ(s.config_file, (cache / "snapshots" / "abc123" / "config.json").string());
  EXPECT_EQ(nn::load_model(s)->config().n_layers, nn::load_hf(source_fixture("hf/qwen3"))->config().n_layers);

  std::ofstream(cache / "refs" / "main") << "gone789";
  EXPECT_XG_ERROR(ModelSource::open(cache.string(), "xg-generate"),
                  "xg-generate: " + cache.string() + " is a Hugging Face Hub cache folder whose refs/main names gone789");
  fs::remove(cache / "refs" / "main");
  EXPECT_XG_ERROR(ModelSource::open(cache.string()), "no refs/main and 2 snapshots (give the snapshot's folder)");
  fs::remove_all(cache / "snapshots" / "old456");
  EXPECT_EQ(ModelSource::open(cache.string()).dir, (cache / "snapshots" / "abc123").string());
}

TEST(ModelSource, AnXgradFolderAndAGgufFile) {
  const fs::path dir = fresh_test_dir();
  nn::save_pretrained(*nn::load_hf(source_fixture("hf/qwen3")), (dir / "xgrad").string());
  const ModelSource x = ModelSource::open((dir / "xgrad").string());
  EXPECT_EQ(x.format, ModelFormat::Xgrad);
  EXPECT_EQ(x.architecture, "xgrad");
  EXPECT_TRUE(x.tokenizer_file.empty());
  EXPECT_EQ(x.dtypes.at("tok_embeddings.weight"), "F32");
  EXPECT_EQ(text::load_tokenizer(x)->vocab_size(), 259);
  EXPECT_EQ(text::load_chat_template(x), nullptr);

  const std::string gguf = test::gguf_fixture("trained_llamacpp_q8_0.gguf").string();
  const ModelSource g = ModelSource::open(gguf);
  EXPECT_EQ(g.format, ModelFormat::Gguf);
  ASSERT_NE(g.gguf, nullptr);
  EXPECT_EQ(g.architecture, "llama");
  EXPECT_EQ(g.dtypes.at("token_embd.weight"), "Q8_0");
  EXPECT_EQ(g.dtypes.size(), g.gguf->tensors().size());
  EXPECT_EQ(nn::load_model(g)->config().vocab_size, text::load_tokenizer(g)->vocab_size());
  EXPECT_NE(g.describe().find("GGUF file " + gguf + " (llama, "), std::string::npos) << g.describe();
}

TEST(ModelSource, AnythingElseIsOneLineNamingThePath) {
  const fs::path dir = fresh_test_dir();
  EXPECT_XG_ERROR(ModelSource::open((dir / "absent").string(), "xg-finetune"),
                  "xg-finetune: " + (dir / "absent").string() + " is not a folder or a GGUF file (it does not exist)");
  std::ofstream(dir / "weights.bin") << "not a model";
  EXPECT_XG_ERROR(ModelSource::open((dir / "weights.bin").string()), "is a file but not a GGUF file (no GGUF magic)");
  fs::create_directories(dir / "empty");
  EXPECT_XG_ERROR(ModelSource::open((dir / "empty").string()),
                  "has neither tokenizer.json (a Hugging Face folder) nor config.json (an xgrad folder)");
  // A weight index that names a shard outside the folder, or one the folder lacks.
  const fs::path bad = hf_folder_with_tokenizer(dir / "bad_index");
  fs::remove(bad / "model.safetensors");
  std::ofstream(bad / "model.safetensors.index.json") << R"({"weight_map": {"lm_head.weight": "../x.safetensors"}})";
  EXPECT_XG_ERROR(ModelSource::open(bad.string()), "names '../x.safetensors', not a file name inside the folder");
  std::ofstream(bad / "model.safetensors.index.json") << R"({"weight_map": {"lm_head.weight": "part-2.safetensors"}})";
  EXPECT_XG_ERROR(ModelSource::open(bad.string()), "shard 'part-2.safetensors' (holding 'lm_head.weight') is not in the folder");
}

}  // namespace
}  // namespace xg

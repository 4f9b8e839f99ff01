// Uses the installed xgrad: one backward pass, checked; and a Hugging Face tokenizer.json
// read and applied (text/, which links PCRE2 and ICU privately: a static archive still needs
// them at link time, which the package's config must provide).
#include <xgrad.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

// A byte-level BPE of three tokens and one merge ("h" + "i" -> "hi"), as GPT-2's files spell it.
static bool tokenizer_ok() {
  const fs::path dir = fs::temp_directory_path() / "xgrad-consumer-tokenizer";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
              "vocab": {"h": 0, "i": 1, "hi": 2}, "merges": ["h i"]}})";
  const std::unique_ptr<xg::text::Tokenizer> tok = xg::text::load_tokenizer(dir.string());
  const std::vector<int64_t> ids = tok->encode("hihi", false);
  const bool ok = ids == std::vector<int64_t>{2, 2};  // one pre-token, "h i h i" merged twice
  std::printf("consumer: tokenizer.json ids of \"hihi\": %zu ids, decoded \"%s\" %s\n", ids.size(),
              tok->decode(ids, false).c_str(), ok && tok->decode(ids, false) == "hihi" ? "ok" : "WRONG");
  fs::remove_all(dir);
  return ok && tok->decode(ids, false) == "hihi";
}

int main() {
  xg::Tensor x = xg::tensor({1.0, 2.0, 3.0}).requires_grad_();
  xg::Tensor y = xg::sum(x * x);
  y.backward();
  const std::vector<double> g = x.grad().to_vector();
  const bool ok = g[0] == 2 && g[1] == 4 && g[2] == 6;
  std::printf("consumer: dy/dx = [%g, %g, %g] %s\n", g[0], g[1], g[2], ok ? "ok" : "WRONG");
  return ok && tokenizer_ok() ? 0 : 1;
}

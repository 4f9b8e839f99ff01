// What the libFuzzer targets share: the input as a string, a scratch file holding it (for
// parsers that read a path), and the rule every target checks: malformed input may only
// throw xg::Error. Anything else escaping (std::bad_alloc, a JSON library exception, a
// crash, a sanitizer report) is a bug libFuzzer reports.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "autograd/error.hpp"

namespace xg::fuzz {

inline std::string as_string(const uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A per-process scratch folder under the system temp folder.
inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("xgrad-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name and returns the path.
inline std::string scratch_file(const std::string& name, const std::string& bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// The bytes of tests/fixtures/chat_templates/<name> (the real templates the targets render).
inline std::string chat_template_fixture(const std::string& name) {
  std::ifstream in(std::string(XGRAD_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `f`; an xg::Error is the expected outcome for bad input and is swallowed.
template <class F>
int expect_only_xg_errors(F&& f) {
  try {
    f();
  } catch (const xg::Error&) {
  }
  return 0;
}

// The same, for parsers whose errors reach a user as xg-finetune's one line on stderr: an
// error message that spans lines, or quotes the input at length, is a bug too.
template <class F>
int expect_one_line_xg_errors(F&& f) {
  try {
    f();
  } catch (const xg::Error& e) {
    const std::string m = e.what();
    if (m.find('\n') != std::string::npos || m.size() > 2000) {
      std::fprintf(stderr, "an error message of %zu bytes over lines: %.2000s\n", m.size(), m.c_str());
      std::abort();
    }
  }
  return 0;
}

}  // namespace xg::fuzz

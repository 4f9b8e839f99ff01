// What the libFuzzer targets share: the input as a string, a scratch file holding it (for
// parsers that read a path), and the rule every target checks: malformed input may only
// throw xg::Error. Anything else escaping (std::bad_alloc, a JSON library exception, a
// crash, a sanitizer report) is a bug libFuzzer reports.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
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

// Runs `f`; an xg::Error is the expected outcome for bad input and is swallowed.
template <class F>
int expect_only_xg_errors(F&& f) {
  try {
    f();
  } catch (const xg::Error&) {
  }
  return 0;
}

}  // namespace xg::fuzz

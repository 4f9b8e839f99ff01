// read_file (read_file.hpp).
#include "io/read_file.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/error.hpp"

namespace xg::io {

std::string read_file(const std::string& path, const std::string& who) {
  std::error_code ec;
  check(!std::filesystem::is_directory(path, ec), who, ": ", path, " is a folder, expected a file");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), who, ": cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  check(!in.bad(), who, ": cannot read ", path);
  return ss.str();
}

}  // namespace xg::io

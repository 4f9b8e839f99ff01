// A whole file read into memory, with the one-line errors every loader of a small file (a
// config, an index, a template) shares.
#pragma once

#include <string>

namespace xg::io {

// The bytes of `path`. A folder, a file that cannot be opened or a read that fails is an
// xg::Error starting with `who` and naming the path.
std::string read_file(const std::string& path, const std::string& who);

}  // namespace xg::io

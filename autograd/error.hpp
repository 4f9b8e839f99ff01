// xg::Error, the one exception type xgrad throws, and helpers that format shapes for its
// messages: `matmul: cannot multiply [2,3] by [4,5] (inner sizes 3 and 4 differ)`.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace xg {

using Shape = std::vector<int64_t>;

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// "[2,3]"; a 0-d shape prints as "[]".
std::string shape_str(const Shape& s);

// Builds a message from any streamable pieces: throw Error(str_cat("sum: dim ", d, " out of range"));
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Throws xg::Error(str_cat(args...)) when `cond` is false.
template <class... Args>
void check(bool cond, const Args&... args) {
  if (!cond) throw Error(str_cat(args...));
}

}  // namespace xg

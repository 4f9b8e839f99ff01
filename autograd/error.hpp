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

// A shape as a message prints it: "[2,3]", a 0-d shape "[]". It formats only when streamed
// (str_cat) or converted to std::string, so a check() that passes builds no string: ops call
// check() with shape_str() arguments every step. It refers to the shape: use it within the
// expression that formats it.
class ShapeStr {
 public:
  explicit ShapeStr(const Shape& s) : s_(s) {}
  std::string str() const;
  operator std::string() const { return str(); }  // NOLINT: implicit, like the string it stands for
  friend std::ostream& operator<<(std::ostream& os, const ShapeStr& p) { return os << p.str(); }
  friend std::string operator+(const std::string& a, const ShapeStr& b) { return a + b.str(); }
  friend std::string operator+(const ShapeStr& a, const std::string& b) { return a.str() + b; }
  friend std::string operator+(const ShapeStr& a, const char* b) { return a.str() + b; }

 private:
  const Shape& s_;
};

inline ShapeStr shape_str(const Shape& s) { return ShapeStr(s); }

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

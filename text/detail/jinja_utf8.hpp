// UTF-8 helpers for the Jinja subset: Python counts, indexes and slices strings by code
// point, and its str.strip() strips Unicode whitespace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xg::text::jinja::detail {

// The code point starting at s[i] (advancing i past it). Bytes that are not valid UTF-8
// decode as themselves (0x80..0xFF), so every string splits into pieces that join back.
inline uint32_t next_code_point(const std::string& s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return ++i, b;
  uint32_t cp = len == 1 ? b : b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c >> 6) != 2) return ++i, b;
    cp = (cp << 6) | (c & 0x3F);
  }
  i += len;
  return cp;
}

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

inline int64_t code_point_count(const std::string& s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) next_code_point(s, i), ++n;
  return n;
}

// Python's str.isspace() for one code point.
inline bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Python's str.isprintable() for one code point: not a control, format, surrogate,
// private-use or unassigned character, nor a separator other than the ASCII space (ICU's
// general categories, jinja_format.cpp).
bool is_python_printable(uint32_t cp);

}  // namespace xg::text::jinja::detail

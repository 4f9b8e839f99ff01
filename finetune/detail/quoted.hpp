// Untrusted text quoted in an error message (internal to finetune/): a role name from a dataset
// row, a reward program's answer line.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace xg::finetune {

// `s` as JSON (a newline or control byte stays escaped on the error's one line) cut to its first
// 40 bytes, "..." after it when cut (a megabyte line is not echoed whole).
inline std::string quoted(const std::string& s) {
  const std::size_t n = 40;
  return nlohmann::json(s.substr(0, n)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         (s.size() > n ? "..." : "");
}

}  // namespace xg::finetune

// A compiled PCRE2 regular expression over UTF-8 text, for the split and replace patterns of
// tokenizer.json (Unicode classes \p{L} \p{N}, lookahead (?!\S), scoped (?i:...)): UTF and UCP
// on, JIT-compiled when PCRE2 has a JIT for this CPU. PCRE2 stays out of this header.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace xg::text {

class Regex {
 public:
  // Throws xg::Error "WHO: pattern PATTERN does not compile at offset N: WHY".
  Regex(const std::string& pattern, const std::string& who);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls on_match(begin, end) for each non-overlapping match in `text`, left to right (as
  // Rust's find_iter: an empty match advances by one character). `text` must be valid UTF-8.
  void for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

}  // namespace xg::text

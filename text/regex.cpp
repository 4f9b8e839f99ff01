// Regex: PCRE2 (8-bit code units, UTF + UCP), JIT-compiled where available.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.hpp"

#include <pcre2.h>

#include "autograd/error.hpp"

namespace xg::text {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// One match-data block and JIT stack per thread, reused across calls and patterns.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(8, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& who) : pattern_(pattern), code_(std::make_unique<Code>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                              &offset, nullptr);
  check(code_->code != nullptr, who, ": pattern ", pattern, " does not compile at offset ", offset, ": ",
        pcre2_message(err));
  // NOTE: without a JIT for this CPU (or with it disabled) the interpreter gives the same matches.
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::for_each_match(std::string_view text, const std::function<void(std::size_t, std::size_t)>& on_match) const {
  thread_local ThreadMatchState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  pcre2_match_context* context = nullptr;
  thread_local pcre2_match_context* jit_context = [] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(c, nullptr, state.stack);
    return c;
  }();
  if (code_->jit) context = jit_context;
  std::size_t start = 0;
  while (start <= text.size()) {
    const int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, state.data, context)
                              : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data,
                                            nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    check(rc >= 0, "regex ", pattern_, ": matching failed at byte ", start, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const std::size_t b = ov[0], e = ov[1];
    if (e > b) {
      on_match(b, e);
      start = e;
    } else {
      // An empty match: Rust's find_iter skips it and moves one character on.
      std::size_t n = 1;
      while (b + n < text.size() && (static_cast<unsigned char>(text[b + n]) & 0xC0) == 0x80) ++n;
      start = b + n;
    }
  }
}

}  // namespace xg::text

// A render's work budget and memory bound (text/detail/jinja_budget.hpp): the counters, the
// thread's current budget, and the one-line errors they end a render with.
#include "text/detail/jinja_budget.hpp"

#include <algorithm>

#include "autograd/error.hpp"
#include "text/jinja.hpp"

namespace xg::text::jinja::detail {
namespace {

thread_local std::shared_ptr<Budget> tls_budget;
thread_local int tls_value_depth = 0;

}  // namespace

NestingGuard::NestingGuard(const char* what) {
  if (tls_value_depth >= kMaxValueDepth)
    throw Error(str_cat(what, ": a value nested deeper than ", kMaxValueDepth, " levels"));
  ++tls_value_depth;
}

NestingGuard::~NestingGuard() { --tls_value_depth; }

void Budget::spend(int64_t steps) {
  steps_ += steps;
  if (steps_ > kMaxSteps)
    throw Error(str_cat("the template ran past its work budget of ", kMaxSteps,
                        " steps (a step is a loop iteration, a call, a filter, an operator, or ", kBytesPerStep,
                        " bytes or one item that one of them reads or builds)"));
}

void Budget::need(int64_t bytes) const {
  if (bytes > kMaxHeldBytes - held_)
    throw Error(str_cat("the template would hold more than ", kMaxHeldBytes,
                        " bytes of strings, lists and output at once (its memory bound)"));
}

void Budget::hold(int64_t bytes) {
  need(bytes);
  held_ += bytes;
}

const std::shared_ptr<Budget>& current_budget() { return tls_budget; }

BudgetScope::BudgetScope() : saved_(std::move(tls_budget)) { tls_budget = std::make_shared<Budget>(); }

BudgetScope::~BudgetScope() { tls_budget = std::move(saved_); }

BudgetScope::BudgetScope(std::nullptr_t) : saved_(std::move(tls_budget)) {}

void spend(int64_t steps) {
  if (tls_budget) tls_budget->spend(steps);
}

void spend_bytes(int64_t bytes) {
  if (tls_budget) tls_budget->spend(1 + bytes / kBytesPerStep);
}

void need_bytes(int64_t bytes) {
  if (tls_budget) tls_budget->need(bytes);
}

void need_items(int64_t n) {
  constexpr int64_t kItemBytes = int64_t(sizeof(Value)) + kObjectBytes;
  if (tls_budget) tls_budget->need(n > kMaxHeldBytes / kItemBytes ? kMaxHeldBytes + 1 : n * kItemBytes);
}

int64_t append_bounded(std::string& out, const std::string& piece, bool buffer_held) {
  const size_t size = out.size() + piece.size(), before = out.capacity();
  if (size <= before) {
    out += piece;
    return 0;
  }
  const int64_t counted = buffer_held ? int64_t(before) : 0;
  need_bytes(int64_t(size) - counted);
  const size_t most = size_t((tls_budget ? tls_budget->room() : kMaxHeldBytes) + counted);
  // NOTE: a new string, because reserve() on a used one doubles whatever it is asked for.
  std::string grown;
  grown.reserve(std::max(size, std::min(2 * before, most)));
  grown += out;
  grown += piece;
  out = std::move(grown);
  return int64_t(out.capacity() - before);
}

}  // namespace xg::text::jinja::detail

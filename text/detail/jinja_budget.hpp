// What one render of a template may spend. A chat template is untrusted input (it ships in a
// downloaded model's tokenizer_config.json), so every render has a work budget and a memory
// bound, and ends in an error naming the template line when it would pass either.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace xg::text::jinja::detail {

// The work budget, in steps: a loop iteration, a call (a macro call four), a filter, a test
// or an operator is one step, and so is every 64 bytes or one item of the strings and lists
// each of them reads or builds (copying an 8 MB string reads and builds 250,000 steps' worth),
// and every node a deep comparison, repr or tojson visits. The eight fixture templates take
// 365-513 steps on the fixture conversations and 156,000-294,000 on 2,000 messages of 1 KB;
// 10 M steps of loops or macro calls run in about a second (text/README.md has the numbers).
constexpr int64_t kMaxSteps = 10'000'000;
constexpr int64_t kBytesPerStep = 64;

// The memory bound: the strings, lists and dicts a render holds at once, with its output and
// the outputs of the macros and blocks it is inside. Values the caller passes in (the
// messages) are not counted. A string is counted as its bytes plus kObjectBytes, a list as
// sizeof(Value) a slot.
constexpr int64_t kMaxHeldBytes = int64_t(32) << 20;
constexpr int64_t kObjectBytes = 64;

class Budget {
 public:
  // Counts `steps` more; past kMaxSteps, an error.
  void spend(int64_t steps);
  // An error when holding `bytes` more would pass kMaxHeldBytes.
  void need(int64_t bytes) const;
  void hold(int64_t bytes);  // need(bytes), then counts them held
  void release(int64_t bytes) { held_ -= bytes; }
  int64_t room() const { return kMaxHeldBytes - held_; }  // how much more it may hold

 private:
  int64_t steps_ = 0;
  int64_t held_ = 0;
};

// The budget of the render running on this thread; null outside a render (a template's
// context and literals are made outside one and are not counted).
// NOTE: a thread-local rather than an argument, because values are built everywhere (every
// filter, method and operator) and the budget must reach each of them.
const std::shared_ptr<Budget>& current_budget();

// Installs a fresh budget on this thread for a render, and the previous one back after it.
// BudgetScope::uncounted() installs none instead: for values made once and kept for every
// render (the globals, the keys of `loop`), which no render should be charged for or hold.
class BudgetScope {
 public:
  BudgetScope();
  static BudgetScope uncounted() { return BudgetScope(nullptr); }
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  explicit BudgetScope(std::nullptr_t);
  std::shared_ptr<Budget> saved_;
};

// The current budget's spend and need; outside a render they do nothing.
void spend(int64_t steps);
void spend_bytes(int64_t bytes);  // one step per kBytesPerStep bytes (at least one)
void need_bytes(int64_t bytes);
// need_bytes for `n` list items, each a Value and the small string it may hold.
void need_items(int64_t n);

// out += piece, refused when out would pass the memory bound (buffer_held: out's buffer is
// already counted, as an output buffer is). out's buffer doubles while the room left allows,
// then grows to just what it needs: doubling near the bound would ask for twice the bound.
// Returns how many bytes out's buffer grew by.
int64_t append_bounded(std::string& out, const std::string& piece, bool buffer_held = false);

// The routines that walk a value's nesting (repr, tojson, ==, <, hashing) hold one of these
// per level: past kMaxValueDepth levels, an error, as Python's RecursionError ends repr() of a
// list nested a thousand deep. A template can nest a list 100,000 deep in a loop
// ({% set ns.x = [ns.x] %}), which would otherwise overflow the stack.
constexpr int kMaxValueDepth = 500;
class NestingGuard {
 public:
  explicit NestingGuard(const char* what);
  ~NestingGuard();
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

}  // namespace xg::text::jinja::detail

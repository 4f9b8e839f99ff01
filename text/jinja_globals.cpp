// The globals Jinja2 gives every template (range, dict, namespace, joiner, cycler) and the two
// transformers adds (raise_exception, strftime_now).
#include <cmath>
#include <ctime>

#include "autograd/error.hpp"
#include "text/detail/jinja_args.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"

namespace xg::text::jinja::detail {

const Dict& builtin_globals() {
  static const Dict g = [] {
    auto uncounted = BudgetScope::uncounted();
    Dict d;
    d.set("range", Value::function("range", [](const List& a, const Kwargs& k) {
      if (!k.empty() || a.empty() || a.size() > 3) throw Error("range expects 1 to 3 integer arguments");
      for (const Value& x : a)
        if (x.kind() != Value::Kind::Int) throw Error(str_cat("range: '", x.type_name(), "' object cannot be interpreted as an integer"));
      int64_t start = a.size() > 1 ? a[0].as_int() : 0, stop = a.size() > 1 ? a[1].as_int() : a[0].as_int();
      int64_t step = a.size() > 2 ? a[2].as_int() : 1;
      if (step == 0) throw Error("range() arg 3 must not be zero");
      // Jinja2's sandbox (transformers renders in ImmutableSandboxedEnvironment) refuses
      // ranges longer than MAX_RANGE.
      constexpr int64_t kMaxRange = 100000;
      if ((double(stop) - double(start)) / double(step) > double(kMaxRange))
        throw Error(str_cat("range too big: the sandbox blocks ranges longer than ", kMaxRange));
      List out;
      out.reserve(size_t(std::max<double>(0, std::ceil((double(stop) - double(start)) / double(step)))));
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
      std::string repr = step == 1 ? str_cat("range(", start, ", ", stop, ")") : str_cat("range(", start, ", ", stop, ", ", step, ")");
      return Value::sequence(Value::Seq::Range, std::move(out), repr);
    }));
    // joiner(sep): a function that returns "" the first time and sep after.
    d.set("joiner", Value::function("joiner", [](const List& a, const Kwargs& k) {
      Args p("joiner", a, k, {"sep"});
      auto used = std::make_shared<bool>(false);
      return Value::function("joiner", [sep = p.get(0, Value(", ")), used](const List& b, const Kwargs& kw) {
        Args("joiner()", b, kw, {});
        if (!*used) return *used = true, Value("");
        return sep;
      });
    }));
    // cycler(*items): .next() returns the current item and moves on, .reset() goes back to
    // the first, .current is the item next() returns next.
    d.set("cycler", Value::function("cycler", [](const List& a, const Kwargs& k) {
      if (!k.empty()) throw Error("cycler takes no keyword arguments");
      if (a.empty()) throw Error("at least one item has to be provided");
      Dict entries;
      entries.set("current", a[0]);
      Value ns = Value::ns(std::move(entries));
      // The functions live in the namespace they update; they hold it by address, not by a
      // reference that would keep it alive.
      Dict* self = &ns.namespace_entries();
      auto pos = std::make_shared<size_t>(0);
      self->set("next", Value::function("cycler.next", [a, pos, self](const List& b, const Kwargs& kw) {
        Args("cycler.next()", b, kw, {});
        Value item = a[*pos];
        *pos = (*pos + 1) % a.size();
        self->set("current", a[*pos]);
        return item;
      }));
      self->set("reset", Value::function("cycler.reset", [a, pos, self](const List& b, const Kwargs& kw) {
        Args("cycler.reset()", b, kw, {});
        *pos = 0;
        self->set("current", a[0]);
        return Value::none();
      }));
      return ns;
    }));
    auto from_args = [](const char* fn, const List& a, const Kwargs& k) {
      Dict entries;
      if (a.size() > 1) throw Error(str_cat(fn, " expected at most 1 positional argument"));
      if (a.size() == 1) {
        if (!a[0].is_dict()) throw Error(str_cat(fn, ": a positional argument must be a mapping"));
        entries = a[0].as_dict();
      }
      for (const auto& [key, v] : k) entries.set(key, v);
      return entries;
    };
    d.set("namespace", Value::function("namespace", [from_args](const List& a, const Kwargs& k) {
      return Value::ns(from_args("namespace", a, k));
    }));
    d.set("dict", Value::function("dict", [from_args](const List& a, const Kwargs& k) {
      return Value::dict(from_args("dict", a, k));
    }));
    d.set("raise_exception", Value::function("raise_exception", [](const List& a, const Kwargs&) -> Value {
      throw Error(a.empty() ? std::string("raise_exception") : a[0].str());
    }));
    // transformers' strftime_now: datetime.now().strftime(format), local time.
    d.set("strftime_now", Value::function("strftime_now", [](const List& a, const Kwargs&) {
      if (a.size() != 1 || !a[0].is_string()) throw Error("strftime_now expects one format string");
      std::time_t t = std::time(nullptr);
      std::tm local{};
      localtime_r(&t, &local);
      char buf[512];
      size_t n = std::strftime(buf, sizeof buf, a[0].as_string().c_str(), &local);
      return Value(std::string(buf, n));
    }));
    return d;
  }();
  return g;
}

}  // namespace xg::text::jinja::detail

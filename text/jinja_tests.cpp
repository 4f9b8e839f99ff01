// Jinja2's tests (`x is odd`) and the Python operators the renderer and the filters share:
// <, in, len() and iteration.
#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/error.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {
namespace {

using TestFn = bool (*)(const Value&, const List&);

// Python's a % b for the number tests (an error for what Python refuses).
Value python_mod(const Value& a, const Value& b) {
  check_defined(a);
  if (!a.is_number() || !b.is_number()) {
    if (a.is_string()) throw Error("not all arguments converted during string formatting");
    throw Error(str_cat("unsupported operand type(s) for %: '", a.type_name(), "' and '", b.type_name(), "'"));
  }
  if (b.as_float() == 0) throw Error("integer division or modulo by zero");
  if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float) {
    double r = std::fmod(a.as_float(), b.as_float());
    if (r != 0 && ((r < 0) != (b.as_float() < 0))) r += b.as_float();
    return Value(r);
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (y == -1) return Value(int64_t(0));
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value(r);
}

// Python's `a is b`: containers and functions by identity, None and booleans by value, and
// the small ints CPython keeps one object each for (-5..256). Whether two equal strings,
// floats or big ints are one object depends on CPython's caching; that is refused.
bool same_object(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::None: case K::Undefined: return true;
    case K::Bool: return a.as_bool() == b.as_bool();
    case K::Int:
      if (a.as_int() != b.as_int()) return false;
      if (a.as_int() >= -5 && a.as_int() <= 256) return true;
      break;
    case K::List: return &a.as_list() == &b.as_list();
    case K::Dict: case K::Namespace: return &a.as_dict() == &b.as_dict();
    case K::Function: return &a.as_function() == &b.as_function();
    default:
      if (a.kind() == K::String && a.as_string() != b.as_string()) return false;
      if (a.kind() == K::Float && !equals(a, b)) return false;
  }
  throw Error(str_cat("the sameas test on equal values of type '", a.type_name(), "' (CPython's object identity) is not supported"));
}

const Value& arg0(const char* test, const List& a) {
  if (a.empty()) throw Error(str_cat("test '", test, "' needs an argument"));
  return a[0];
}

const std::map<std::string, TestFn>& tests() {
  using K = Value::Kind;
  static const std::map<std::string, TestFn> table = {
      {"defined", [](const Value& v, const List&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const List&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const List&) { return v.is_none(); }},
      {"boolean", [](const Value& v, const List&) { return v.kind() == K::Bool; }},
      {"true", [](const Value& v, const List&) { return v.kind() == K::Bool && v.as_bool(); }},
      {"false", [](const Value& v, const List&) { return v.kind() == K::Bool && !v.as_bool(); }},
      {"integer", [](const Value& v, const List&) { return v.kind() == K::Int; }},
      {"float", [](const Value& v, const List&) { return v.kind() == K::Float; }},
      {"number", [](const Value& v, const List&) { return v.is_number(); }},
      {"string", [](const Value& v, const List&) { return v.is_string(); }},
      {"mapping", [](const Value& v, const List&) { return v.is_dict(); }},
      // Jinja2's Undefined is iterable (as empty) and has a length.
      {"iterable", [](const Value& v, const List&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.kind() == K::Iterator; }},
      {"sequence", [](const Value& v, const List&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
      // A loop is callable (loop(items) in a recursive loop).
      {"callable", [](const Value& v, const List&) { return v.kind() == K::Function || (v.is_dict() && v.as_dict().find("__call__")); }},
      // Jinja2's `value % 2 == 1`: 3.0 is odd, 1.5 is neither.
      {"odd", [](const Value& v, const List&) { return equals(python_mod(v, Value(int64_t(2))), Value(int64_t(1))); }},
      {"even", [](const Value& v, const List&) { return equals(python_mod(v, Value(int64_t(2))), Value(int64_t(0))); }},
      {"divisibleby", [](const Value& v, const List& a) { return equals(python_mod(v, arg0("divisibleby", a)), Value(int64_t(0))); }},
      {"sameas", [](const Value& v, const List& a) { return same_object(v, arg0("sameas", a)); }},
      {"escaped", [](const Value& v, const List&) { return v.is_markup(); }},
      {"filter", [](const Value& v, const List&) { return v.is_string() && is_filter(v.as_string()); }},
      {"test", [](const Value& v, const List&) { return v.is_string() && is_test(v.as_string()); }},
      {"eq", [](const Value& v, const List& a) { return equals(v, arg0("eq", a)); }},
      {"equalto", [](const Value& v, const List& a) { return equals(v, arg0("equalto", a)); }},
      {"==", [](const Value& v, const List& a) { return equals(v, arg0("==", a)); }},
      {"ne", [](const Value& v, const List& a) { return !equals(v, arg0("ne", a)); }},
      {"!=", [](const Value& v, const List& a) { return !equals(v, arg0("!=", a)); }},
      {"lt", [](const Value& v, const List& a) { return less(v, arg0("lt", a)); }},
      {"lessthan", [](const Value& v, const List& a) { return less(v, arg0("lessthan", a)); }},
      {"<", [](const Value& v, const List& a) { return less(v, arg0("<", a)); }},
      {"le", [](const Value& v, const List& a) { return !less(arg0("le", a), v); }},
      {"<=", [](const Value& v, const List& a) { return !less(arg0("<=", a), v); }},
      {"gt", [](const Value& v, const List& a) { return less(arg0("gt", a), v); }},
      {"greaterthan", [](const Value& v, const List& a) { return less(arg0("greaterthan", a), v); }},
      {">", [](const Value& v, const List& a) { return less(arg0(">", a), v); }},
      {"ge", [](const Value& v, const List& a) { return !less(v, arg0("ge", a)); }},
      {">=", [](const Value& v, const List& a) { return !less(v, arg0(">=", a)); }},
      {"in", [](const Value& v, const List& a) { return contains(arg0("in", a), v); }},
      {"lower", [](const Value& v, const List&) { return method(Value(v.str()), "islower").as_function()({}, {}).truthy(); }},
      {"upper", [](const Value& v, const List&) { return method(Value(v.str()), "isupper").as_function()({}, {}).truthy(); }},
  };
  return table;
}


}  // namespace

bool is_test(const std::string& name) { return tests().count(name) > 0; }

bool apply_test(const std::string& name, const Value& value, const List& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw Error(str_cat("unsupported test '", name, "'"));
  return it->second(value, args);
}

bool less(const Value& a, const Value& b) {
  NestingGuard nesting("<");
  check_defined(a);
  check_defined(b);
  if (a.is_number() && b.is_number()) return a.as_float() < b.as_float();
  if (a.is_string() && b.is_string()) {
    spend_bytes(int64_t(std::min(a.as_string().size(), b.as_string().size())));
    return a.as_string() < b.as_string();  // UTF-8 bytes: code point order
  }
  if (a.is_list() && b.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      spend(1);
      if (!equals(x[k], y[k])) return less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  throw Error(str_cat("'<' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'"));
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!needle.is_string())
        throw Error(str_cat("'in <string>' requires string as left operand, not ", needle.type_name()));
      spend_bytes(int64_t(haystack.as_string().size()));
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::List:
      return std::any_of(haystack.as_list().begin(), haystack.as_list().end(), [&](const Value& x) { return equals(x, needle); });
    case Value::Kind::Dict:
      return haystack.as_dict().find(needle) != nullptr;
    case Value::Kind::Iterator: {  // consumed up to the item found, as Python's `in` does
      List& rest = haystack.iterator_rest();
      while (!rest.empty()) {
        bool found = equals(rest.back(), needle);
        rest.pop_back();
        if (found) return true;
      }
      return false;
    }
    default:
      throw Error(str_cat("argument of type '", haystack.type_name(), "' is not iterable"));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: spend_bytes(int64_t(v.as_string().size())); return code_point_count(v.as_string());
    case Value::Kind::List: return int64_t(v.as_list().size());
    case Value::Kind::Dict: return int64_t(v.as_dict().items.size());
    default: throw Error(str_cat("object of type '", v.type_name(), "' has no len()"));
  }
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::Iterator: {  // what is left, and nothing the next time
      spend(int64_t(v.iterator_rest().size()));
      List rest;
      rest.swap(v.iterator_rest());
      std::reverse(rest.begin(), rest.end());
      return rest;
    }
    case Value::Kind::List:
      spend(int64_t(v.as_list().size()));
      need_items(int64_t(v.as_list().size()));
      return v.as_list();
    case Value::Kind::Dict: {
      spend(int64_t(v.as_dict().items.size()));
      need_items(int64_t(v.as_dict().items.size()));
      List keys;
      for (const auto& [k, val] : v.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      const std::string& s = v.as_string();
      need_items(code_point_count(s));
      spend_bytes(int64_t(s.size()));
      List chars;
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        next_code_point(s, i);
        chars.emplace_back(s.substr(start, i - start));
      }
      return chars;
    }
    default: throw Error(str_cat("'", v.type_name(), "' object is not iterable"));
  }
}

void check_defined(const Value& v) {
  if (v.is_undefined()) throw Error(v.name().empty() ? std::string("undefined value") : v.name());
}

}  // namespace xg::text::jinja::detail

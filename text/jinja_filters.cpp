// Built-in filters, tests and str/dict methods of the Jinja subset, as Jinja2 and Python
// define them (transformers' tojson included), and the Python operators they share with
// the renderer: <, in, len() and iteration.
#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/error.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {
namespace {

// A call's arguments by position or keyword, for a builtin with the parameters `names`.
class Args {
 public:
  Args(const char* what, const List& args, const Kwargs& kwargs, std::vector<const char*> names)
      : what_(what), args_(args), kwargs_(kwargs), names_(std::move(names)) {
    if (args.size() > names_.size())
      throw Error(str_cat(what_, " takes at most ", names_.size(), " argument(s) (", args.size(), " given)"));
    for (const auto& kv : kwargs) {
      const std::string& k = kv.first;
      auto it = std::find_if(names_.begin(), names_.end(), [&](const char* n) { return k == n; });
      if (it == names_.end()) throw Error(str_cat(what_, " got an unexpected keyword argument '", k, "'"));
      if (size_t(it - names_.begin()) < args.size()) throw Error(str_cat(what_, " got multiple values for '", k, "'"));
    }
  }
  bool has(size_t i) const { return i < args_.size() || kw(i); }
  Value get(size_t i, Value def = Value()) const {
    if (i < args_.size()) return args_[i];
    if (const Value* v = kw(i)) return *v;
    return def;
  }
  std::string str(size_t i, const std::string& def) const {
    Value v = get(i, Value(def));
    if (!v.is_string()) throw Error(str_cat(what_, ": '", names_[i], "' must be a string, not ", v.type_name()));
    return v.as_string();
  }
  int64_t integer(size_t i, int64_t def) const {
    Value v = get(i, Value(def));
    if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool)
      throw Error(str_cat(what_, ": '", names_[i], "' must be an integer, not ", v.type_name()));
    return v.as_int();
  }
  bool flag(size_t i, bool def) const { return get(i, Value(def)).truthy(); }

 private:
  const Value* kw(size_t i) const {
    if (i >= names_.size()) return nullptr;
    for (const auto& [k, v] : kwargs_)
      if (k == names_[i]) return &v;
    return nullptr;
  }
  const char* what_;
  const List& args_;
  const Kwargs& kwargs_;
  std::vector<const char*> names_;
};

std::string ascii_lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string ascii_upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// NOTE: case mapping is ASCII only (Python maps all of Unicode); in title() a non-ASCII byte
// counts as a letter, so "café au lait" becomes "Café Au Lait" as in Python.
std::string title_case(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    auto u = static_cast<unsigned char>(c);
    bool letter = std::isalpha(u) || u >= 0x80;
    if (std::isalpha(u)) c = char(prev_cased ? std::tolower(u) : std::toupper(u));
    prev_cased = letter;
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = char(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

// Python's str.strip/lstrip/rstrip: whitespace when chars is None, else any of chars' code
// points.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (!chars.is_none() && !chars.is_undefined()) {
    if (!chars.is_string()) throw Error(str_cat("strip arg must be None or str, not ", chars.type_name()));
    for (size_t i = 0; i < chars.as_string().size();) set.push_back(next_code_point(chars.as_string(), i));
  }
  auto strippable = [&](uint32_t cp) {
    return set.empty() && (chars.is_none() || chars.is_undefined()) ? is_python_space(cp)
                                                                     : std::count(set.begin(), set.end(), cp) > 0;
  };
  // One walk: from is where the first kept code point starts, to where the last one ends.
  size_t from = s.size(), to = 0;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    if (strippable(next_code_point(s, i))) continue;
    if (from == s.size()) from = start;
    to = i;
  }
  if (!left) from = 0;
  if (!right) to = s.size();
  return from < to ? s.substr(from, to - from) : std::string();
}

// Python's str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    size_t i = 0;
    while (true) {
      size_t start = i;
      while (start < s.size()) {  // skip whitespace
        size_t j = start;
        if (!is_python_space(next_code_point(s, j))) break;
        start = j;
      }
      if (start >= s.size()) break;
      if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
        out.emplace_back(strip(s.substr(start), Value::none(), false, true));
        break;
      }
      size_t end = start;
      while (end < s.size()) {
        size_t j = end;
        if (is_python_space(next_code_point(s, j))) break;
        end = j;
      }
      need_items(int64_t(out.size()) + 1);
      out.emplace_back(s.substr(start, end - start));
      i = end;
    }
    return out;
  }
  if (!sep.is_string()) throw Error(str_cat("must be str or None, not ", sep.type_name()));
  const std::string& d = sep.as_string();
  if (d.empty()) throw Error("empty separator");
  size_t start = 0;
  while (true) {
    size_t p = s.find(d, start);
    if (p == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) break;
    need_items(int64_t(out.size()) + 1);
    out.emplace_back(s.substr(start, p - start));
    start = p + d.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl between every character
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      size_t start = i;
      next_code_point(s, i);
      if (count < 0 || n < count) append_bounded(out, repl), ++n;
      out.append(s, start, i - start);
    }
    if (count < 0 || n < count) append_bounded(out, repl);
    return out;
  }
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    out.append(s, start, p - start);
    append_bounded(out, repl);
    start = p + old.size();
  }
  return out + s.substr(start);
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw Error(str_cat(start ? "startswith" : "endswith", " first arg must be str or a tuple of str, not ", a.type_name()));
    const std::string& x = a.as_string();
    return x.size() <= s.size() && (start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

std::string join(const Value& v, const std::string& sep, const Value& attribute);

// Jinja2's attribute lookup for filters: "a.b" walks dicts (and list indices).
Value attribute_of(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_dict() || cur.kind() == Value::Kind::Namespace) {
      const Value* v = cur.as_dict().find(part);
      cur = v ? *v : Value::undefined("'dict object' has no attribute '" + part + "'");
    } else if (cur.is_list() && !part.empty() && part.size() < 10 && std::all_of(part.begin(), part.end(), ::isdigit)) {
      size_t k = std::stoul(part);
      cur = k < cur.as_list().size() ? cur.as_list()[k] : Value::undefined("list index out of range");
    } else {
      check_defined(cur);
      cur = Value::undefined(str_cat("'", cur.type_name(), " object' has no attribute '", part, "'"));
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string join(const Value& v, const std::string& sep, const Value& attribute) {
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) append_bounded(out, sep);
    first = false;
    const Value& item = attribute.is_none() || attribute.is_undefined() ? x : attribute_of(x, attribute.str());
    append_bounded(out, item.is_string() ? item.as_string() : item.str());
  }
  return out;
}

// Jinja2's sort key: strings compare case-insensitively unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return v.is_string() && !case_sensitive ? Value(ascii_lower(v.as_string())) : v;
}

Value select_items(const char* name, const Value& seq, const List& args, bool by_attr, bool select) {
  size_t first_test = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    if (args.empty() || !args[0].is_string()) throw Error(str_cat(name, " needs an attribute name"));
    attr = args[0].as_string();
  }
  std::string test = args.size() > first_test ? args[first_test].str() : "";
  if (!test.empty() && !is_test(test)) throw Error(str_cat(name, ": unsupported test '", test, "'"));
  List test_args(args.begin() + std::min(args.size(), first_test + 1), args.end());
  List out;
  for (const Value& item : iterate(seq)) {
    Value x = by_attr ? attribute_of(item, attr) : item;
    bool ok = test.empty() ? x.truthy() : apply_test(test, x, test_args);
    if (ok == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

// A float truncated to an integer; NaN, infinities and values past 64 bits give `def`.
Value truncate(double d, const Value& def) {
  return std::isfinite(d) && std::fabs(d) < 9.2e18 ? Value(int64_t(d)) : def;
}

Value to_number(const Value& v, bool as_int, const Value& def) {
  if (v.is_number()) {
    if (!as_int) return Value(v.as_float());
    return v.kind() == Value::Kind::Float ? truncate(v.as_float(), def) : Value(v.as_int());
  }
  if (v.is_string()) {
    std::string s = strip(v.as_string(), Value::none(), true, true);
    try {
      size_t used = 0;
      if (as_int) {
        int64_t x = std::stoll(s, &used);
        if (used == s.size()) return Value(x);
        double d = std::stod(s, &used);  // Jinja2's int("3.7") is 3
        if (used == s.size()) return truncate(d, def);
      } else {
        double d = std::stod(s, &used);
        if (used == s.size()) return Value(d);
      }
    } catch (const std::exception&) {
    }
  }
  return def;
}

using FilterFn = Value (*)(const Value&, const List&, const Kwargs&);

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"safe", [](const Value& v, const List& a, const Kwargs& k) { Args("safe", a, k, {}); return v; }},
      {"string", [](const Value& v, const List& a, const Kwargs& k) { Args("string", a, k, {}); return Value(v.str()); }},
      {"trim", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("trim", a, k, {"chars"});
         return Value(strip(v.str(), p.get(0, Value::none()), true, true));
       }},
      {"upper", [](const Value& v, const List& a, const Kwargs& k) { Args("upper", a, k, {}); return Value(ascii_upper(v.str())); }},
      {"lower", [](const Value& v, const List& a, const Kwargs& k) { Args("lower", a, k, {}); return Value(ascii_lower(v.str())); }},
      {"title", [](const Value& v, const List& a, const Kwargs& k) { Args("title", a, k, {}); return Value(title_case(v.str())); }},
      {"capitalize", [](const Value& v, const List& a, const Kwargs& k) { Args("capitalize", a, k, {}); return Value(capitalize(v.str())); }},
      {"length", [](const Value& v, const List& a, const Kwargs& k) { Args("length", a, k, {}); return Value(length(v)); }},
      {"count", [](const Value& v, const List& a, const Kwargs& k) { Args("count", a, k, {}); return Value(length(v)); }},
      // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False), in that parameter order.
      {"tojson", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("tojson", a, k, {"ensure_ascii", "indent", "separators", "sort_keys"});
         JsonDump o;
         o.ensure_ascii = p.flag(0, false);
         Value indent = p.get(1, Value::none());
         if (!indent.is_none()) {
           if (indent.kind() != Value::Kind::Int) throw Error("tojson: indent must be an integer (a string indent is not supported)");
           o.indent = int(std::max<int64_t>(0, indent.as_int()));
         }
         Value seps = p.get(2, Value::none());
         if (!seps.is_none()) {
           if (!seps.is_list() || seps.as_list().size() != 2 || !seps.as_list()[0].is_string() || !seps.as_list()[1].is_string())
             throw Error("tojson: separators must be a pair of strings");
           o.item_separator = seps.as_list()[0].as_string();
           o.key_separator = seps.as_list()[1].as_string();
         }
         o.sort_keys = p.flag(3, false);
         return Value(to_json(v, o));
       }},
      {"join", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("join", a, k, {"d", "attribute"});
         return Value(join(v, p.str(0, ""), p.get(1, Value::none())));
       }},
      {"default", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("default", a, k, {"default_value", "boolean"});
         bool use = v.is_undefined() || (p.flag(1, false) && !v.truthy());
         return use ? p.get(0, Value("")) : v;
       }},
      {"items", [](const Value& v, const List& a, const Kwargs& k) {
         Args("items", a, k, {});
         List out;
         if (v.is_undefined()) return Value::list(out);
         if (!v.is_dict()) throw Error(str_cat("items: expected a mapping, got ", v.type_name()));
         for (const auto& [key, val] : v.as_dict().items) out.push_back(Value::list({Value(key), val}));
         return Value::list(std::move(out));
       }},
      {"list", [](const Value& v, const List& a, const Kwargs& k) { Args("list", a, k, {}); return Value::list(iterate(v)); }},
      {"first", [](const Value& v, const List& a, const Kwargs& k) {
         Args("first", a, k, {});
         List items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"last", [](const Value& v, const List& a, const Kwargs& k) {
         Args("last", a, k, {});
         List items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"reverse", [](const Value& v, const List& a, const Kwargs& k) {
         Args("reverse", a, k, {});
         List items = iterate(v);
         std::reverse(items.begin(), items.end());
         if (!v.is_string()) return Value::list(std::move(items));
         std::string out;
         for (const Value& c : items) out += c.as_string();
         return Value(out);
       }},
      {"sort", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("sort", a, k, {"reverse", "case_sensitive", "attribute"});
         bool rev = p.flag(0, false), cs = p.flag(1, false);
         Value attr = p.get(2, Value::none());
         List items = iterate(v);
         auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attribute_of(x, attr.str()), cs); };
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
           return rev ? less(key(y), key(x)) : less(key(x), key(y));
         });
         return Value::list(std::move(items));
       }},
      {"unique", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("unique", a, k, {"case_sensitive", "attribute"});
         bool cs = p.flag(0, false);
         Value attr = p.get(1, Value::none());
         List out, seen;
         for (const Value& x : iterate(v)) {
           Value key = sort_key(attr.is_none() ? x : attribute_of(x, attr.str()), cs);
           if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
             seen.push_back(key);
             out.push_back(x);
           }
         }
         return Value::list(std::move(out));
       }},
      {"selectattr", [](const Value& v, const List& a, const Kwargs& k) { Args("selectattr", a, k, {"attr", "test", "value"}); return select_items("selectattr", v, a, true, true); }},
      {"rejectattr", [](const Value& v, const List& a, const Kwargs& k) { Args("rejectattr", a, k, {"attr", "test", "value"}); return select_items("rejectattr", v, a, true, false); }},
      {"select", [](const Value& v, const List& a, const Kwargs& k) { Args("select", a, k, {"test", "value"}); return select_items("select", v, a, false, true); }},
      {"reject", [](const Value& v, const List& a, const Kwargs& k) { Args("reject", a, k, {"test", "value"}); return select_items("reject", v, a, false, false); }},
      {"map", [](const Value& v, const List& a, const Kwargs& k) {
         List out;
         const Value* attr = nullptr;
         const Value* def = nullptr;
         for (const auto& [key, val] : k) {
           if (key == "attribute") attr = &val;
           else if (key == "default") def = &val;
           else throw Error(str_cat("map got an unexpected keyword argument '", key, "'"));
         }
         if (attr) {
           if (!a.empty()) throw Error("map: positional arguments with attribute=");
           for (const Value& x : iterate(v)) {
             Value y = attribute_of(x, attr->str());
             out.push_back(y.is_undefined() && def ? *def : y);
           }
         } else {
           if (a.empty() || !a[0].is_string()) throw Error("map needs attribute= or a filter name");
           std::string f = a[0].as_string();
           if (!is_filter(f)) throw Error(str_cat("map: unsupported filter '", f, "'"));
           List rest(a.begin() + 1, a.end());
           for (const Value& x : iterate(v)) out.push_back(apply_filter(f, x, rest, {}));
         }
         return Value::list(std::move(out));
       }},
      {"int", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("int", a, k, {"default", "base"});
         if (p.integer(1, 10) != 10) throw Error("int: only base 10 is supported");
         return to_number(v, true, p.get(0, Value(int64_t(0))));
       }},
      {"float", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("float", a, k, {"default"});
         return to_number(v, false, p.get(0, Value(0.0)));
       }},
      {"abs", [](const Value& v, const List& a, const Kwargs& k) {
         Args("abs", a, k, {});
         if (!v.is_number()) throw Error(str_cat("bad operand type for abs(): '", v.type_name(), "'"));
         if (v.kind() == Value::Kind::Float) return Value(std::fabs(v.as_float()));
         if (v.as_int() == INT64_MIN) throw Error("integer overflow (integers are 64-bit here)");
         return Value(int64_t(std::llabs(v.as_int())));
       }},
      {"replace", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("replace", a, k, {"old", "new", "count"});
         Value count = p.get(2, Value::none());
         return Value(replace(v.str(), p.str(0, ""), p.str(1, ""), count.is_none() ? -1 : count.as_int()));
       }},
      {"indent", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("indent", a, k, {"width", "first", "blank"});
         Value w = p.get(0, Value(int64_t(4)));
         if (!w.is_string()) need_bytes(w.as_int());  // indent(10**9) would allocate a gigabyte of spaces
         std::string pad = w.is_string() ? w.as_string() : std::string(size_t(std::max<int64_t>(0, w.as_int())), ' ');
         bool first = p.flag(1, false), blank = p.flag(2, false);
         std::string s = v.str(), out;
         size_t start = 0;
         for (int line = 0;; ++line) {
           size_t nl = s.find('\n', start);
           std::string piece = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
           bool indent_it = (line > 0 || first) && (blank || !strip(piece, Value::none(), true, true).empty());
           if (indent_it) append_bounded(out, pad);
           out += piece;
           if (nl == std::string::npos) break;
           out += '\n';
           start = nl + 1;
         }
         return Value(out);
       }},
      {"dictsort", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("dictsort", a, k, {"case_sensitive", "by", "reverse"});
         bool cs = p.flag(0, false), rev = p.flag(2, false);
         std::string by = p.str(1, "key");
         if (by != "key" && by != "value") throw Error("dictsort: by must be 'key' or 'value'");
         if (!v.is_dict()) throw Error(str_cat("dictsort: expected a mapping, got ", v.type_name()));
         auto items = v.as_dict().items;
         size_t idx = by == "key" ? 0 : 1;
         List out;
         for (const auto& [key, val] : items) out.push_back(Value::list({Value(key), val}));
         std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
           Value kx = sort_key(x.as_list()[idx], cs), ky = sort_key(y.as_list()[idx], cs);
           return rev ? less(ky, kx) : less(kx, ky);
         });
         return Value::list(std::move(out));
       }},
      {"min", [](const Value& v, const List& a, const Kwargs& k) {
         Args("min", a, k, {});
         List items = iterate(v);
         if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
         return *std::min_element(items.begin(), items.end(), [](const Value& x, const Value& y) { return less(sort_key(x, false), sort_key(y, false)); });
       }},
      {"max", [](const Value& v, const List& a, const Kwargs& k) {
         Args("max", a, k, {});
         List items = iterate(v);
         if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
         return *std::max_element(items.begin(), items.end(), [](const Value& x, const Value& y) { return less(sort_key(x, false), sort_key(y, false)); });
       }},
  };
  return table;
}

using TestFn = bool (*)(const Value&, const List&);

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
      {"iterable", [](const Value& v, const List&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
      {"sequence", [](const Value& v, const List&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
      {"callable", [](const Value& v, const List&) { return v.kind() == K::Function; }},
      {"odd", [](const Value& v, const List&) { return v.is_number() && v.as_int() % 2 != 0; }},
      {"even", [](const Value& v, const List&) { return v.is_number() && v.as_int() % 2 == 0; }},
      {"divisibleby", [](const Value& v, const List& a) {
         int64_t n = arg0("divisibleby", a).as_int();
         if (n == 0) throw Error("integer division or modulo by zero");
         return v.as_int() % n == 0;
       }},
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
      {"lower", [](const Value& v, const List&) { return v.is_string() && ascii_lower(v.as_string()) == v.as_string(); }},
      {"upper", [](const Value& v, const List&) { return v.is_string() && ascii_upper(v.as_string()) == v.as_string(); }},
  };
  return table;
}

}  // namespace

bool is_filter(const std::string& name) { return name == "d" || filters().count(name) > 0; }
bool is_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& value, const List& args, const Kwargs& kwargs) {
  auto it = filters().find(name == "d" ? "default" : name);
  if (it == filters().end()) throw Error(str_cat("unsupported filter '", name, "'"));
  return it->second(value, args, kwargs);
}

bool apply_test(const std::string& name, const Value& value, const List& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw Error(str_cat("unsupported test '", name, "'"));
  return it->second(value, args);
}

Value method(const Value& obj, const std::string& name) {
  using K = Value::Kind;
  static const std::vector<std::string> str_methods = {
      "strip", "lstrip", "rstrip", "split", "startswith", "endswith", "replace", "upper", "lower",
      "title", "capitalize", "find", "count", "join", "isdigit", "isspace", "isalpha"};
  static const std::vector<std::string> dict_methods = {"items", "keys", "values", "get"};
  if (obj.kind() == K::String && std::count(str_methods.begin(), str_methods.end(), name)) {
    // The string is shared, not copied: a bound method of a big string costs nothing to keep.
    return Value::function("str." + name, [self = obj, name](const List& a, const Kwargs& k) -> Value {
      const std::string& s = self.as_string();
      std::string what = "str." + name + "()";
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        Args p(what.c_str(), a, k, {"chars"});
        return Value(strip(s, p.get(0, Value::none()), name != "rstrip", name != "lstrip"));
      }
      if (name == "split") {
        Args p(what.c_str(), a, k, {"sep", "maxsplit"});
        return Value::list(split(s, p.get(0, Value::none()), p.integer(1, -1)));
      }
      if (name == "startswith" || name == "endswith") {
        Args p(what.c_str(), a, k, {"prefix"});
        if (!p.has(0)) throw Error(what + " takes at least 1 argument (0 given)");
        return Value(starts_or_ends(s, p.get(0), name == "startswith"));
      }
      if (name == "replace") {
        Args p(what.c_str(), a, k, {"old", "new", "count"});
        return Value(replace(s, p.str(0, ""), p.str(1, ""), p.integer(2, -1)));
      }
      if (name == "find" || name == "count") {
        Args p(what.c_str(), a, k, {"sub"});
        std::string sub = p.str(0, "");
        if (name == "find") {
          size_t at = s.find(sub);
          return Value(at == std::string::npos ? int64_t(-1) : code_point_count(s.substr(0, at)));
        }
        if (sub.empty()) return Value(code_point_count(s) + 1);
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return Value(n);
      }
      if (name == "join") {
        Args p(what.c_str(), a, k, {"iterable"});
        std::string out;
        bool first = true;
        for (const Value& x : iterate(p.get(0))) {
          if (!x.is_string()) throw Error(str_cat("sequence item: expected str instance, ", x.type_name(), " found"));
          if (!first) append_bounded(out, s);
          append_bounded(out, x.as_string());
          first = false;
        }
        return Value(out);
      }
      Args(what.c_str(), a, k, {});
      if (name == "upper") return Value(ascii_upper(s));
      if (name == "lower") return Value(ascii_lower(s));
      if (name == "title") return Value(title_case(s));
      if (name == "capitalize") return Value(capitalize(s));
      auto all = [&](int (*pred)(int)) {
        return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
      };
      if (name == "isdigit") return Value(all(::isdigit));
      if (name == "isspace") return Value(all(::isspace));
      return Value(all(::isalpha));
    });
  }
  if (obj.kind() == K::Dict && std::count(dict_methods.begin(), dict_methods.end(), name)) {
    Value d = obj;
    return Value::function("dict." + name, [d, name](const List& a, const Kwargs& k) -> Value {
      std::string what = "dict." + name + "()";
      if (name == "get") {
        Args p(what.c_str(), a, k, {"key", "default"});
        const Value* v = p.get(0).is_string() ? d.as_dict().find(p.get(0).as_string()) : nullptr;
        return v ? *v : p.get(1, Value::none());
      }
      Args(what.c_str(), a, k, {});
      List out;
      for (const auto& [key, val] : d.as_dict().items)
        out.push_back(name == "keys" ? Value(key) : name == "values" ? val : Value::list({Value(key), val}));
      return Value::list(std::move(out));
    });
  }
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no attribute '", name, "'"));
}

bool less(const Value& a, const Value& b) {
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
      return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
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

// Jinja2's builtin filters as transformers' environment has them (its tojson in place of
// Jinja2's), with Python's semantics for the values they make.
#include <algorithm>
#include <cmath>
#include <map>

#include "autograd/error.hpp"
#include "text/detail/jinja_args.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {
namespace {

std::string join(const Value& v, const std::string& sep, const Value& attribute);

// Jinja2's make_attrgetter: "a.b.0" looks up each part as an item (then an attribute), a
// part of digits as an integer.
Value attribute_of(const Value& item, const std::string& path, const Value& def = Value()) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.size() < 18 && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = get_item(cur, digits ? Value(int64_t(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur.is_undefined() && !def.is_undefined() ? def : cur;
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
  return v.is_string() && !case_sensitive ? Value(change_case(v.as_string(), CaseChange::Lower)) : v;
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
  return Value::iterator(std::move(out));
}

// Python's int(s, base) of a stripped string: a sign, the base's prefix (any with base 0),
// digits with single underscores between them. False when it is not one.
bool parse_python_int(const std::string& s, int base, int64_t& out) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  auto prefix = [&](char c) {
    return i + 1 < s.size() && s[i] == '0' && std::tolower(static_cast<unsigned char>(s[i + 1])) == c;
  };
  if (base == 0) {
    base = prefix('x') ? 16 : prefix('o') ? 8 : prefix('b') ? 2 : 10;
    if (base != 10) i += 2;
    else if (i + 1 < s.size() && s[i] == '0' && s.find_first_not_of("0_", i) != std::string::npos) return false;  // "012"
  } else if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) || (base == 2 && prefix('b'))) {
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;
  }
  if (i >= s.size()) return false;
  uint64_t x = 0;
  bool digit_before = false;
  for (; i < s.size(); ++i) {
    char c = char(std::tolower(static_cast<unsigned char>(s[i])));
    if (c == '_') {
      if (!digit_before || i + 1 >= s.size() || s[i + 1] == '_') return false;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::isalpha(static_cast<unsigned char>(c)) ? c - 'a' + 10 : 99;
    if (d >= base) return false;
    if (x > (uint64_t(INT64_MAX) - uint64_t(d)) / uint64_t(base)) throw Error("int: the integer does not fit in 64 bits");
    x = x * uint64_t(base) + uint64_t(d);
    digit_before = true;
  }
  out = neg ? -int64_t(x) : int64_t(x);
  return true;
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

// Jinja2's title filter (not str.title): each piece after '-', whitespace, '(', '{', '[' or
// '<' gets its first character upper-cased and the rest lowered ("they're" is "They're").
std::string jinja_title(const std::string& s) {
  auto is_break = [](uint32_t cp) { return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || is_python_space(cp); };
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    const bool breaking = is_break(next_code_point(s, i));
    while (i < s.size()) {
      size_t j = i;
      if (is_break(next_code_point(s, j)) != breaking) break;
      i = j;
    }
    std::string piece = s.substr(start, i - start);
    if (breaking) {
      out += piece;
      continue;
    }
    size_t first = 0;
    next_code_point(piece, first);
    out += change_case(piece.substr(0, first), CaseChange::Upper) + change_case(piece.substr(first), CaseChange::Lower);
  }
  return out;
}

// min/max with Jinja2's case_sensitive and attribute parameters.
Value extreme(const char* what, const Value& v, const List& a, const Kwargs& k, bool biggest) {
  Args p(what, a, k, {"case_sensitive", "attribute"});
  const bool cs = p.flag(0, false);
  const Value attr = p.get(1, Value::none());
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attribute_of(x, attr.str()), cs); };
  const Value* best = &items[0];
  for (const Value& x : items)
    if (biggest ? less(key(*best), key(x)) : less(key(x), key(*best))) best = &x;
  return *best;
}

// Python's round(x, n): an int stays an int (ties to even for n < 0), a float is rounded
// correctly from its binary value (printf's rounding, ties to even); Jinja2's ceil and floor
// scale by 10**n and divide back, giving a float.
Value round_value(const Value& v, int64_t n, const std::string& how) {
  if (how != "common") {
    double scale = std::pow(10.0, double(n));
    double x = how == "ceil" ? std::ceil(v.as_float() * scale) : std::floor(v.as_float() * scale);
    return Value(x / scale);
  }
  if (v.kind() != Value::Kind::Float) {
    if (n >= 0) return Value(v.as_int());
    if (n < -18) return Value(int64_t(0));
    int64_t unit = 1;
    for (int64_t i = 0; i < -n; ++i) unit *= 10;
    int64_t x = v.as_int(), q = x / unit, r = x % unit;
    if (r < 0) r += unit, --q;  // floor division
    if (2 * r > unit || (2 * r == unit && (q & 1))) ++q;
    int64_t out;
    if (__builtin_mul_overflow(q, unit, &out)) throw Error("integer overflow (integers are 64-bit here)");
    return Value(out);
  }
  double x = v.as_float();
  if (!std::isfinite(x)) return v;
  if (n < 0) {
    double scale = std::pow(10.0, double(-n));
    return Value(std::nearbyint(x / scale) * scale);
  }
  if (n > 300) return v;
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.*f", int(n), x);
  return Value(std::strtod(buf, nullptr));
}

// pprint.pformat of a short value: repr with every dict's items sorted by key.
void sorted_repr(std::string& out, const Value& v) {
  NestingGuard nesting("pprint");
  spend(1);
  if (v.is_dict()) {
    auto items = v.as_dict().items;
    std::stable_sort(items.begin(), items.end(), [](const auto& x, const auto& y) { return less(x.first, y.first); });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      sorted_repr(out, items[i].first);
      out += ": ";
      sorted_repr(out, items[i].second);
    }
    out += '}';
  } else if (v.is_list() && (v.seq() == Value::Seq::List || v.is_tuple())) {
    out += v.is_tuple() ? '(' : '[';
    for (size_t i = 0; i < v.as_list().size(); ++i) {
      if (i) out += ", ";
      sorted_repr(out, v.as_list()[i]);
    }
    if (v.is_tuple() && v.as_list().size() == 1) out += ',';
    out += v.is_tuple() ? ')' : ']';
  } else {
    out += v.repr();
  }
  need_bytes(int64_t(out.size()));
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = {
      {"string", [](const Value& v, const List& a, const Kwargs& k) { Args("string", a, k, {}); return v.is_string() ? v : Value(v.str()); }},
      {"trim", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("trim", a, k, {"chars"});
         return Value(strip(v.str(), p.get(0, Value::none()), true, true));
       }},
      {"upper", [](const Value& v, const List& a, const Kwargs& k) { Args("upper", a, k, {}); return Value(change_case(v.str(), CaseChange::Upper)); }},
      {"lower", [](const Value& v, const List& a, const Kwargs& k) { Args("lower", a, k, {}); return Value(change_case(v.str(), CaseChange::Lower)); }},
      {"title", [](const Value& v, const List& a, const Kwargs& k) { Args("title", a, k, {}); return Value(jinja_title(v.str())); }},
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
         if (v.is_undefined()) return Value::iterator(out);
         if (!v.is_dict()) throw Error(str_cat("items: expected a mapping, got ", v.type_name()));
         for (const auto& [key, val] : v.as_dict().items) out.push_back(Value::tuple({key, val}));
         return Value::iterator(std::move(out));
       }},
      {"list", [](const Value& v, const List& a, const Kwargs& k) { Args("list", a, k, {}); return Value::list(iterate(v)); }},
      {"first", [](const Value& v, const List& a, const Kwargs& k) {
         Args("first", a, k, {});
         if (v.kind() == Value::Kind::Iterator) {  // next(iter(gen)): takes one item
           List& rest = v.iterator_rest();
           if (rest.empty()) return Value::undefined("No first item, sequence was empty.");
           Value item = rest.back();
           rest.pop_back();
           return item;
         }
         List items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"last", [](const Value& v, const List& a, const Kwargs& k) {
         Args("last", a, k, {});
         if (v.kind() == Value::Kind::Iterator) throw Error("'generator' object is not reversible");
         List items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"reverse", [](const Value& v, const List& a, const Kwargs& k) {
         Args("reverse", a, k, {});
         List items = iterate(v);
         std::reverse(items.begin(), items.end());
         // Python's reversed() of a sequence is an iterator; a generator, which reversed()
         // refuses, Jinja2 turns into a reversed list.
         if (v.kind() == Value::Kind::Iterator) return Value::list(std::move(items));
         if (!v.is_string()) return Value::iterator(std::move(items));
         std::string out;
         for (const Value& c : items) out += c.as_string();
         return Value(out);
       }},
      {"sort", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("sort", a, k, {"reverse", "case_sensitive", "attribute"});
         bool rev = p.flag(0, false), cs = p.flag(1, false);
         Value attr = p.get(2, Value::none());
         List items = iterate(v);
         // attribute="a,b" sorts by a, then b (Jinja2's make_multi_attrgetter).
         std::vector<std::string> attrs;
         if (!attr.is_none())
           for (const Value& part : split(attr.str(), Value(","), -1)) attrs.push_back(part.as_string());
         auto key = [&](const Value& x) {
           if (attrs.empty()) return sort_key(x, cs);
           if (attrs.size() == 1) return sort_key(attribute_of(x, attrs[0]), cs);
           List keys;
           for (const std::string& a1 : attrs) keys.push_back(sort_key(attribute_of(x, a1), cs));
           return Value::list(std::move(keys));
         };
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
         return Value::iterator(std::move(out));
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
         return Value::iterator(std::move(out));
       }},
      {"int", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("int", a, k, {"default", "base"});
         const int64_t base = p.integer(1, 10);
         if (base != 0 && (base < 2 || base > 36)) throw Error("int() base must be >= 2 and <= 36, or 0");
         if (v.is_string()) {
           int64_t x;
           if (parse_python_int(strip(v.as_string(), Value::none(), true, true), int(base), x)) return Value(x);
         }
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
      {"dictsort", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("dictsort", a, k, {"case_sensitive", "by", "reverse"});
         bool cs = p.flag(0, false), rev = p.flag(2, false);
         std::string by = p.str(1, "key");
         if (by != "key" && by != "value") throw Error("dictsort: by must be 'key' or 'value'");
         if (!v.is_dict()) throw Error(str_cat("dictsort: expected a mapping, got ", v.type_name()));
         auto items = v.as_dict().items;
         size_t idx = by == "key" ? 0 : 1;
         List out;
         for (const auto& [key, val] : items) out.push_back(Value::tuple({key, val}));
         std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
           Value kx = sort_key(x.as_list()[idx], cs), ky = sort_key(y.as_list()[idx], cs);
           return rev ? less(ky, kx) : less(kx, ky);
         });
         return Value::list(std::move(out));
       }},
      {"min", [](const Value& v, const List& a, const Kwargs& k) { return extreme("min", v, a, k, false); }},
      {"max", [](const Value& v, const List& a, const Kwargs& k) { return extreme("max", v, a, k, true); }},
      {"sum", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("sum", a, k, {"attribute", "start"});
         Value attr = p.get(0, Value::none()), total = p.get(1, Value(int64_t(0)));
         for (const Value& x : iterate(v)) {
           Value y = attr.is_none() ? x : attribute_of(x, attr.str());
           if (!total.is_number() || !y.is_number())
             throw Error(str_cat("unsupported operand type(s) for +: '", total.type_name(), "' and '", y.type_name(), "'"));
           if (total.kind() == Value::Kind::Float || y.kind() == Value::Kind::Float) {
             total = Value(total.as_float() + y.as_float());
           } else {
             int64_t r;
             if (__builtin_add_overflow(total.as_int(), y.as_int(), &r)) throw Error("integer overflow (integers are 64-bit here)");
             total = Value(r);
           }
         }
         return total;
       }},
      {"format", [](const Value& v, const List& a, const Kwargs& k) {
         if (!a.empty() && !k.empty()) throw Error("format: can't handle positional and keyword arguments at the same time");
         if (!k.empty()) {
           Dict d;
           for (const auto& [key, val] : k) d.set(Value(key), val);
           return Value(percent_format(v.str(), Value::dict(std::move(d))));
         }
         return Value(percent_format(v.str(), Value::tuple(a)));
       }},
      {"round", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("round", a, k, {"precision", "method"});
         const int64_t precision = p.integer(0, 0);
         const std::string how = p.str(1, "common");
         if (how != "common" && how != "ceil" && how != "floor") throw Error("round: method must be common, ceil or floor");
         if (!v.is_number()) throw Error(str_cat("round: type ", v.type_name(), " doesn't define __round__ method"));
         return round_value(v, precision, how);
       }},
      {"batch", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("batch", a, k, {"linecount", "fill_with"});
         const int64_t n = p.integer(0, 0);
         if (n <= 0) throw Error("batch: linecount must be positive");
         const Value fill = p.get(1, Value::none());
         List out, cur;
         for (const Value& x : iterate(v)) {
           if (int64_t(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
           cur.push_back(x);
         }
         if (!cur.empty()) {
           if (!fill.is_none()) need_items(n), cur.resize(size_t(n), fill);
           out.push_back(Value::list(std::move(cur)));
         }
         return Value::iterator(std::move(out));
       }},
      {"slice", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("slice", a, k, {"slices", "fill_with"});
         const int64_t slices = p.integer(0, 0);
         if (slices <= 0) throw Error("slice: slices must be positive");
         need_items(slices);
         const Value fill = p.get(1, Value::none());
         List seq = iterate(v), out;
         const int64_t per = int64_t(seq.size()) / slices, extra = int64_t(seq.size()) % slices;
         int64_t offset = 0;
         for (int64_t s = 0; s < slices; ++s) {
           int64_t start = offset + s * per;
           if (s < extra) ++offset;
           int64_t end = offset + (s + 1) * per;
           List piece(seq.begin() + start, seq.begin() + end);
           if (!fill.is_none() && s >= extra) piece.push_back(fill);
           out.push_back(Value::list(std::move(piece)));
         }
         return Value::iterator(std::move(out));
       }},
      {"groupby", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("groupby", a, k, {"attribute", "default", "case_sensitive"});
         const std::string attr = p.get(0).str();
         const Value def = p.get(1, Value());
         const bool cs = p.flag(2, false);
         List items = iterate(v);
         auto key = [&](const Value& x) { return sort_key(attribute_of(x, attr, def), cs); };
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return less(key(x), key(y)); });
         List out;
         for (size_t i = 0; i < items.size();) {
           Value group_key = key(items[i]);
           List members;
           size_t j = i;
           for (; j < items.size() && equals(key(items[j]), group_key); ++j) members.push_back(items[j]);
           // Grouped case-insensitively, the group is named by its first item's own value.
           Value name = cs ? group_key : attribute_of(items[i], attr, def);
           out.push_back(Value::sequence(Value::Seq::GroupTuple, {name, Value::list(std::move(members))}));
           i = j;
         }
         return Value::list(std::move(out));
       }},
      {"attr", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("attr", a, k, {"name"});
         const std::string name = p.get(0).str();
         // Jinja2 reads only attributes here (not items); the sandbox's unsafe ones are undefined.
         if (v.kind() == Value::Kind::Namespace) {
           const Value* x = v.as_dict().find(name);
           return x ? *x : Value::undefined("'Namespace object' has no attribute '" + name + "'");
         }
         try {
           return method(v, name);
         } catch (const Error&) {
           return Value::undefined(str_cat("access to attribute '", name, "' of '", v.type_name(), "' object is unsafe"));
         }
       }},
      {"pprint", [](const Value& v, const List& a, const Kwargs& k) {
         Args("pprint", a, k, {});
         std::string out;
         sorted_repr(out, v);
         // NOTE: pprint.pformat breaks a repr longer than 80 columns over lines; that is refused.
         if (code_point_count(out) > 80) throw Error("pprint of a value longer than 80 characters is not supported");
         return Value(out);
       }},
  };
  return table;
}


}  // namespace

bool is_filter(const std::string& name) { return name == "d" || filters().count(name) > 0 || text_filters().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& value, const List& args, const Kwargs& kwargs) {
  auto it = filters().find(name == "d" ? "default" : name);
  if (it != filters().end()) return it->second(value, args, kwargs);
  auto text = text_filters().find(name);
  if (text == text_filters().end()) throw Error(str_cat("unsupported filter '", name, "'"));
  return text->second(value, args, kwargs);
}

}  // namespace xg::text::jinja::detail

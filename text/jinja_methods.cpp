// Python's str, list and dict methods as Jinja2's ImmutableSandboxedEnvironment lets a
// template call them (none that changes its object), and the str routines the filters share.
#include <algorithm>

#include "autograd/error.hpp"
#include "text/detail/jinja_args.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {

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

// Python's str.split(sep=None, maxsplit=-1), or str.rsplit (from_right): the same pieces
// with the unsplit rest on the left, whitespace before it kept.
List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  if (from_right && maxsplit >= 0) {
    List all = split(s, sep, -1);
    const bool by_space = sep.is_none() || sep.is_undefined();
    if (int64_t(all.size()) - 1 <= maxsplit) return all;
    const size_t head_parts = all.size() - size_t(maxsplit);
    std::string head;
    if (by_space) {  // up to the end of the last word of the head, as written
      size_t at = 0;
      for (size_t k = 0; k < head_parts; ++k) {
        at = s.find(all[k].as_string(), at);
        at += all[k].as_string().size();
      }
      head = s.substr(0, at);
    } else {
      for (size_t k = 0; k < head_parts; ++k) head += (k ? sep.as_string() : "") + all[k].as_string();
    }
    List out{Value(head)};
    out.insert(out.end(), all.begin() + int64_t(head_parts), all.end());
    return out;
  }
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

namespace {

// Python's normalisation of s[start:end] bounds (None for either end), in code points.
std::pair<int64_t, int64_t> bounds(int64_t n, const Value& start, const Value& end) {
  auto norm = [&](const Value& v, int64_t def) {
    if (v.is_none() || v.is_undefined()) return def;
    if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool)
      throw Error(str_cat("slice indices must be integers or None, not ", v.type_name()));
    int64_t x = v.as_int();
    if (x < 0) x += n;
    return std::min(std::max<int64_t>(x, 0), n);
  };
  return {norm(start, 0), norm(end, n)};
}

// The byte offset of code point k of s.
size_t byte_at(const std::string& s, int64_t k) {
  size_t i = 0;
  for (int64_t n = 0; n < k && i < s.size(); ++n) next_code_point(s, i);
  return i;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw Error(str_cat(start ? "startswith" : "endswith", " first arg must be str or a tuple of str, not ", a.type_name()));
    const std::string& x = a.as_string();
    return x.size() <= s.size() && (start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (affix.is_tuple()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

// Whether every code point of s passes pred (false for "", as Python's str.isX()).
template <class Pred>
bool all_code_points(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();)
    if (!pred(next_code_point(s, i))) return false;
  return true;
}

// str.islower()/isupper(): some cased character, and none of the other case.
bool cased_as(const std::string& s, bool lower) {
  bool any = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_code_point(s, i);
    if (lower ? is_upper(cp) : is_lower(cp)) return false;
    if (lower ? is_lower(cp) : is_upper(cp)) any = true;
  }
  return any;
}

bool is_title(const std::string& s) {
  bool any = false, prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_code_point(s, i);
    if (is_upper(cp)) {
      if (prev_cased) return false;
      prev_cased = any = true;
    } else if (is_lower(cp)) {
      if (!prev_cased) return false;
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return any;
}

std::string expand_tabs(const std::string& s, int64_t size) {
  std::string out;
  int64_t column = 0;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(s, i);
    if (cp == '\t') {
      if (size > 0) {
        int64_t n = size - column % size;
        need_bytes(int64_t(out.size()) + n);
        out.append(size_t(n), ' ');
        column += n;
      }
    } else {
      out.append(s, start, i - start);
      column = cp == '\n' || cp == '\r' ? 0 : column + 1;
    }
  }
  return out;
}

List split_lines(const std::string& s, bool keepends) {
  List out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    uint32_t cp = next_code_point(s, i);
    // Python's line boundaries: \n \r \r\n \v \f \x1c-\x1e \x85 \u2028 \u2029
    if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
      if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
      need_items(int64_t(out.size()) + 1);
      out.emplace_back(s.substr(start, (keepends ? i : at) - start));
      start = i;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

Value str_method(const Value& self, const std::string& name, const List& a, const Kwargs& k) {
  const std::string& s = self.as_string();
  const std::string what = "str." + name + "()";
  const char* w = what.c_str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Args p(w, a, k, {"chars"});
    return Value(strip(s, p.get(0, Value::none()), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Args p(w, a, k, {"sep", "maxsplit"});
    return Value::list(split(s, p.get(0, Value::none()), p.integer(1, -1), name == "rsplit"));
  }
  if (name == "splitlines") {
    Args p(w, a, k, {"keepends"});
    return Value::list(split_lines(s, p.flag(0, false)));
  }
  if (name == "startswith" || name == "endswith") {
    Args p(w, a, k, {"prefix", "start", "end"});
    if (!p.has(0)) throw Error(what + " takes at least 1 argument (0 given)");
    auto [from, to] = bounds(code_point_count(s), p.get(1, Value::none()), p.get(2, Value::none()));
    if (from > to) return Value(false);
    size_t b = byte_at(s, from);
    return Value(starts_or_ends(s.substr(b, byte_at(s, to) - b), p.get(0), name == "startswith"));
  }
  if (name == "replace") {
    Args p(w, a, k, {"old", "new", "count"});
    return Value(replace(s, p.str(0, ""), p.str(1, ""), p.integer(2, -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Args p(w, a, k, {"sub", "start", "end"});
    if (!p.has(0)) throw Error(what + " takes at least 1 argument (0 given)");
    std::string sub = p.str(0, "");
    const int64_t n = code_point_count(s);
    auto [from, to] = bounds(n, p.get(1, Value::none()), p.get(2, Value::none()));
    // Python finds nothing, not even "", from a start past the end.
    const Value start = p.get(1, Value::none());
    if (start.kind() == Value::Kind::Int && start.as_int() > n) from = n + 1;
    size_t b = byte_at(s, from);
    std::string part = from <= to ? s.substr(b, byte_at(s, to) - b) : std::string();
    spend_bytes(int64_t(part.size()));
    if (name == "count") {
      if (from > to) return Value(int64_t(0));
      if (sub.empty()) return Value(code_point_count(part) + 1);
      int64_t n = 0;
      for (size_t at = part.find(sub); at != std::string::npos; at = part.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    const bool right = name[0] == 'r';
    size_t at = from > to ? std::string::npos : right ? part.rfind(sub) : part.find(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") throw Error("substring not found");
      return Value(int64_t(-1));
    }
    return Value(from + code_point_count(part.substr(0, at)));
  }
  if (name == "partition" || name == "rpartition") {
    Args p(w, a, k, {"sep"});
    std::string sep = p.str(0, "");
    if (sep.empty()) throw Error("empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos)
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")}) : Value::tuple({Value(""), Value(""), Value(s)});
    return Value::tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
  }
  if (name == "join") {
    Args p(w, a, k, {"iterable"});
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
  if (name == "format") return Value(str_format(s, a, k));
  if (name == "zfill") {
    Args p(w, a, k, {"width"});
    int64_t width = p.integer(0, 0), n = code_point_count(s);
    if (width <= n) return self;
    need_bytes(width);
    size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(size_t(width - n), '0') + s.substr(sign));
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    Args p(w, a, k, {"width", "fillchar"});
    int64_t width = p.integer(0, 0), n = code_point_count(s);
    std::string fill = p.str(1, " ");
    if (code_point_count(fill) != 1) throw Error("The fill character must be exactly one character long");
    if (width <= n) return self;
    need_bytes(width * int64_t(fill.size()));
    int64_t total = width - n;
    // Python's center puts the odd space on the left when the string's length is odd... as
    // `left = total / 2 + (total & width & 1)`.
    int64_t left = name == "ljust" ? 0 : name == "rjust" ? total : total / 2 + (total & width & 1);
    std::string out;
    for (int64_t i = 0; i < left; ++i) out += fill;
    out += s;
    for (int64_t i = left; i < total; ++i) out += fill;
    return Value(out);
  }
  if (name == "expandtabs") {
    Args p(w, a, k, {"tabsize"});
    return Value(expand_tabs(s, p.integer(0, 8)));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Args p(w, a, k, {"affix"});
    std::string x = p.str(0, "");
    bool pre = name == "removeprefix";
    if (x.size() <= s.size() && (pre ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
      return Value(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
    return self;
  }
  Args(w, a, k, {});
  if (name == "upper") return Value(change_case(s, CaseChange::Upper));
  if (name == "lower") return Value(change_case(s, CaseChange::Lower));
  if (name == "casefold") return Value(change_case(s, CaseChange::Fold));
  if (name == "title") return Value(title_case(s));
  if (name == "capitalize") return Value(capitalize(s));
  if (name == "swapcase") return Value(swap_case(s));
  if (name == "islower") return Value(cased_as(s, true));
  if (name == "isupper") return Value(cased_as(s, false));
  if (name == "istitle") return Value(is_title(s));
  if (name == "isdigit") return Value(all_code_points(s, is_python_digit));
  if (name == "isdecimal") return Value(all_code_points(s, is_python_decimal));
  if (name == "isnumeric") return Value(all_code_points(s, is_python_numeric));
  if (name == "isalpha") return Value(all_code_points(s, is_python_alpha));
  if (name == "isspace") return Value(all_code_points(s, is_python_space));
  // isalnum
  return Value(all_code_points(s, [](uint32_t cp) { return is_python_alpha(cp) || is_python_numeric(cp); }));
}

const std::vector<std::string>& str_methods() {
  static const std::vector<std::string> names = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "replace", "find",
      "rfind", "index", "rindex", "count", "partition", "rpartition", "join", "format", "zfill", "ljust", "rjust",
      "center", "expandtabs", "removeprefix", "removesuffix", "upper", "lower", "casefold", "title", "capitalize",
      "swapcase", "islower", "isupper", "istitle", "isdigit", "isdecimal", "isnumeric", "isalpha", "isspace", "isalnum"};
  return names;
}

// The methods of list, dict and str that change their object: Jinja2's immutable sandbox
// refuses them by name.
bool is_mutating(const Value& obj, const std::string& name) {
  static const std::vector<std::string> list_ops = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__", "__delitem__"};
  static const std::vector<std::string> dict_ops = {"update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__"};
  const auto& ops = obj.is_dict() ? dict_ops : list_ops;
  return (obj.is_dict() || (obj.is_list() && obj.seq() == Value::Seq::List)) && std::count(ops.begin(), ops.end(), name);
}

}  // namespace

Value method(const Value& obj, const std::string& name) {
  using K = Value::Kind;
  if (is_mutating(obj, name))
    throw Error(str_cat("access to attribute '", name, "' of '", obj.type_name(), "' object is unsafe (the sandbox keeps values immutable)"));
  if (obj.kind() == K::String && std::count(str_methods().begin(), str_methods().end(), name)) {
    // The string is shared, not copied: a bound method of a big string costs nothing to keep.
    static const std::vector<std::string> markup_methods = {
        "capitalize", "title", "lower", "upper", "replace", "ljust", "rjust", "lstrip", "rstrip", "center", "strip",
        "expandtabs", "swapcase", "zfill", "casefold", "removeprefix", "removesuffix", "partition", "rpartition",
        "format", "join", "split", "rsplit", "splitlines"};
    if (!obj.is_markup() || !std::count(markup_methods.begin(), markup_methods.end(), name))
      return Value::function("str." + name, [self = obj, name](const List& a, const Kwargs& k) { return str_method(self, name, a, k); });
    // markupsafe's Markup escapes the strings passed to its methods and returns Markup.
    return Value::function("Markup." + name, [self = obj, name](const List& a, const Kwargs& k) {
      auto escaped = [](const Value& v) { return v.is_string() && !v.is_markup() ? Value::markup(html_escape(v.as_string())) : v; };
      List args;
      for (const Value& v : a) args.push_back(escaped(v));
      Kwargs kwargs;
      for (const auto& [key, v] : k) kwargs.emplace_back(key, escaped(v));
      Value r = str_method(self, name, args, kwargs);
      if (r.is_string()) return Value::markup(r.as_string());
      if (!r.is_list() || name == "partition" || name == "rpartition") return r;
      List items;
      for (const Value& v : r.as_list()) items.push_back(Value::markup(v.as_string()));
      return Value::list(std::move(items));
    });
  }
  if (obj.is_list() && (obj.seq() == Value::Seq::List || obj.seq() == Value::Seq::Tuple) &&
      (name == "index" || name == "count" || (name == "copy" && obj.seq() == Value::Seq::List))) {
    return Value::function(std::string(obj.type_name()) + "." + name, [self = obj, name](const List& a, const Kwargs& k) -> Value {
      std::string what = std::string(self.type_name()) + "." + name + "()";
      if (name == "copy") {
        Args(what.c_str(), a, k, {});
        return Value::list(self.as_list());
      }
      Args p(what.c_str(), a, k, {"value"});
      if (!p.has(0)) throw Error(what + " takes exactly one argument (0 given)");
      const List& items = self.as_list();
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        spend(1);
        if (!equals(items[i], p.get(0))) continue;
        if (name == "index") return Value(int64_t(i));
        ++n;
      }
      if (name == "index") throw Error(str_cat(p.get(0).repr(), " is not in ", self.type_name()));
      return Value(n);
    });
  }
  static const std::vector<std::string> dict_methods = {"items", "keys", "values", "get", "copy"};
  if (obj.kind() == K::Dict && std::count(dict_methods.begin(), dict_methods.end(), name)) {
    return Value::function("dict." + name, [d = obj, name](const List& a, const Kwargs& k) -> Value {
      std::string what = "dict." + name + "()";
      if (name == "get") {
        Args p(what.c_str(), a, k, {"key", "default"});
        const Value* v = d.as_dict().find(p.get(0));
        return v ? *v : p.get(1, Value::none());
      }
      Args(what.c_str(), a, k, {});
      if (name == "copy") return Value::dict(d.as_dict());
      List out;
      for (const auto& [key, val] : d.as_dict().items)
        out.push_back(name == "keys" ? key : name == "values" ? val : Value::tuple({key, val}));
      using S = Value::Seq;
      return Value::sequence(name == "keys" ? S::DictKeys : name == "values" ? S::DictValues : S::DictItems, std::move(out));
    });
  }
  return Value::undefined(str_cat("'", obj.type_name(), " object' has no attribute '", name, "'"));
}

}  // namespace xg::text::jinja::detail

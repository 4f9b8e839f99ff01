// Values of the Jinja subset with Python's semantics: truthiness, str()/repr(), ==, and
// json.dumps as transformers' tojson filter calls it.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "autograd/error.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_utf8.hpp"
#include "text/jinja.hpp"

namespace xg::text::jinja {
namespace {

// `object` shared, and held by the current render's budget while it lives (its memory bound);
// outside a render, just shared.
template <class T>
std::shared_ptr<T> held(T&& object, int64_t bytes) {
  const std::shared_ptr<detail::Budget>& budget = detail::current_budget();
  if (!budget) return std::make_shared<T>(std::move(object));
  budget->hold(bytes);
  return std::shared_ptr<T>(new T(std::move(object)), [budget = budget, bytes](T* p) {
    budget->release(bytes);
    delete p;
  });
}

// An undefined value's message is copied with the value: a long one (a key's repr) is cut.
constexpr size_t kMaxMessageBytes = 300;

}  // namespace

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  for (const auto& [k, v] : items)
    if (!k.is_string() && equals(k, key)) return &v;
  return nullptr;
}

// 1 + the deepest nesting `d` below a new list or dict; more than kMaxValueDepth is an error (a
// template building [[[...]]] in a loop: each level's destructor calls the next's, past the stack).
static int32_t one_deeper(int32_t d) {
  if (d + 1 > detail::kMaxValueDepth)
    throw Error(str_cat("a value nested deeper than ", detail::kMaxValueDepth, " levels"));
  return d + 1;
}

void Dict::set(Value key, Value value) {
  if (!key.is_hashable()) throw Error(str_cat("unhashable type: '", key.type_name(), "'"));
  depth = std::max(depth, one_deeper(std::max(key.depth(), value.depth())));
  for (auto& [k, v] : items)
    if (key.is_string() ? k.is_string() && k.as_string() == key.as_string() : !k.is_string() && equals(k, key)) {
      v = std::move(value);  // Python keeps the first key ({1: 'a', 1.0: 'b'} is {1: 'b'})
      return;
    }
  items.emplace_back(std::move(key), std::move(value));
}

bool Value::is_hashable() const {
  detail::NestingGuard nesting("hash");
  switch (kind_) {
    case Kind::Dict: case Kind::Namespace: return false;
    case Kind::List:
      if (!is_tuple()) return false;
      return std::all_of(list_->begin(), list_->end(), [](const Value& v) { return v.is_hashable(); });
    default: return true;
  }
}

Value::Value(std::string s) : kind_(Kind::String) {
  detail::spend_bytes(int64_t(s.size()));
  int64_t bytes = int64_t(s.capacity()) + detail::kObjectBytes;
  s_ = held<const std::string>(std::move(s), bytes);
}

Value Value::undefined(std::string message) {
  Value v;
  if (message.size() > kMaxMessageBytes) {
    size_t cut = kMaxMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;  // not inside a code point
    message = message.substr(0, cut) + "...";
  }
  v.name_ = std::move(message);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::List;
  int32_t d = 0;
  for (const Value& x : items) d = std::max(d, x.depth());
  v.depth_ = one_deeper(d);
  detail::spend(1 + int64_t(items.size()));
  int64_t bytes = int64_t(items.capacity() * sizeof(Value)) + detail::kObjectBytes;
  v.list_ = held<List>(std::move(items), bytes);
  return v;
}

Value Value::tuple(List items) { return sequence(Seq::Tuple, std::move(items)); }

Value Value::sequence(Seq seq, List items, std::string range_repr) {
  Value v = list(std::move(items));
  v.seq_ = seq;
  v.name_ = std::move(range_repr);
  return v;
}

Value Value::iterator(List items) {
  std::reverse(items.begin(), items.end());
  Value v = list(std::move(items));
  v.kind_ = Kind::Iterator;
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::Dict;
  int32_t deepest = 0;
  for (const auto& [key, value] : d.items) deepest = std::max({deepest, key.depth(), value.depth()});
  d.depth = one_deeper(deepest);
  int64_t bytes = int64_t(d.items.capacity() * sizeof(d.items[0])) + detail::kObjectBytes;
  detail::spend(1 + int64_t(d.items.size()));
  v.dict_ = held<Dict>(std::move(d), bytes);
  return v;
}

Value Value::ns(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.name_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined: case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0;
    case Kind::String: return !s_->empty();
    case Kind::List: return !list_->empty();
    case Kind::Dict: return !dict_->items.empty();
    case Kind::Namespace: case Kind::Function: case Kind::Iterator: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List:
      switch (seq_) {
        case Seq::List: return "list";
        case Seq::Tuple: case Seq::GroupTuple: return "tuple";
        case Seq::DictItems: return "dict_items";
        case Seq::DictKeys: return "dict_keys";
        case Seq::DictValues: return "dict_values";
        case Seq::Range: return "range";
      }
      return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
    case Kind::Iterator: return "generator";
  }
  return "?";
}

namespace {

// Python's repr(float): the shortest digits that round-trip, positional for exponents
// -4..15 ("0.0001", "1e+16", "1.5", "2.0").
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else {
      if (digits.size() <= size_t(exp) + 1) digits += std::string(exp + 1 - digits.size(), '0');
      std::string frac = digits.substr(exp + 1);
      out += digits.substr(0, exp + 1) + "." + (frac.empty() ? "0" : frac);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

// An error when `out`, being built, has passed the memory bound. Escaping loops call it every
// 4 KB of input, so a string of control characters cannot grow fourfold unchecked.
void check_built(const std::string& out) { detail::need_bytes(int64_t(out.size())); }

void string_repr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  char q = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  detail::spend_bytes(int64_t(s.size()));
  out += q;
  for (size_t i = 0, next_check = 0; i < s.size();) {
    if (i >= next_check) check_built(out), next_check = i + 4096;
    size_t start = i;
    uint32_t c = detail::next_code_point(s, i);
    char buf[16];
    if (c == '\\' || c == static_cast<unsigned char>(q)) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (i - start > 1 && !detail::is_python_printable(c))) {
      // Python escapes what str.isprintable() refuses: \xNN, \uNNNN or \UNNNNNNNN
      std::snprintf(buf, sizeof buf, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
      out += buf;
    } else {
      out.append(s, start, i - start);
    }
  }
  out += q;
}

// Python's repr(v) appended to out: every node is a step, and out stays within the memory
// bound (a list holding the same big string many times would print gigabytes).
void repr_into(std::string& out, const Value& v) {
  detail::NestingGuard nesting("repr");
  using K = Value::Kind;
  detail::spend(1);
  switch (v.kind()) {
    case K::String:
      if (v.is_markup()) out += "Markup(";
      string_repr(out, v.as_string());
      if (v.is_markup()) out += ')';
      break;
    case K::List: {
      using S = Value::Seq;
      if (v.seq() == S::Range) {
        out += v.name();
        break;
      }
      const bool tuple = v.is_tuple();
      const char* view = v.seq() == S::DictItems ? "dict_items(" : v.seq() == S::DictKeys ? "dict_keys(" : v.seq() == S::DictValues ? "dict_values(" : "";
      out += view;
      out += tuple ? '(' : '[';
      for (size_t k = 0; k < v.as_list().size(); ++k) {
        if (k) out += ", ";
        repr_into(out, v.as_list()[k]);
      }
      if (tuple && v.as_list().size() == 1) out += ',';  // ('a',)
      out += tuple ? ')' : ']';
      if (*view) out += ')';
      break;
    }
    case K::Dict: case K::Namespace: {
      out += v.kind() == K::Dict ? "{" : "<Namespace {";
      for (size_t k = 0; k < v.as_dict().items.size(); ++k) {
        if (k) out += ", ";
        repr_into(out, v.as_dict().items[k].first);
        out += ": ";
        repr_into(out, v.as_dict().items[k].second);
      }
      out += v.kind() == K::Dict ? "}" : "}>";
      break;
    }
    default: out += v.repr();  // a scalar
  }
  check_built(out);
}

}  // namespace

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::String: return *s_;
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return b_ ? "True" : "False";
    case Kind::Int: return std::to_string(i_);
    case Kind::Float: return float_repr(f_);
    case Kind::String: case Kind::List: case Kind::Dict: case Kind::Namespace: {
      std::string out;
      repr_into(out, *this);
      return out;
    }
    case Kind::Function: case Kind::Iterator:
      // NOTE: Python prints these with their memory address ("<generator object ... at 0x7f...>").
      throw Error(str_cat("printing a ", type_name(), " is not supported (Python prints its address)",
                          kind_ == Kind::Iterator ? "; convert it with |list first" : ""));
  }
  return "";
}

// Every node compared is a step, and so is every 64 bytes of equal-length strings: a deep
// comparison of lists that share sublists could otherwise visit billions of nodes. As Python
// does, an object equals itself without a look inside.
bool equals(const Value& a, const Value& b) {
  detail::NestingGuard nesting("==");
  using K = Value::Kind;
  detail::spend(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::Float || b.kind() == K::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined: case K::None: return true;
    case K::String:
      if (&a.as_string() == &b.as_string()) return true;
      if (a.as_string().size() != b.as_string().size()) return false;
      detail::spend_bytes(int64_t(a.as_string().size()));
      return a.as_string() == b.as_string();
    case K::List: {
      using S = Value::Seq;
      const List &x = a.as_list(), &y = b.as_list();
      if (&x == &y) return true;
      if ((a.is_tuple() ? S::Tuple : a.seq()) != (b.is_tuple() ? S::Tuple : b.seq()) || x.size() != y.size()) return false;
      if (a.seq() == S::DictValues) return false;  // Python compares dict_values by identity
      if (a.seq() == S::DictKeys || a.seq() == S::DictItems)  // set-like: the same items in any order
        return std::all_of(x.begin(), x.end(), [&](const Value& item) {
          return std::any_of(y.begin(), y.end(), [&](const Value& other) { return equals(item, other); });
        });
      for (size_t k = 0; k < x.size(); ++k)
        if (!equals(x[k], y[k])) return false;
      return true;
    }
    case K::Dict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equals(v, *w)) return false;
      }
      return true;
    }
    case K::Namespace: return &a.namespace_entries() == &b.namespace_entries();
    case K::Iterator: return &a.iterator_rest() == &b.iterator_rest();
    case K::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value(j.get<bool>());
    case T::number_integer: return Value(j.get<int64_t>());
    case T::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case T::number_float: return Value(j.get<double>());
    case T::string: return Value(j.get<std::string>());
    case T::array: {
      List items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case T::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.items.emplace_back(Value(k), from_json(v));
      return Value::dict(std::move(d));
    }
    default: throw Error("jinja: cannot convert a binary or discarded JSON value");
  }
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  detail::spend_bytes(int64_t(s.size()));
  out += '"';
  for (size_t i = 0, next_check = 0; i < s.size();) {
    if (i >= next_check) check_built(out), next_check = i + 4096;
    size_t start = i;
    uint32_t cp = detail::next_code_point(s, i);
    char buf[16];
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x80)) {
          if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
          }
          out += buf;
        } else {
          out.append(s, start, i - start);
        }
    }
  }
  out += '"';
}

std::string json_float(double f) {
  return std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : Value(f).repr();
}

void dump(std::string& out, const Value& v, const JsonDump& o, int depth) {
  detail::NestingGuard nesting("tojson");
  using K = Value::Kind;
  const bool pretty = o.indent >= 0;
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator : pretty ? "," : ", ";
  const std::string key_sep = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int d) {
    if (!pretty) return;
    detail::need_bytes(int64_t(out.size()) + int64_t(o.indent) * d);  // tojson(indent=10**9)
    out += "\n" + std::string(size_t(o.indent) * d, ' ');
  };
  detail::spend(1);
  check_built(out);
  switch (v.kind()) {
    case K::None: out += "null"; return;
    case K::Bool: out += v.as_bool() ? "true" : "false"; return;
    case K::Int: out += std::to_string(v.as_int()); return;
    case K::Float: out += json_float(v.as_float()); return;
    case K::String: json_string(out, v.as_string(), o.ensure_ascii); return;
    case K::List: {
      const List& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        dump(out, items[k], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case K::Dict: {
      // json.dumps writes a number, bool or None key as its JSON text; other keys are an error.
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [key, val] : v.as_dict().items) {
        if (key.is_string()) items.emplace_back(key.as_string(), &val);
        else if (key.is_none()) items.emplace_back("null", &val);
        else if (key.kind() == K::Bool) items.emplace_back(key.as_bool() ? "true" : "false", &val);
        else if (key.kind() == K::Int) items.emplace_back(std::to_string(key.as_int()), &val);
        else if (key.kind() == K::Float) items.emplace_back(json_float(key.as_float()), &val);
        else throw Error(str_cat("keys must be str, int, float, bool or None, not ", key.type_name()));
      }
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        for (const auto& [key, val] : v.as_dict().items)
          if (!key.is_string()) throw Error("tojson: sort_keys with keys that are not all strings is not supported");
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(depth + 1);
        json_string(out, items[k].first, o.ensure_ascii);
        out += key_sep;
        dump(out, *items[k].second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw Error(str_cat("Object of type ", v.type_name(), " is not JSON serializable",
                          v.is_undefined() && !v.name().empty() ? " (" + v.name() + ")" : ""));
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonDump& opts) {
  std::string out;
  dump(out, v, opts, 0);
  return out;
}

}  // namespace xg::text::jinja

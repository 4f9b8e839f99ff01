// Python's string formatting for the Jinja subset: `'%05.2f' % x` (printf-style), str.format
// with its format-spec mini-language, and Unicode's character classes and case mapping as
// Python's str methods see them (ICU's general categories and full case mappings).
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/locid.h>
#include <unicode/stringoptions.h>

#include <cmath>
#include <cstdio>

#include "autograd/error.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {

bool is_python_printable(uint32_t cp) {
  if (cp == ' ') return true;
  switch (u_charType(UChar32(cp))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR: case U_UNASSIGNED:
    case U_SPACE_SEPARATOR: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR:
      return false;
    default: return true;
  }
}

bool is_python_alpha(uint32_t cp) { return u_isalpha(UChar32(cp)) && u_charType(UChar32(cp)) <= U_OTHER_LETTER; }
bool is_python_decimal(uint32_t cp) { return u_charType(UChar32(cp)) == U_DECIMAL_DIGIT_NUMBER; }
bool is_python_digit(uint32_t cp) {
  int t = u_getIntPropertyValue(UChar32(cp), UCHAR_NUMERIC_TYPE);
  return t == U_NT_DECIMAL || t == U_NT_DIGIT;
}
bool is_python_numeric(uint32_t cp) { return u_getIntPropertyValue(UChar32(cp), UCHAR_NUMERIC_TYPE) != U_NT_NONE; }
bool is_cased(uint32_t cp) { return u_hasBinaryProperty(UChar32(cp), UCHAR_CASED); }
bool is_lower(uint32_t cp) { return u_hasBinaryProperty(UChar32(cp), UCHAR_LOWERCASE); }
bool is_upper(uint32_t cp) { return u_hasBinaryProperty(UChar32(cp), UCHAR_UPPERCASE) || u_charType(UChar32(cp)) == U_TITLECASE_LETTER; }

std::string change_case(const std::string& s, CaseChange how) {
  spend_bytes(int64_t(s.size()));
  need_bytes(int64_t(s.size()) * 3);  // a full case mapping can triple a string ('ΐ'.upper())
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())));
  switch (how) {
    case CaseChange::Upper: u.toUpper(icu::Locale::getRoot()); break;
    case CaseChange::Lower: u.toLower(icu::Locale::getRoot()); break;
    case CaseChange::Fold: u.foldCase(); break;
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

namespace {

// One code point's full mapping (u_strToUpper on it alone): 'ß' upper is "SS".
std::string map_code_point(uint32_t cp, CaseChange how) {
  std::string one;
  append_utf8(one, cp);
  return change_case(one, how);
}

// One code point's full title-case mapping ('ﬁ' is "Fi", 'ǆ' is 'ǅ').
std::string title_of(uint32_t cp) {
  icu::UnicodeString u{UChar32(cp)};
  u.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace

// Python's str.title(): a cased character after a cased one is lowered, any other is
// title-cased ("they're" becomes "They'Re").
std::string title_case(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(s, i);
    if (i - start == 1 && cp >= 0x80) {  // a byte that is not UTF-8 stays
      out += s[start];
      prev_cased = false;
      continue;
    }
    out += prev_cased ? map_code_point(cp, CaseChange::Lower) : title_of(cp);
    prev_cased = is_cased(cp);
  }
  return out;
}

// Python's str.capitalize(): the first character title-cased, the rest lowered.
std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  size_t i = 0;
  uint32_t cp = next_code_point(s, i);
  return title_of(cp) + change_case(s.substr(i), CaseChange::Lower);
}

std::string swap_case(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(s, i);
    if (is_upper(cp)) out += map_code_point(cp, CaseChange::Lower);
    else if (is_lower(cp)) out += map_code_point(cp, CaseChange::Upper);
    else out.append(s, start, i - start);
  }
  return out;
}

namespace {

// `s` padded with `fill` to `width` code points: '<' left, '>' right, '^' centred (the extra
// one on the right, as str.format does).
std::string pad(const std::string& s, int64_t width, char align, const std::string& fill) {
  int64_t n = code_point_count(s);
  if (width <= n) return s;
  need_bytes(width * int64_t(fill.size()));
  int64_t total = width - n, left = align == '<' ? 0 : align == '>' ? total : total / 2;
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = left; k < total; ++k) out += fill;
  return out;
}

// The digits of |x| in base 8, 10 or 16 (upper: A-F).
std::string int_digits(int64_t x, int base, bool upper) {
  uint64_t u = x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x);
  if (u == 0) return "0";
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  for (; u; u /= uint64_t(base)) out.insert(out.begin(), digits[u % uint64_t(base)]);
  return out;
}

// snprintf of one double with a C format ("%.*e" and friends), as Python's float formatting
// gives the same digits for finite values, and "inf"/"nan" for the others.
std::string c_float(const char* fmt, int precision, double x) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, fmt, precision, x);
  if (n < 0 || n >= int(sizeof buf)) {
    std::string big(size_t(std::max(n, 0)) + 1, '\0');
    std::snprintf(big.data(), big.size(), fmt, precision, x);
    big.pop_back();
    return big;
  }
  return std::string(buf, size_t(n));
}

int64_t as_index(const Value& v, const char* what) {
  if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool) throw Error(str_cat(what, " must be an integer, not ", v.type_name()));
  return v.as_int();
}

// The digits of a float in Python's e/f/g formats (upper case for E, F, G), no sign handling
// beyond what C prints; `alt` is the '#' flag.
std::string float_body(double x, char type, int64_t precision, bool alt) {
  if (precision < 0) precision = 6;
  if (precision > 300) throw Error("formatting a float with a precision above 300 is not supported");
  std::string fmt = "%";
  if (alt) fmt += '#';
  fmt += ".*";
  fmt += type;
  return c_float(fmt.c_str(), int(precision), x);
}

// A formatted number's pieces: the sign ("-", "+", " " or ""), the body (digits, with any
// "0x" after the sign kept apart in prefix).
struct Number {
  std::string sign, prefix, body;
};

std::string sign_of(bool negative, char sign_flag) {
  return negative ? "-" : sign_flag == '+' ? "+" : sign_flag == ' ' ? " " : "";
}

// Laid out to width: zero padding goes between the sign (and prefix) and the digits.
std::string lay_out(const Number& n, int64_t width, char align, const std::string& fill, bool zero) {
  std::string whole = n.sign + n.prefix + n.body;
  if (zero && align == '=') {
    int64_t missing = width - code_point_count(whole);
    if (missing > 0) {
      need_bytes(missing * int64_t(fill.size()));
      std::string padding;
      for (int64_t k = 0; k < missing; ++k) padding += fill;
      return n.sign + n.prefix + padding + n.body;
    }
    return whole;
  }
  return pad(whole, width, align, fill);
}

// Python's %-formatting of one value by its conversion character.
std::string percent_one(char type, const Value& v, const std::string& flags, int64_t width, int64_t precision) {
  const bool left = flags.find('-') != std::string::npos;
  const bool zero = flags.find('0') != std::string::npos && !left;
  const bool alt = flags.find('#') != std::string::npos;
  const char sign_flag = flags.find('+') != std::string::npos ? '+' : flags.find(' ') != std::string::npos ? ' ' : 0;
  const char align = left ? '<' : '>';
  switch (type) {
    case 's': case 'r': case 'a': {
      std::string s = type == 's' ? v.str() : v.repr();
      if (type == 'a') s = ascii_repr(s);
      if (precision >= 0 && precision < code_point_count(s)) {
        size_t i = 0;
        for (int64_t k = 0; k < precision; ++k) next_code_point(s, i);
        s.resize(i);
      }
      return pad(s, width, align, " ");
    }
    case 'c': {
      std::string s;
      if (v.is_string()) {
        if (code_point_count(v.as_string()) != 1) throw Error("%c requires int or char");
        s = v.as_string();
      } else if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) {
        if (v.as_int() < 0 || v.as_int() > 0x10FFFF) throw Error("%c arg not in range(0x110000)");
        append_utf8(s, uint32_t(v.as_int()));
      } else {
        throw Error("%c requires int or char");
      }
      return pad(s, width, align, " ");
    }
    case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': {
      int64_t x;
      if (v.kind() == Value::Kind::Float) {
        if (type != 'd' && type != 'i' && type != 'u')
          throw Error(str_cat("%", type, " format: an integer is required, not float"));
        double f = v.as_float();
        if (!std::isfinite(f)) throw Error(std::isnan(f) ? "cannot convert float NaN to integer" : "cannot convert float infinity to integer");
        if (std::fabs(f) >= 9.2e18) throw Error("integer overflow (integers are 64-bit here)");
        x = int64_t(f);
      } else if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) {
        x = v.as_int();
      } else {
        throw Error(str_cat("%", type, " format: ", type == 'd' || type == 'i' || type == 'u' ? "a real number" : "an integer",
                            " is required, not ", v.type_name()));
      }
      Number n;
      n.sign = sign_of(x < 0, sign_flag);
      int base = type == 'o' ? 8 : type == 'x' || type == 'X' ? 16 : 10;
      n.body = int_digits(x, base, type == 'X');
      if (precision > int64_t(n.body.size())) n.body.insert(0, size_t(precision) - n.body.size(), '0');
      if (alt && base != 10) n.prefix = type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
      return lay_out(n, width, zero ? '=' : align, zero ? "0" : " ", zero);
    }
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
      if (!v.is_number()) throw Error(str_cat("must be real number, not ", v.type_name()));
      double f = v.as_float();
      Number n;
      n.sign = sign_of(std::signbit(f) && !std::isnan(f), sign_flag);
      n.body = float_body(std::fabs(f), type, precision, alt);
      const bool finite = std::isfinite(f);
      return lay_out(n, width, zero && finite ? '=' : align, zero && finite ? "0" : " ", zero && finite);
    }
    default: throw Error(str_cat("unsupported format character '", type, "' (0x", int_digits(static_cast<unsigned char>(type), 16, false), ")"));
  }
}

}  // namespace

std::string ascii_repr(const std::string& repr) {
  std::string out;
  for (size_t i = 0; i < repr.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(repr, i);
    if (cp < 0x80 || i - start == 1) {
      out.append(repr, start, i - start);
      continue;
    }
    char buf[16];
    std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
    out += buf;
  }
  return out;
}

// Python's `fmt % args`: a tuple gives the positional values, a dict the %(name)s ones, any
// other value is the one value.
std::string percent_format(const std::string& fmt, const Value& args) {
  spend_bytes(int64_t(fmt.size()));
  List positional;
  const Value* mapping = args.is_dict() ? &args : nullptr;
  if (args.is_tuple()) positional = args.as_list();
  else positional.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  auto take = [&]() -> const Value& {
    if (next >= positional.size()) throw Error("not enough arguments for format string");
    return positional[next++];
  };
  std::string out;
  for (size_t i = 0; i < fmt.size();) {
    size_t pct = fmt.find('%', i);
    out.append(fmt, i, pct == std::string::npos ? std::string::npos : pct - i);
    if (pct == std::string::npos) break;
    i = pct + 1;
    if (i >= fmt.size()) throw Error("incomplete format");
    const Value* value = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) throw Error("incomplete format key");
      if (!mapping) throw Error("format requires a mapping");
      const Value* found = mapping->as_dict().find(fmt.substr(i + 1, close - i - 1));
      if (!found) throw Error(str_cat("KeyError: '", fmt.substr(i + 1, close - i - 1), "'"));
      keyed = *found;
      value = &keyed;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) flags += fmt[i++];
    auto number = [&]() -> int64_t {
      if (i < fmt.size() && fmt[i] == '*') {
        ++i;
        return as_index(take(), "* wants int");
      }
      int64_t n = 0;
      bool any = false;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
        n = n * 10 + (fmt[i++] - '0');
        if (n > 100000) throw Error("width or precision too big");
        any = true;
      }
      return any ? n : -1;
    };
    int64_t width = number();
    int64_t precision = -1;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = std::max<int64_t>(0, number());
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw Error("incomplete format");
    char type = fmt[i++];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (width < -1) flags += '-', width = -width;  // a negative * width left-justifies
    const Value& v = value ? *value : take();
    append_bounded(out, percent_one(type, v, flags, width, precision));
  }
  if (next < positional.size() && !(used_mapping || (positional.size() == 1 && !args.is_tuple() && (args.is_dict() || args.is_list()))))
    throw Error("not all arguments converted during string formatting");
  return out;
}

namespace {

// format(value, spec) with Python's format-spec mini-language:
// [[fill]align][sign][#][0][width][,|_][.precision][type]
std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.str();
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  {
    size_t j = 0;
    next_code_point(spec, j);
    if (j < spec.size() && std::string("<>^=").find(spec[j]) != std::string::npos) {
      fill = spec.substr(0, j);
      align = spec[j];
      i = j + 1;
    } else if (std::string("<>^=").find(spec[0]) != std::string::npos) {
      align = spec[0];
      i = 1;
    }
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false, zero = false;
  if (i < spec.size() && spec[i] == '#') alt = true, ++i;
  if (i < spec.size() && spec[i] == '0') zero = true, ++i;
  int64_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
    width = width * 10 + (spec[i++] - '0');
    if (width > 100000) throw Error("format width too big");
  }
  char grouping = 0;
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) grouping = spec[i++];
  int64_t precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    bool any = false;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
      precision = precision * 10 + (spec[i++] - '0');
      if (precision > 300) throw Error("format precision too big");
      any = true;
    }
    if (!any) throw Error("Format specifier missing precision");
  }
  char type = 0;
  if (i < spec.size()) type = spec[i++];
  if (i != spec.size()) throw Error("Invalid format specifier '" + spec + "'");
  if (zero && !align) align = '=', fill = "0";

  if (v.is_string()) {
    if (type && type != 's') throw Error(str_cat("Unknown format code '", type, "' for object of type 'str'"));
    if (sign || alt || grouping || align == '=') throw Error("Sign, alternate form, grouping or '=' alignment not allowed in string format specifier");
    std::string s = v.as_string();
    if (precision >= 0 && precision < code_point_count(s)) {
      size_t k = 0;
      for (int64_t n = 0; n < precision; ++n) next_code_point(s, k);
      s.resize(k);
    }
    return pad(s, width, align ? align : '<', fill);
  }
  if (!v.is_number()) throw Error(str_cat("unsupported format string passed to ", v.type_name(), ".__format__"));
  if (!align) align = '>';
  const bool is_int = v.kind() != Value::Kind::Float;  // a bool with a spec formats as its int
  Number n;
  if (is_int && (!type || std::string("bcdoxXn").find(type) != std::string::npos)) {
    if (precision >= 0) throw Error("Precision not allowed in integer format specifier");
    int64_t x = v.as_int();
    if (type == 'c') {
      if (x < 0 || x > 0x10FFFF) throw Error("%c arg not in range(0x110000)");
      append_utf8(n.body, uint32_t(x));
      return pad(n.body, width, align == '=' ? '>' : align, fill);
    }
    n.sign = sign_of(x < 0, sign);
    if (type == 'b') {
      uint64_t u = x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x);
      do n.body.insert(n.body.begin(), char('0' + (u & 1))); while (u >>= 1);
    } else {
      n.body = int_digits(x, type == 'o' ? 8 : type == 'x' || type == 'X' ? 16 : 10, type == 'X');
    }
    if (alt && type && std::string("boxX").find(type) != std::string::npos) n.prefix = str_cat("0", type);
    if (grouping) {
      int every = type == 'b' || type == 'o' || type == 'x' || type == 'X' ? 4 : 3;
      std::string grouped;
      for (size_t k = 0; k < n.body.size(); ++k) {
        if (k && (n.body.size() - k) % size_t(every) == 0) grouped += grouping;
        grouped += n.body[k];
      }
      n.body = grouped;
    }
    return lay_out(n, width, align, fill, align == '=');
  }
  if (!type || std::string("eEfFgG%n").find(type) == std::string::npos)
    throw Error(str_cat("Unknown format code '", type, "' for object of type '", v.type_name(), "'"));
  double f = v.as_float();
  n.sign = sign_of(std::signbit(f) && !std::isnan(f), sign);
  double a = std::fabs(f);
  if (type == '%') {
    n.body = float_body(a * 100, 'f', precision, alt) + "%";
  } else if (type == 'n') {
    n.body = float_body(a, 'g', precision, alt);
  } else {
    n.body = float_body(a, type, precision, alt);
  }
  if (grouping && std::isfinite(f)) {
    size_t int_end = n.body.find_first_not_of("0123456789");
    if (int_end == std::string::npos) int_end = n.body.size();
    std::string grouped;
    for (size_t k = 0; k < int_end; ++k) {
      if (k && (int_end - k) % 3 == 0) grouped += grouping;
      grouped += n.body[k];
    }
    n.body = grouped + n.body.substr(int_end);
  }
  return lay_out(n, width, align, fill, align == '=');
}

// A float with no presentation type: repr without a precision; with one, like 'g' but never
// without a digit after the point, and scientific from an exponent of precision - 1.
std::string format_float_no_type(const Value& v, const std::string& spec) {
  size_t dot = spec.find('.');
  if (dot == std::string::npos) return format_spec(Value(v.str()), spec.find_first_of("<>^=") != std::string::npos ? spec : ">" + spec);
  int64_t p = std::max<int64_t>(1, std::atoll(spec.c_str() + dot + 1));
  double f = v.as_float();
  if (!std::isfinite(f)) return format_spec(v, spec + "g");
  std::string e = c_float("%.*e", int(p - 1), std::fabs(f));
  int exp = std::atoi(e.c_str() + e.find('e') + 1);
  std::string body;
  if (exp >= -4 && exp < p - 1) {
    body = c_float("%.*f", int(p - 1 - exp), std::fabs(f));
    if (body.find('.') != std::string::npos) {
      while (body.back() == '0') body.pop_back();
      if (body.back() == '.') body += '0';
    } else {
      body += ".0";
    }
  } else {
    std::string mant = e.substr(0, e.find('e'));
    if (mant.find('.') != std::string::npos) {
      while (mant.back() == '0') mant.pop_back();
      if (mant.back() == '.') mant.pop_back();
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    body = mant + ebuf;
  }
  // The sign and layout come from formatting the digits as a string of the same width.
  std::string head = spec.substr(0, dot);
  Number n;
  char sign = head.find('+') != std::string::npos ? '+' : head.find(' ') != std::string::npos ? ' ' : 0;
  n.sign = sign_of(std::signbit(f), sign);
  n.body = body;
  std::string width_digits;
  for (char c : head)
    if (std::isdigit(static_cast<unsigned char>(c))) width_digits += c;
  int64_t width = width_digits.empty() ? 0 : std::atoll(width_digits.c_str());
  return lay_out(n, width, '>', " ", false);
}

}  // namespace

// Python's str.format: {} {0} {name} fields with .attr and [key] lookups, !r/!s/!a
// conversions and a format spec (nested {} inside a spec is not supported).
std::string str_format(const std::string& fmt, const List& args, const Kwargs& kwargs) {
  spend_bytes(int64_t(fmt.size()));
  std::string out;
  size_t auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < fmt.size();) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        i += 2;
        continue;
      }
      throw Error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      i += 2;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw Error("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) throw Error("str.format: nested replacement fields in a format spec are not supported");
    i = close + 1;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    size_t bang = field.find('!');
    if (bang != std::string::npos) conv = field.substr(bang + 1), field.resize(bang);
    size_t name_end = field.find_first_of(".[");
    std::string first = field.substr(0, name_end);
    Value v;
    if (first.empty() || std::all_of(first.begin(), first.end(), ::isdigit)) {
      size_t k;
      if (first.empty()) {
        if (manual) throw Error("cannot switch from manual field specification to automatic field numbering");
        automatic = true;
        k = auto_index++;
      } else {
        if (automatic) throw Error("cannot switch from automatic field numbering to manual field specification");
        manual = true;
        if (first.size() > 9) throw Error(str_cat("Replacement index ", first, " out of range for positional args tuple"));
        k = size_t(std::stoul(first));
      }
      if (k >= args.size()) throw Error(str_cat("Replacement index ", k, " out of range for positional args tuple"));
      v = args[k];
    } else {
      auto it = std::find_if(kwargs.begin(), kwargs.end(), [&](const auto& kv) { return kv.first == first; });
      if (it == kwargs.end()) throw Error(str_cat("KeyError: '", first, "'"));
      v = it->second;
    }
    // The lookups after the name: Jinja2's sandboxed formatter reads attributes as the template does.
    for (size_t k = name_end; k != std::string::npos && k < field.size();) {
      if (field[k] == '.') {
        size_t e = field.find_first_of(".[", k + 1);
        v = get_attr(v, field.substr(k + 1, e == std::string::npos ? std::string::npos : e - k - 1));
        k = e;
      } else {
        size_t e = field.find(']', k);
        if (e == std::string::npos) throw Error("Missing ']' in format string");
        std::string key = field.substr(k + 1, e - k - 1);
        const bool index = !key.empty() && key.size() < 18 && std::all_of(key.begin(), key.end(), ::isdigit);
        Value kv = index ? Value(int64_t(std::stoll(key))) : Value(key);
        v = get_item(v, kv);
        k = e + 1;
      }
    }
    if (conv == "r") v = Value(v.repr());
    else if (conv == "s") v = Value(v.str());
    else if (conv == "a") v = Value(ascii_repr(v.repr()));
    else if (!conv.empty()) throw Error(str_cat("Unknown conversion specifier ", conv));
    std::string piece;
    if (v.kind() == Value::Kind::Float && !spec.empty() && std::string("eEfFgG%n").find(spec.back()) == std::string::npos)
      piece = format_float_no_type(v, spec);
    else
      piece = format_spec(v, spec);
    append_bounded(out, piece);
  }
  return out;
}

}  // namespace xg::text::jinja::detail

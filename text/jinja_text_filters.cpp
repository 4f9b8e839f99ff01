// Jinja2's filters that reshape text: truncate, wordwrap (Python's textwrap), wordcount,
// center, indent, filesizeformat, and the HTML ones that make sense without autoescaping
// (escape, striptags, urlencode, xmlattr), as Jinja2 3.1 and markupsafe 2.1 write them.
#include <cmath>
#include <cstdio>

#include "autograd/error.hpp"
#include "text/detail/jinja_args.hpp"
#include "text/detail/jinja_budget.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {

std::string html_escape(const std::string& s) {
  spend_bytes(int64_t(s.size()));
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((i & 4095) == 0) need_bytes(int64_t(out.size()) + int64_t(s.size()));
    switch (s[i]) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += s[i];
    }
  }
  return out;
}

namespace {

// Code points of s, as strings (Python indexes text by code point).
std::vector<std::string> code_points(const std::string& s) {
  need_items(int64_t(s.size()));
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    next_code_point(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::string joined(const std::vector<std::string>& cps, size_t from, size_t to) {
  std::string out;
  for (size_t k = from; k < to && k < cps.size(); ++k) out += cps[k];
  return out;
}

bool is_word_char(uint32_t cp) { return cp == '_' || is_python_alpha(cp) || is_python_numeric(cp) || is_python_digit(cp); }

// textwrap's chunks of one line: runs of whitespace and words, a word cut after a hyphen
// that has two letters before it and a letter after it (break_on_hyphens).
std::vector<std::vector<std::string>> wrap_chunks(const std::string& line, bool on_hyphens) {
  std::vector<std::vector<std::string>> chunks;
  std::vector<std::string> cps = code_points(line);
  std::vector<uint32_t> cp;
  for (const std::string& c : cps) {
    size_t i = 0;
    cp.push_back(next_code_point(c, i));
  }
  for (size_t k = 0; k < cps.size();) {
    const bool space = is_python_space(cp[k]);
    size_t end = k;
    while (end < cps.size() && is_python_space(cp[end]) == space) {
      ++end;
      if (!space && on_hyphens && cp[end - 1] == '-' && end >= 3 && end < cps.size() && is_python_alpha(cp[end - 2]) &&
          is_python_alpha(cp[end - 3]) && is_python_alpha(cp[end]))
        break;
    }
    chunks.emplace_back(cps.begin() + int64_t(k), cps.begin() + int64_t(end));
    k = end;
  }
  return chunks;
}

bool all_space(const std::vector<std::string>& chunk) {
  for (const std::string& c : chunk) {
    size_t i = 0;
    if (!is_python_space(next_code_point(c, i))) return false;
  }
  return true;
}

// Python's textwrap.wrap(line, width, expand_tabs=False, replace_whitespace=False, ...).
std::vector<std::string> text_wrap(const std::string& line, int64_t width, bool break_long, bool on_hyphens) {
  if (width <= 0) throw Error(str_cat("invalid width ", width, " (must be > 0)"));
  auto chunks = wrap_chunks(line, on_hyphens);
  std::reverse(chunks.begin(), chunks.end());
  std::vector<std::string> lines;
  while (!chunks.empty()) {
    spend(1);
    std::vector<std::vector<std::string>> cur;
    int64_t cur_len = 0;
    if (all_space(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && cur_len + int64_t(chunks.back().size()) <= width) {
      cur_len += int64_t(chunks.back().size());
      cur.push_back(chunks.back());
      chunks.pop_back();
    }
    if (!chunks.empty() && int64_t(chunks.back().size()) > width) {  // textwrap's _handle_long_word
      int64_t space_left = std::max<int64_t>(1, width - cur_len);
      if (break_long) {
        std::vector<std::string>& chunk = chunks.back();
        int64_t end = space_left;
        if (on_hyphens && int64_t(chunk.size()) > space_left) {
          int64_t hyphen = -1;
          for (int64_t k = space_left - 1; k >= 0; --k)
            if (chunk[size_t(k)] == "-") {
              hyphen = k;
              break;
            }
          bool letters_before = false;
          for (int64_t k = 0; k < hyphen; ++k) letters_before |= chunk[size_t(k)] != "-";
          if (hyphen > 0 && letters_before) end = hyphen + 1;
        }
        cur.emplace_back(chunk.begin(), chunk.begin() + end);
        chunk.erase(chunk.begin(), chunk.begin() + end);
      } else if (cur.empty()) {
        cur.push_back(chunks.back());
        chunks.pop_back();
      }
    }
    if (!cur.empty() && all_space(cur.back())) cur.pop_back();
    if (!cur.empty()) {
      std::string text;
      for (const auto& c : cur) text += joined(c, 0, c.size());
      lines.push_back(text);
    }
  }
  return lines;
}

// str.splitlines() (no ends kept).
std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  const Value lines = method(Value(s), "splitlines").as_function()({}, {});
  for (const Value& v : lines.as_list()) out.push_back(v.as_string());
  return out;
}

std::string url_quote(const std::string& s, bool for_qs) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) {
      out += char(c);
    } else if (for_qs && c == ' ') {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// markupsafe's Markup.unescape(): the HTML entities back to characters (the named ones
// beyond the five markupsafe writes are refused by name).
std::string html_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t semi = s[i] == '&' ? s.find(';', i) : std::string::npos;
    if (semi == std::string::npos || semi - i > 12) {
      out += s[i++];
      continue;
    }
    std::string name = s.substr(i + 1, semi - i - 1);
    if (name == "amp") out += '&';
    else if (name == "lt") out += '<';
    else if (name == "gt") out += '>';
    else if (name == "quot") out += '"';
    else if (name == "apos") out += '\'';
    else if (name.size() > 1 && name[0] == '#') {
      bool hex = name[1] == 'x' || name[1] == 'X';
      std::string digits = name.substr(hex ? 2 : 1);
      if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos || digits.size() > 6) {
        out += s[i++];
        continue;
      }
      append_utf8(out, uint32_t(std::stoul(digits, nullptr, hex ? 16 : 10)));
    } else if (!name.empty() && std::all_of(name.begin(), name.end(), ::isalnum)) {
      throw Error("striptags: the HTML entity '&" + name + ";' is not supported");
    } else {
      out += s[i++];
      continue;
    }
    i = semi + 1;
  }
  return out;
}

// Removes every match of open...close (non-greedy, across lines).
std::string remove_between(const std::string& s, const std::string& open, const std::string& close) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t a = s.find(open, i);
    size_t b = a == std::string::npos ? std::string::npos : s.find(close, a + open.size());
    if (b == std::string::npos) {
      out.append(s, i, std::string::npos);
      break;
    }
    out.append(s, i, a - i);
    i = b + close.size();
  }
  return out;
}

}  // namespace

const std::map<std::string, FilterFn>& text_filters() {
  static const std::map<std::string, FilterFn> table = {
      {"escape", [](const Value& v, const List& a, const Kwargs& k) {
         Args("escape", a, k, {});
         return v.is_markup() ? v : Value::markup(html_escape(v.str()));
       }},
      {"e", [](const Value& v, const List& a, const Kwargs& k) {
         Args("e", a, k, {});
         return v.is_markup() ? v : Value::markup(html_escape(v.str()));
       }},
      {"forceescape", [](const Value& v, const List& a, const Kwargs& k) {
         Args("forceescape", a, k, {});
         return Value::markup(html_escape(v.str()));
       }},
      {"safe", [](const Value& v, const List& a, const Kwargs& k) {
         Args("safe", a, k, {});
         return v.is_markup() ? v : Value::markup(v.str());
       }},
      {"striptags", [](const Value& v, const List& a, const Kwargs& k) {
         Args("striptags", a, k, {});
         std::string s = remove_between(remove_between(v.str(), "<!--", "-->"), "<", ">");
         std::string words;
         for (const Value& w : split(s, Value::none(), -1)) words += (words.empty() ? "" : " ") + w.as_string();
         return Value(html_unescape(words));
       }},
      {"urlencode", [](const Value& v, const List& a, const Kwargs& k) {
         Args("urlencode", a, k, {});
         if (v.is_string() || (!v.is_list() && !v.is_dict())) return Value(url_quote(v.str(), false));
         std::string out;
         List pairs;
         if (v.is_dict())
           for (const auto& [key, val] : v.as_dict().items) pairs.push_back(Value::tuple({key, val}));
         else
           pairs = v.as_list();
         for (const Value& kv : pairs) {
           List two = iterate(kv);
           if (two.size() != 2) throw Error("urlencode: expected pairs of key and value");
           out += (out.empty() ? "" : "&") + url_quote(two[0].str(), true) + "=" + url_quote(two[1].str(), true);
         }
         return Value(out);
       }},
      {"xmlattr", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("xmlattr", a, k, {"autospace"});
         if (!v.is_dict()) throw Error(str_cat("xmlattr: expected a mapping, got ", v.type_name()));
         std::string out;
         for (const auto& [key, val] : v.as_dict().items) {
           if (val.is_none() || val.is_undefined()) continue;
           out += (out.empty() ? "" : " ") + html_escape(key.str()) + "=\"" + html_escape(val.str()) + "\"";
         }
         return Value(p.flag(0, true) && !out.empty() ? " " + out : out);
       }},
      {"center", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("center", a, k, {"width"});
         return method(Value(v.str()), "center").as_function()({Value(p.integer(0, 80))}, {});
       }},
      {"wordcount", [](const Value& v, const List& a, const Kwargs& k) {
         Args("wordcount", a, k, {});
         const std::string s = v.str();
         int64_t n = 0;
         bool in_word = false;
         for (size_t i = 0; i < s.size();) {
           bool w = is_word_char(next_code_point(s, i));
           if (w && !in_word) ++n;
           in_word = w;
         }
         return Value(n);
       }},
      {"truncate", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("truncate", a, k, {"length", "killwords", "end", "leeway"});
         const int64_t length = p.integer(0, 255), leeway = p.integer(3, 5);  // Jinja2's truncate.leeway policy
         const bool killwords = p.flag(1, false);
         const std::string end = p.str(2, "...");
         const int64_t end_len = code_point_count(end);
         if (length < end_len) throw Error(str_cat("truncate: expected length >= ", end_len, ", got ", length));
         if (leeway < 0) throw Error(str_cat("truncate: expected leeway >= 0, got ", leeway));
         std::vector<std::string> cps = code_points(v.str());
         if (int64_t(cps.size()) <= length + leeway) return Value(v.str());
         std::string head = joined(cps, 0, size_t(length - end_len));
         if (killwords) return Value(head + end);
         size_t space = head.rfind(' ');
         return Value((space == std::string::npos ? head : head.substr(0, space)) + end);
       }},
      {"wordwrap", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("wordwrap", a, k, {"width", "break_long_words", "wrapstring", "break_on_hyphens"});
         const int64_t width = p.integer(0, 79);
         const bool break_long = p.flag(1, true), on_hyphens = p.flag(3, true);
         const Value wrap = p.get(2, Value::none());
         const std::string sep = wrap.is_none() ? "\n" : wrap.str();
         std::string out;
         bool first_line = true;
         for (const std::string& line : lines_of(v.str())) {
           if (!first_line) append_bounded(out, sep);
           first_line = false;
           bool first = true;
           for (const std::string& piece : text_wrap(line, width, break_long, on_hyphens)) {
             if (!first) append_bounded(out, sep);
             append_bounded(out, piece);
             first = false;
           }
         }
         return Value(out);
       }},
      {"indent", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("indent", a, k, {"width", "first", "blank"});
         Value w = p.get(0, Value(int64_t(4)));
         if (!w.is_string()) need_bytes(w.as_int());  // indent(10**9) would allocate a gigabyte of spaces
         std::string pad = w.is_string() ? w.as_string() : std::string(size_t(std::max<int64_t>(0, w.as_int())), ' ');
         const bool first = p.flag(1, false), blank = p.flag(2, false);
         // Jinja2 splits s + "\n" into lines and indents every line after the first that is not
         // empty (whitespace-only lines too), or every one with blank=True.
         std::vector<std::string> lines = lines_of(v.str() + "\n");
         std::string out;
         for (size_t n = 0; n < lines.size(); ++n) {
           if (n > 0) {
             out += '\n';
             if (blank || !lines[n].empty()) append_bounded(out, pad);
           }
           append_bounded(out, lines[n]);
         }
         return Value(first ? pad + out : out);
       }},
      {"filesizeformat", [](const Value& v, const List& a, const Kwargs& k) {
         Args p("filesizeformat", a, k, {"binary"});
         const bool binary = p.flag(0, false);
         Value f = apply_filter("float", v, {}, {});
         if (!v.is_number() && !v.is_string()) throw Error(str_cat("filesizeformat: float() argument must be a string or a number, not '", v.type_name(), "'"));
         const double bytes = f.as_float(), base = binary ? 1024 : 1000;
         static const char* prefixes[2][8] = {{"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"},
                                             {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"}};
         if (bytes == 1) return Value("1 Byte");
         if (bytes < base) return Value(str_cat(int64_t(bytes), " Bytes"));
         double unit = base;
         int i = 0;
         for (; i < 8; ++i) {
           unit = std::pow(base, i + 2);
           if (bytes < unit) break;
         }
         if (i == 8) i = 7;
         char buf[64];
         std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, prefixes[binary][i]);
         return Value(std::string(buf));
       }},
  };
  return table;
}

}  // namespace xg::text::jinja::detail

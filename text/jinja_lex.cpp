// The Jinja lexer: template text and tags with Jinja2's whitespace control ({%- -%},
// trim_blocks, lstrip_blocks), Python's string escapes and number literals.
#include "text/detail/jinja_lex.hpp"

#include <cerrno>
#include <cstdlib>

#include "autograd/error.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {
namespace {

// The string without its trailing (Python) whitespace.
std::string rstrip_space(const std::string& s) {
  size_t keep = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_code_point(s, i);
    if (!is_python_space(cp)) keep = i;
  }
  return s.substr(0, keep);
}

// Where the leading (Python) whitespace of s[from..] ends.
size_t skip_space(const std::string& s, size_t from) {
  while (from < s.size()) {
    size_t i = from;
    if (!is_python_space(next_code_point(s, i))) break;
    from = i;
  }
  return from;
}

class Lexer {
 public:
  Lexer(std::string src, const TemplateOptions& opts) : opts_(opts) {
    // Jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline
    // (keep_trailing_newline=False).
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\r') {
        src_ += '\n';
        if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      } else {
        src_ += src[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_start = true;  // the text being read starts at the start of a line
    while (pos_ < src_.size()) {
      size_t p = find_tag(pos_);
      std::string text = src_.substr(pos_, p - pos_);
      int text_line = line_;
      if (p < src_.size()) {
        char kind = src_[p + 1];
        char sign = p + 2 < src_.size() ? src_[p + 2] : 0;
        if (sign == '-') {
          text = rstrip_space(text);
        } else if (opts_.lstrip_blocks && kind != '{' && sign != '+') {
          size_t l = text.rfind('\n');
          size_t from = l == std::string::npos ? 0 : l + 1;
          if ((from > 0 || line_start) && text.find_first_not_of(" \t", from) == std::string::npos)
            text.resize(from);
        }
      }
      advance_to(p);
      if (!text.empty()) tokens_.push_back({Token::Text, text, text_line});
      if (p >= src_.size()) break;
      line_start = read_tag();
    }
    tokens_.push_back({Token::Eof, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error(str_cat(opts_.name, " line ", line_, ": ", msg));
  }

  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return src_.size();
  }

  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  // After a closing tag: "-" strips the whitespace that follows; trim_blocks drops one
  // newline after a block or comment tag unless "+" keeps it. Returns whether a newline was
  // consumed last (the next text then starts a line, for lstrip_blocks).
  bool after_close(char sign, bool block) {
    if (sign == '-') {
      size_t q = skip_space(src_, pos_);
      bool nl = q > pos_ && src_[q - 1] == '\n';
      advance_to(q);
      return nl;
    }
    if (block && sign != '+' && opts_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
      return true;
    }
    return false;
  }

  bool read_tag() {
    char kind = src_[pos_ + 1];
    advance_to(pos_ + 2);
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) advance_to(pos_ + 1);
    if (kind == '#') {
      size_t q = src_.find("#}", pos_);
      if (q == std::string::npos) fail("unclosed comment '{#'");
      char sign = q > pos_ && (src_[q - 1] == '-' || src_[q - 1] == '+') ? src_[q - 1] : 0;
      advance_to(q + 2);
      return after_close(sign, true);
    }
    const bool block = kind == '%';
    bool newline_last = false;
    if (block && read_raw(newline_last)) return newline_last;
    tokens_.push_back({block ? Token::BlockBegin : Token::VarBegin, "", line_});
    int depth = 0;  // open brackets: "}}" inside {{ {'a': {}} }} does not close the tag
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) fail(block ? "unclosed tag '{%'" : "unclosed '{{'");
      char sign = src_[pos_] == '-' || src_[pos_] == '+' ? src_[pos_] : 0;
      size_t at = pos_ + (sign ? 1 : 0);
      if (depth == 0 && src_.compare(at, 2, block ? "%}" : "}}") == 0 && (sign != '+' || block)) {
        tokens_.push_back({block ? Token::BlockEnd : Token::VarEnd, "", line_});
        advance_to(at + 2);
        return after_close(sign, block);
      }
      read_expr_token(depth);
    }
  }

  // After '{%' (and its sign): `raw -%}` and the text up to `{% endraw %}`, kept as it is
  // written (a '-' on either tag strips the whitespace beside it, and the tags do trim_blocks
  // and lstrip_blocks as other block tags). False when the tag is not raw.
  bool read_raw(bool& newline_last) {
    size_t q = skip_space(src_, pos_);
    if (src_.compare(q, 3, "raw") != 0) return false;
    q = skip_space(src_, q + 3);
    char open_sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
    if (src_.compare(q + (open_sign ? 1 : 0), 2, "%}") != 0) return false;
    size_t body = q + (open_sign ? 3 : 2);
    if (open_sign == '-') body = skip_space(src_, body);
    // The closing tag: {% endraw %} with optional signs and spaces.
    for (size_t at = src_.find("{%", body); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t r = at + 2;
      char close_lsign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
      r = skip_space(src_, r + (close_lsign ? 1 : 0));
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r = skip_space(src_, r + 6);
      char close_sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
      if (src_.compare(r + (close_sign ? 1 : 0), 2, "%}") != 0) continue;
      std::string text = src_.substr(body, at - body);
      if (close_lsign == '-') {
        text = rstrip_space(text);
      } else if (opts_.lstrip_blocks && close_lsign != '+') {
        size_t l = text.rfind('\n');
        size_t from = l == std::string::npos ? 0 : l + 1;
        if (l != std::string::npos && text.find_first_not_of(" \t", from) == std::string::npos) text.resize(from);
      }
      int text_line = line_;
      advance_to(body);
      text_line = line_;
      if (!text.empty()) tokens_.push_back({Token::Text, text, text_line});
      advance_to(r + (close_sign ? 1 : 0) + 2);
      newline_last = after_close(close_sign, true);
      return true;
    }
    fail("missing '{% endraw %}' for the raw block");
  }

  void read_expr_token(int& depth) {
    char c = src_[pos_];
    if (c == '\'' || c == '"') return read_string(c);
    if (std::isdigit(static_cast<unsigned char>(c))) return read_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = pos_;
      while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
      tokens_.push_back({Token::Name, src_.substr(pos_, q - pos_), line_});
      advance_to(q);
      return;
    }
    static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|"};
    for (const char* op : ops) {
      if (src_.compare(pos_, std::char_traits<char>::length(op), op) == 0) {
        std::string s = op;
        if (s == "(" || s == "[" || s == "{") ++depth;
        if (s == ")" || s == "]" || s == "}") --depth;
        tokens_.push_back({Token::Op, s, line_});
        advance_to(pos_ + s.size());
        return;
      }
    }
    fail(str_cat("unexpected character '", c, "'"));
  }

  // Python's string escapes as Jinja2 decodes them; an unknown escape keeps its backslash.
  void read_string(char quote) {
    std::string out;
    int line = line_;
    size_t q = pos_ + 1;
    for (;; ++q) {
      if (q >= src_.size()) fail("unterminated string literal");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++q >= src_.size()) fail("unterminated string literal");
      char e = src_[q];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': case '\'': case '"': out += e; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          std::string hex = src_.substr(q + 1, n);
          if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            fail(str_cat("invalid escape '\\", e, hex, "' in a string literal"));
          auto cp = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
          if (cp > 0x10FFFF) fail(str_cat("invalid escape '\\", e, hex, "': not a Unicode code point"));
          append_utf8(out, cp);
          q += n;
          break;
        }
        default: out += '\\'; out += e;
      }
    }
    tokens_.push_back({Token::String, out, line});
    advance_to(q + 1);
  }

  void read_number() {
    size_t q = pos_;
    auto digits = [&] {
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t k = pos_; k < q; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t{is_float ? Token::Float : Token::Int, text, line_};
    errno = 0;
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);  // Python's float('1e999') is inf, as strtod's
    } else {
      t.i = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal " + text + " does not fit in 64 bits");
    }
    tokens_.push_back(t);
    advance_to(q);
  }

  const TemplateOptions& opts_;
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const TemplateOptions& opts) { return Lexer(source, opts).run(); }

}  // namespace xg::text::jinja::detail

// The Jinja subset's lexer and parser: template text and tags with Jinja2's whitespace
// control ({%- -%}, trim_blocks, lstrip_blocks), then a recursive-descent parser with
// Jinja2's operator precedence (filters and tests bind tighter than arithmetic).
#include <cerrno>
#include <cstdlib>
#include <set>

#include "autograd/error.hpp"
#include "text/detail/jinja_ast.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {
namespace {

struct Token {
  enum Type { Text, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string s;  // text, name, string value or operator
  int line;
  int64_t i = 0;
  double f = 0;
};

const char* describe(const Token& t) {
  switch (t.type) {
    case Token::Text: return "text";
    case Token::BlockBegin: return "'{%'";
    case Token::BlockEnd: return "'%}'";
    case Token::VarBegin: return "'{{'";
    case Token::VarEnd: return "'}}'";
    case Token::Eof: return "the end of the template";
    default: return nullptr;
  }
}

std::string token_str(const Token& t) {
  if (const char* d = describe(t)) return d;
  if (t.type == Token::String) return "string '" + t.s + "'";
  return "'" + t.s + "'";
}

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

class Parser {
 public:
  Parser(std::vector<Token> tokens, const TemplateOptions& opts) : t_(std::move(tokens)), opts_(opts) {}

  Body parse_template() {
    std::string end;
    return parse_until({}, end, 1);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw Error(str_cat(opts_.name, " line ", line, ": ", msg));
  }

  // Nesting (blocks, brackets, unary operators, and each link of an operator, filter or
  // postfix chain) is bounded, so that parsing, rendering and freeing the tree, which all
  // recurse over it, cannot overflow the stack on a hostile template.
  static constexpr int kMaxDepth = 500;
  class Deeper {
   public:
    explicit Deeper(Parser& p) : p_(p), saved_(p.depth_) { more(); }
    void more() {
      if (++p_.depth_ > kMaxDepth) p_.fail(p_.peek().line, str_cat("nesting deeper than ", kMaxDepth, " levels"));
    }
    ~Deeper() { p_.depth_ = saved_; }

   private:
    Parser& p_;
    int saved_;
  };

  const Token& peek(size_t ahead = 0) const { return t_[std::min(k_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[k_ < t_.size() - 1 ? k_++ : k_]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == Token::Op && peek(ahead).s == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Name && peek(ahead).s == name;
  }
  bool skip_op(const char* op) { return is_op(op) ? (next(), true) : false; }
  bool skip_name(const char* name) { return is_name(name) ? (next(), true) : false; }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(peek().line, str_cat("expected '", op, "', found ", token_str(peek())));
  }
  void expect(Token::Type type, const char* what) {
    if (peek().type != type) fail(peek().line, str_cat("expected ", what, ", found ", token_str(peek())));
    next();
  }
  std::string expect_name(const char* what) {
    if (peek().type != Token::Name) fail(peek().line, str_cat("expected ", what, ", found ", token_str(peek())));
    return next().s;
  }

  // Statements up to one of the `ends` tags (its name consumed into `end`, the rest of that
  // tag left to the caller), or the end of the template when `ends` is empty. `opened` is
  // the line of the tag that opened the block, for the error when it is never closed.
  Body parse_until(const std::set<std::string>& ends, std::string& end, int opened) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Token::Eof) {
        if (ends.empty()) return body;
        fail(t.line, str_cat("missing '", *ends.rbegin(), "' for the block opened on line ", opened));
      }
      if (t.type == Token::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->line = t.line;
        s->text = next().s;
        body.push_back(std::move(s));
      } else if (t.type == Token::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = t.line;
        s->expr = parse_tuple_or_expr();
        expect(Token::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.type == Token::BlockBegin) {
        const Token& tag = peek(1);
        if (tag.type == Token::Name && ends.count(tag.s)) {
          next();
          end = next().s;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail(t.line, str_cat("unexpected ", token_str(t)));
      }
    }
  }

  StmtPtr parse_statement() {
    Deeper deeper(*this);
    int line = peek().line;
    std::string tag = expect_name("a tag name after '{%'");
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (tag == "if") {
      s->kind = Stmt::Kind::If;
      while (true) {
        s->conds.push_back(parse_expr());
        expect(Token::BlockEnd, "'%}'");
        s->bodies.push_back(parse_until({"elif", "else", "endif"}, end, line));
        if (end != "elif") break;
      }
      if (end == "else") {
        expect(Token::BlockEnd, "'%}'");
        s->bodies.push_back(parse_until({"endif"}, end, line));
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::For;
      do s->targets.push_back(expect_name("a loop variable"));
      while (skip_op(","));
      if (!skip_name("in")) fail(peek().line, str_cat("expected 'in' in the for tag, found ", token_str(peek())));
      s->expr = parse_expr(false);
      if (skip_name("if")) s->cond = parse_expr();
      s->recursive = skip_name("recursive");
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"else", "endfor"}, end, line));
      if (end == "else") {
        expect(Token::BlockEnd, "'%}'");
        s->bodies.push_back(parse_until({"endfor"}, end, line));
      }
    } else if (tag == "set") {
      s->kind = Stmt::Kind::Set;
      s->targets.push_back(expect_name("a variable name after 'set'"));
      if (skip_op(".")) {
        s->attr = expect_name("an attribute name");
      } else {
        while (skip_op(",")) s->targets.push_back(expect_name("a variable name"));
      }
      if (skip_op("=")) {
        s->expr = parse_tuple_or_expr();
      } else {
        if (!s->attr.empty() || s->targets.size() > 1 || (peek().type != Token::BlockEnd && !is_op("|")))
          fail(peek().line, str_cat("expected '=' in the set tag, found ", token_str(peek())));
        s->kind = Stmt::Kind::SetBlock;
        if (skip_op("|")) s->expr = parse_filter_chain(nullptr);
        expect(Token::BlockEnd, "'%}'");
        s->bodies.push_back(parse_until({"endset"}, end, line));
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->name = expect_name("a macro name");
      parse_params(*s);
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"endmacro"}, end, line));
      find_special_names(*s);
    } else if (tag == "call") {
      s->kind = Stmt::Kind::CallBlock;
      if (is_op("(")) parse_params(*s);
      s->expr = parse_expr();
      if (s->expr->kind != Expr::Kind::Call) fail(line, "expected a call after 'call'");
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"endcall"}, end, line));
      find_special_names(*s);
    } else if (tag == "with") {
      s->kind = Stmt::Kind::With;
      while (peek().type != Token::BlockEnd) {
        std::string target = expect_name("a variable name in the with tag");
        expect_op("=");
        s->params.emplace_back(target, parse_expr());
        if (!skip_op(",")) break;
      }
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"endwith"}, end, line));
    } else if (tag == "block") {
      // NOTE: with nothing to extend, a block renders where it stands (Jinja2 does the same).
      s->kind = Stmt::Kind::Generation;
      s->name = expect_name("a block name");
      if (is_name("scoped") || is_name("required")) fail(line, str_cat("unsupported construct: '", peek().s, "' block"));
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"endblock"}, end, line));
      if (peek().type == Token::Name && peek().s != s->name) fail(peek().line, str_cat("mismatched endblock: '", peek().s, "' closes '", s->name, "'"));
      skip_name(s->name.c_str());
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::FilterBlock;
      s->expr = parse_filter_chain(nullptr);
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"endfilter"}, end, line));
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::Generation;
      expect(Token::BlockEnd, "'%}'");
      s->bodies.push_back(parse_until({"endgeneration"}, end, line));
    } else if (tag == "elif" || tag == "else" || tag.rfind("end", 0) == 0) {
      fail(line, "unexpected '" + tag + "' (no block of that kind is open)");
    } else {
      fail(line, "unsupported tag '" + tag + "'");
    }
    expect(Token::BlockEnd, "'%}'");
    return s;
  }

  // A macro's or call block's parameters: (name, name=default, ...).
  void parse_params(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      std::string param = expect_name("a parameter name");
      ExprPtr def;
      if (skip_op("=")) def = parse_expr();
      s.params.emplace_back(param, std::move(def));
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  // Jinja2 lets a macro take extra positional arguments only when its body reads `varargs`,
  // extra keywords only when it reads `kwargs`, and a caller only when it reads `caller`.
  static void find_names(const Expr& e, Stmt& s) {
    if (e.kind == Expr::Kind::Name) {
      s.uses_varargs |= e.name == "varargs";
      s.uses_kwargs |= e.name == "kwargs";
      s.uses_caller |= e.name == "caller";
    }
    for (const ExprPtr& a : e.args)
      if (a) find_names(*a, s);
    for (const auto& kv : e.kwargs)
      if (kv.second) find_names(*kv.second, s);
  }
  static void find_names(const Body& body, Stmt& s) {
    for (const StmtPtr& st : body) {
      for (const ExprPtr* e : {&st->expr, &st->cond})
        if (*e) find_names(**e, s);
      for (const ExprPtr& c : st->conds) find_names(*c, s);
      for (const auto& p : st->params)
        if (p.second) find_names(*p.second, s);
      for (const Body& b : st->bodies) find_names(b, s);
    }
  }
  static void find_special_names(Stmt& s) {
    find_names(s.bodies[0], s);
    for (const auto& p : s.params)
      if (p.second) find_names(*p.second, s);
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // An expression, or several separated by commas: a tuple ({{ a, b }}, {% set x = a, b %}).
  ExprPtr parse_tuple_or_expr() {
    int line = peek().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::TupleLit, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().type == Token::BlockEnd || peek().type == Token::VarEnd) break;
      t->args.push_back(parse_expr());
    }
    return t;
  }

  // Jinja2's parse_expression: `a if cond else b` around the boolean operators.
  ExprPtr parse_expr(bool with_cond = true) {
    Deeper deeper(*this);
    ExprPtr e = parse_or();
    while (with_cond && is_name("if")) {
      deeper.more();
      int line = next().line;
      auto c = make(Expr::Kind::Cond, line);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      c->args.push_back(skip_name("else") ? parse_expr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(Expr::Kind::Binary, line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() { return parse_left_assoc({"or"}, &Parser::parse_and); }
  ExprPtr parse_and() { return parse_left_assoc({"and"}, &Parser::parse_not); }

  ExprPtr parse_not() {
    Deeper deeper(*this);
    if (is_name("not")) {
      auto e = make(Expr::Kind::Unary, next().line);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = peek().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    Deeper deeper(*this);
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.type == Token::Op && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == ">" || t.s == "<=" || t.s == ">=")) {
        op = next().s;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next(), next();
        op = "not in";
      } else {
        break;
      }
      deeper.more();
      if (!cmp) {
        cmp = make(Expr::Kind::Compare, line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  // sub (op sub)*, left-associative; an op is an operator or a keyword ("and", "or").
  template <class Sub>
  ExprPtr parse_left_assoc(std::initializer_list<const char*> ops, Sub sub) {
    Deeper deeper(*this);
    ExprPtr e = (this->*sub)();
    while (true) {
      const char* found = nullptr;
      for (const char* op : ops)
        if (is_op(op) || is_name(op)) found = op;
      if (!found) return e;
      deeper.more();
      int line = next().line;
      e = binary(found, std::move(e), (this->*sub)(), line);
    }
  }
  ExprPtr parse_math1() { return parse_left_assoc({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_left_assoc({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_left_assoc({"**"}, &Parser::parse_unary_filtered); }
  ExprPtr parse_unary_filtered() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    Deeper deeper(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(Expr::Kind::Unary, peek().line);
      e->name = next().s;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr literal(Value v, int line) {
    auto e = make(Expr::Kind::Literal, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    int line = t.line;
    if (t.type == Token::Name) {
      std::string n = next().s;
      if (n == "true" || n == "True") return literal(Value(true), line);
      if (n == "false" || n == "False") return literal(Value(false), line);
      if (n == "none" || n == "None") return literal(Value::none(), line);
      auto e = make(Expr::Kind::Name, line);
      e->name = n;
      return e;
    }
    if (t.type == Token::String) {
      std::string s = next().s;
      while (peek().type == Token::String) s += next().s;  // adjacent literals join
      return literal(Value(s), line);
    }
    if (t.type == Token::Int) return literal(Value(next().i), line);
    if (t.type == Token::Float) return literal(Value(next().f), line);
    if (skip_op("(")) {
      if (skip_op(")")) return make(Expr::Kind::TupleLit, line);
      ExprPtr e = parse_expr();
      if (is_op(",")) {
        auto tup = make(Expr::Kind::TupleLit, line);
        tup->args.push_back(std::move(e));
        while (skip_op(",") && !is_op(")")) tup->args.push_back(parse_expr());
        e = std::move(tup);
      }
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = make(Expr::Kind::ListLit, line);
      while (!is_op("]")) {
        e->args.push_back(parse_expr());
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return e;
    }
    if (skip_op("{")) {
      auto e = make(Expr::Kind::DictLit, line);
      while (!is_op("}")) {
        e->args.push_back(parse_expr());
        expect_op(":");
        e->args.push_back(parse_expr());
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return e;
    }
    fail(line, str_cat("unexpected ", token_str(t), " in an expression"));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Deeper deeper(*this);
    while (true) {
      deeper.more();
      int line = peek().line;
      if (skip_op(".")) {
        if (peek().type == Token::Int) {
          auto item = make(Expr::Kind::Item, line);
          item->args.push_back(std::move(e));
          item->args.push_back(literal(Value(next().i), line));
          e = std::move(item);
        } else {
          auto attr = make(Expr::Kind::Attr, line);
          attr->name = expect_name("an attribute name after '.'");
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), line);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // After '[': an index, or a slice start:stop:step with any part left out.
  ExprPtr parse_subscript(ExprPtr obj, int line) {
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expr();
      if (skip_op("]")) {
        auto item = make(Expr::Kind::Item, line);
        item->args.push_back(std::move(obj));
        item->args.push_back(std::move(start));
        return item;
      }
      if (is_op(",")) fail(line, "unsupported construct: a tuple subscript");
    }
    expect_op(":");
    auto s = make(Expr::Kind::Slice, line);
    s->args.push_back(std::move(obj));
    s->args.push_back(std::move(start));
    s->args.push_back(is_op(":") || is_op("]") ? nullptr : parse_expr());
    ExprPtr step;
    if (skip_op(":") && !is_op("]")) step = parse_expr();
    s->args.push_back(std::move(step));
    expect_op("]");
    return s;
  }

  // Call arguments into e->args (after any already there) and e->kwargs.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail(peek().line, "unsupported construct: * or ** arguments");
      if (peek().type == Token::Name && is_op("=", 1)) {
        std::string key = next().s;
        next();
        e.kwargs.emplace_back(key, parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(peek().line, "a positional argument follows a keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::Call, peek().line);
    e->args.push_back(std::move(callee));
    parse_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    Deeper deeper(*this);
    while (true) {
      deeper.more();
      if (is_op("|")) {
        next();
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter(ExprPtr operand) {
    auto f = make(Expr::Kind::Filter, peek().line);
    f->name = expect_name("a filter name after '|'");
    while (skip_op(".")) f->name += "." + expect_name("a filter name");
    if (!is_filter(f->name)) fail(f->line, "unsupported filter '" + f->name + "'");
    f->args.push_back(std::move(operand));
    if (is_op("(")) parse_args(*f);
    return f;
  }

  // {% filter a(x) | b %}: a chain of filters applied to a null operand (the block's text).
  ExprPtr parse_filter_chain(ExprPtr operand) {
    Deeper deeper(*this);
    ExprPtr e = parse_filter(std::move(operand));
    while (skip_op("|")) deeper.more(), e = parse_filter(std::move(e));
    return e;
  }

  ExprPtr parse_test(ExprPtr operand) {
    auto t = make(Expr::Kind::Test, next().line);
    t->negate = skip_name("not");
    t->name = expect_name("a test name after 'is'");
    if (!is_test(t->name)) fail(t->line, "unsupported test '" + t->name + "'");
    t->args.push_back(std::move(operand));
    const Token& a = peek();
    if (is_op("(")) {
      parse_args(*t);
    } else if ((a.type == Token::Name || a.type == Token::String || a.type == Token::Int ||
                a.type == Token::Float || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if")) {
      if (is_name("is")) fail(a.line, "a test cannot be the argument of a test");
      t->args.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  std::vector<Token> t_;
  size_t k_ = 0;
  const TemplateOptions& opts_;
  int depth_ = 0;
};

}  // namespace

std::shared_ptr<const Program> parse(const std::string& source, const TemplateOptions& opts) {
  auto program = std::make_shared<Program>();
  program->opts = opts;
  std::vector<Token> tokens = Lexer(source, program->opts).run();
  program->body = Parser(std::move(tokens), program->opts).parse_template();
  return program;
}

}  // namespace xg::text::jinja::detail

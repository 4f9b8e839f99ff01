// The Jinja parser: a recursive-descent parser of jinja_lex.cpp's tokens with Jinja2's
// operator precedence (filters and tests bind tighter than arithmetic).
#include <set>

#include "autograd/error.hpp"
#include "text/detail/jinja_ast.hpp"
#include "text/detail/jinja_builtins.hpp"
#include "text/detail/jinja_lex.hpp"
#include "text/detail/jinja_utf8.hpp"

namespace xg::text::jinja::detail {
namespace {

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
      s->generation = true;
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

namespace {

// Whether a body holds a {% generation %} block, at any depth (explicit stack: no recursion).
bool has_generation_block(const Body& root) {
  std::vector<const Body*> todo = {&root};
  while (!todo.empty()) {
    const Body* b = todo.back();
    todo.pop_back();
    for (const StmtPtr& s : *b) {
      if (s->generation) return true;
      for (const Body& child : s->bodies) todo.push_back(&child);
    }
  }
  return false;
}

}  // namespace

std::shared_ptr<const Program> parse(const std::string& source, const TemplateOptions& opts) {
  auto program = std::make_shared<Program>();
  program->opts = opts;
  std::vector<Token> tokens = lex(source, program->opts);
  program->body = Parser(std::move(tokens), program->opts).parse_template();
  program->has_generation = source.find("generation") != std::string::npos && has_generation_block(program->body);
  return program;
}

}  // namespace xg::text::jinja::detail

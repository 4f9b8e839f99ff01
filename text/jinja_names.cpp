// Template::names_read: the variable names a parsed template reads, found by walking its
// expressions (what a caller may pass it, e.g. xg-finetune's --template-var).
#include <set>

#include "text/detail/jinja_ast.hpp"

namespace xg::text::jinja {
namespace detail {
namespace {

// Explicit stacks, not recursion: a template's nesting is bounded by the parser (500 levels),
// but a walk that never recurses needs no bound of its own.
void collect_names(const Body& root, std::set<std::string>& names) {
  std::vector<const Stmt*> stmts;
  std::vector<const Expr*> exprs;
  for (const StmtPtr& s : root) stmts.push_back(s.get());
  auto push_expr = [&](const ExprPtr& e) {
    if (e) exprs.push_back(e.get());
  };
  while (!stmts.empty() || !exprs.empty()) {
    if (!exprs.empty()) {
      const Expr* e = exprs.back();
      exprs.pop_back();
      if (e->kind == Expr::Kind::Name) names.insert(e->name);
      for (const ExprPtr& a : e->args) push_expr(a);
      for (const auto& kw : e->kwargs) push_expr(kw.second);
      continue;
    }
    const Stmt* s = stmts.back();
    stmts.pop_back();
    push_expr(s->expr);
    push_expr(s->cond);
    for (const ExprPtr& c : s->conds) push_expr(c);
    for (const auto& p : s->params) push_expr(p.second);
    for (const Body& b : s->bodies)
      for (const StmtPtr& c : b) stmts.push_back(c.get());
  }
}

}  // namespace
}  // namespace detail

std::vector<std::string> Template::names_read() const {
  std::set<std::string> names;
  detail::collect_names(program_->body, names);
  return {names.begin(), names.end()};
}

}  // namespace xg::text::jinja

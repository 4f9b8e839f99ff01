// The parsed form of a Jinja-subset template: expressions and statements, each with the
// template line it came from for error messages. jinja_parse.cpp builds it, jinja_render.cpp
// walks it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja.hpp"

namespace xg::text::jinja::detail {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    ListLit,   // args: the items
    TupleLit,  // args: the items
    DictLit,   // args: key, value, key, value, ...
    Attr,      // args[0].name
    Item,      // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]], absent parts null
    Call,      // args[0](args[1..], kwargs)
    Filter,    // args[0] | name(args[1..], kwargs); args[0] null in a filter block
    Test,      // args[0] is [not] name(args[1..])
    Unary,     // name: "-", "+" or "not"; args[0]
    Binary,    // name: "+", "-", "*", "/", "//", "%", "**", "~", "and", "or"; args[0], args[1]
    Compare,   // args[0] ops[0] args[1] ops[1] args[2] ... (chained as in Python)
    Cond,      // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negate = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    Text,        // text
    Output,      // {{ expr }}
    If,          // conds[k] -> bodies[k]; bodies.back() is the else branch when it is longer
    For,         // for targets in expr [if cond] body [else else_body]
    Set,         // targets (or target.attr) = expr
    SetBlock,    // {% set target [| filters] %}body{% endset %}: expr, when set, is the filter chain
    Macro,       // name(params) body; uses_* say whether it takes varargs, kwargs, caller
    CallBlock,   // {% call(params) expr %}body{% endcall %}: expr is the call, the body its caller()
    With,        // {% with params %}body{% endwith %}: params are the names and their values
    Break,
    Continue,
    FilterBlock, // {% filter expr %}body{% endfilter %}: expr is a Filter chain on null
    Generation,  // transformers' {% generation %}body{% endgeneration %}, and {% block %}: the body
  };
  Kind kind;
  int line = 0;
  std::string text;                   // Text
  ExprPtr expr;                       // Output, For's iterable, Set's value, FilterBlock
  ExprPtr cond;                       // For's if-filter
  std::vector<ExprPtr> conds;         // If
  std::vector<Body> bodies;           // If's branches; For: [body, else]; others: [body]
  std::vector<std::string> targets;   // For, Set: names (several: unpacking)
  std::string attr;                   // Set: targets[0].attr = expr (namespace attribute)
  std::string name;                   // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro, CallBlock: names and defaults (or null)
  bool recursive = false;             // For: `recursive`, its body may call loop(items)
  bool generation = false;            // Generation: transformers' {% generation %} (not a {% block %})
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  // Macro, CallBlock
};

struct Program {
  Body body;
  TemplateOptions opts;
  bool has_generation = false;  // a {% generation %} block anywhere
};

// Parses the template source (jinja_parse.cpp).
std::shared_ptr<const Program> parse(const std::string& source, const TemplateOptions& opts);

}  // namespace xg::text::jinja::detail

// The Jinja lexer's tokens: template text, and the tags' names, literals and operators, each
// with its template line. jinja_lex.cpp makes them, jinja_parse.cpp reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/jinja.hpp"

namespace xg::text::jinja::detail {

struct Token {
  enum Type { Text, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string s;  // text, name, string value or operator
  int line;
  int64_t i = 0;
  double f = 0;
};

// The tokens of a template: its text and tags with Jinja2's whitespace control ({%- -%},
// trim_blocks, lstrip_blocks), "\r\n" read as "\n", one trailing newline dropped and
// {% raw %} blocks as text.
std::vector<Token> lex(const std::string& source, const TemplateOptions& opts);

}  // namespace xg::text::jinja::detail

// The Jinja subset's built-in filters, tests and Python methods (str, dict), with the
// Python operators they share with the renderer. Errors are xg::Error with the bare message;
// the renderer adds the template line.
#pragma once

#include <string>

#include "text/jinja.hpp"

namespace xg::text::jinja::detail {

bool is_filter(const std::string& name);
bool is_test(const std::string& name);

// `value | name(args, kwargs)`.
Value apply_filter(const std::string& name, const Value& value, const List& args, const Kwargs& kwargs);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, const List& args);
// `obj.name` for a method of str or dict, bound to obj; undefined when there is none.
Value method(const Value& obj, const std::string& name);

// Python's a < b (numbers, strings, lists); other types are an error naming both.
bool less(const Value& a, const Value& b);
// Python's `needle in haystack` (substring, list item, dict key; nothing is in undefined).
bool contains(const Value& haystack, const Value& needle);
// Python's len(); undefined has length 0.
int64_t length(const Value& v);
// The items a for loop or a filter walks: a list's items, a dict's keys, a string's
// characters, nothing for undefined.
List iterate(const Value& v);
// An error when v is undefined: "'name' is undefined" (Jinja2's UndefinedError).
void check_defined(const Value& v);

}  // namespace xg::text::jinja::detail

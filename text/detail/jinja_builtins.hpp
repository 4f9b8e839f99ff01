// The Jinja subset's built-in filters, tests and Python methods (str, list, dict), with the
// Python operators and string routines they share with the renderer. Errors are xg::Error
// with the bare message; the renderer adds the template line.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "text/jinja.hpp"

namespace xg::text::jinja::detail {

// The global names every template sees (jinja_globals.cpp): range, dict, namespace, joiner,
// cycler, raise_exception, strftime_now.
const Dict& builtin_globals();

bool is_filter(const std::string& name);
using FilterFn = Value (*)(const Value&, const List&, const Kwargs&);
// The filters that reshape text (jinja_text_filters.cpp), beside jinja_filters.cpp's.
const std::map<std::string, FilterFn>& text_filters();
bool is_test(const std::string& name);

// `value | name(args, kwargs)`.
Value apply_filter(const std::string& name, const Value& value, const List& args, const Kwargs& kwargs);
// `value is name(args)`.
bool apply_test(const std::string& name, const Value& value, const List& args);
// `obj.name` for a method of str, list or dict, bound to obj; undefined when there is none
// (jinja_methods.cpp). A method that changes its object is an error, as in Jinja2's
// ImmutableSandboxedEnvironment.
Value method(const Value& obj, const std::string& name);

// Jinja2's attribute and item lookup (jinja_render.cpp): `obj.name` tries an attribute (a
// method) first and then an item; `obj[key]` an item first.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// Python's str routines (jinja_methods.cpp).
std::string strip(const std::string& s, const Value& chars, bool left, bool right);
List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right = false);
std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

// Unicode as Python's str sees it (jinja_format.cpp, from ICU's character properties).
enum class CaseChange { Upper, Lower, Fold };
std::string change_case(const std::string& s, CaseChange how);  // str.upper(), lower(), casefold()
std::string title_case(const std::string& s);                   // str.title()
std::string capitalize(const std::string& s);                   // str.capitalize()
std::string swap_case(const std::string& s);                    // str.swapcase()
bool is_python_alpha(uint32_t cp);
bool is_python_decimal(uint32_t cp);
bool is_python_digit(uint32_t cp);
bool is_python_numeric(uint32_t cp);
bool is_cased(uint32_t cp);
bool is_lower(uint32_t cp);
bool is_upper(uint32_t cp);

// Python's formatting (jinja_format.cpp): `fmt % args` (a tuple is the values, a dict the
// %(name)s ones), str.format(*args, **kwargs), and ascii() of a repr.
std::string percent_format(const std::string& fmt, const Value& args);
std::string str_format(const std::string& fmt, const List& args, const Kwargs& kwargs);
std::string ascii_repr(const std::string& repr);

// markupsafe's escape(): & < > " ' as HTML entities.
std::string html_escape(const std::string& s);

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

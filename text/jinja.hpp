// Jinja2's template language for chat templates: Values with Python's semantics (what transformers'
// Jinja2 sees: dicts keep their order, str() of True is "True"), and a Template that parses
// once and renders many times. text/chat_template.hpp builds the chat API on it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace xg::text::jinja {

class Value;
using List = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(const List& args, const Kwargs& kwargs)>;

// A Python dict: insertion-ordered, looked up by a linear scan (chat messages have a handful
// of keys). Keys are any hashable value, equal as Python's are (1, 1.0 and True are one key).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  // 1 + how deeply its keys and values nest (Value::depth), kept by set() and Value::dict.
  int32_t depth = 1;
  const Value* find(const std::string& key) const;
  const Value* find(const Value& key) const;
  const Value* find(const char* key) const { return find(std::string(key)); }
  void set(Value key, Value value);  // an error for an unhashable key (a list, a dict)
};

// A template value. Lists, dicts and namespaces are shared by reference, as in Python, so
// `{% set ns.x = 1 %}` changes the namespace every name for it sees. Undefined is Jinja's
// default Undefined: it prints as "", is false, iterates as empty, and any attribute of it
// is an error naming it.
class Value {
 public:
  // Iterator: what Jinja2's select, reject, map, unique, batch, slice, items and reverse filters
  // return, a generator. It iterates once (copies share what is left of it), has no len(), no
  // items by index and no printable form, and is always true.
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Iterator };

  // What a List value is in Python: a list, a tuple, a dict view (dict.items() and friends)
  // or a range. They iterate alike and differ in printing, equality and `+`.
  enum class Seq : uint8_t { List, Tuple, GroupTuple, DictItems, DictKeys, DictValues, Range };  // GroupTuple: groupby's (grouper, list)

  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::Bool), b_(b) {}  // NOLINT: implicit, like the literal
  Value(int v) : kind_(Kind::Int), i_(v) {}  // NOLINT
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}  // NOLINT
  Value(double v) : kind_(Kind::Float), f_(v) {}  // NOLINT
  Value(std::string s);  // NOLINT: implicit, like the literal
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  static Value undefined(std::string message);
  static Value none();
  static Value list(List items);
  static Value tuple(List items);
  static Value sequence(Seq seq, List items, std::string range_repr = "");  // range_repr: "range(0, 3)"
  static Value markup(std::string s);
  static Value iterator(List items);  // markupsafe's Markup: an escaped string (the e filter's)
  static Value dict(Dict d);
  static Value ns(Dict d);  // Jinja's namespace(): attributes assignable by {% set %}
  static Value function(std::string name, Function fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  // How deeply lists, dicts and namespaces nest in this value (0: none), at most 500: destroying
  // a value recurses through its nesting, so a template nesting one without bound would
  // overflow the stack; making a deeper one is an error.
  int32_t depth() const { return (kind_ == Kind::Dict || kind_ == Kind::Namespace) && dict_ ? dict_->depth : depth_; }
  bool is_list() const { return kind_ == Kind::List; }  // any Seq
  bool is_tuple() const { return kind_ == Kind::List && (seq_ == Seq::Tuple || seq_ == Seq::GroupTuple); }
  Seq seq() const { return seq_; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_hashable() const;  // Python's: not a list, dict or namespace (nor a tuple holding one)
  bool is_dict() const { return kind_ == Kind::Dict; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? int64_t(b_) : i_; }
  double as_float() const { return kind_ == Kind::Float ? f_ : double(as_int()); }
  const std::string& as_string() const { return *s_; }
  const List& as_list() const { return *list_; }
  // An iterator's items not yet taken, the next one last (taking one is a pop_back).
  List& iterator_rest() const { return *list_; }
  const Dict& as_dict() const { return *dict_; }  // a dict's or a namespace's entries
  Dict& namespace_entries() const { return *dict_; }
  const Function& as_function() const { return *fn_; }
  // A function's name, a range's repr, or what using an undefined says: "'foo' is undefined",
  // "'dict object' has no attribute 'bar'" (Jinja2's messages).
  const std::string& name() const { return name_; }

  bool truthy() const;      // Python's bool()
  std::string str() const;  // Python's str(): what {{ }} prints ("" for undefined)
  std::string repr() const; // Python's repr(), as str() shows list items
  const char* type_name() const;  // Python's type name: "str", "dict", "NoneType", ...

 private:
  Kind kind_ = Kind::Undefined;
  Seq seq_ = Seq::List;
  bool markup_ = false;
  bool b_ = false;
  // A list's nesting (0 for a scalar); a dict's and a namespace's is its Dict's (depth()).
  int32_t depth_ = 0;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
  std::string name_;
};

// Python's ==: numbers by value (True == 1), lists and dicts deeply, undefined == undefined.
bool equals(const Value& a, const Value& b);

// JSON values become Values in their order; integers stay integers.
Value from_json(const nlohmann::ordered_json& j);

// Python's json.dumps(x, ensure_ascii, indent, separators, sort_keys), as transformers'
// tojson filter calls it. indent < 0 is None; the separators default as json.dumps's do.
struct JsonDump {
  int indent = -1;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator, key_separator;  // empty: json.dumps's defaults
};
std::string to_json(const Value& v, const JsonDump& opts = {});

// Jinja's whitespace settings; transformers renders chat templates with both on.
struct TemplateOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // drop spaces and tabs from a line's start up to a block tag
  std::string name = "template";  // how error messages name the template
};

namespace detail {
struct Program;
}

// A parsed template. Parsing refuses what the subset does not have ("template line 3:
// unsupported tag 'include'"); rendering throws xg::Error naming the line for runtime errors
// and for raise_exception(msg).
class Template {
 public:
  explicit Template(const std::string& source, TemplateOptions opts = {});
  // Renders with `context` as the global variables (beside the built-ins: range, namespace,
  // dict, raise_exception, strftime_now, true/false/none).
  std::string render(const Dict& context) const;
  // The same, with the byte range [begin, end) of the output of each {% generation %} block
  // printed straight into the output (transformers' return_assistant_tokens_mask).
  std::string render(const Dict& context, std::vector<std::pair<std::size_t, std::size_t>>* generation) const;
  // Whether the template has a {% generation %} block.
  bool has_generation() const;
  // Every variable name an expression of the template reads, sorted: what a caller's variable
  // must be among to be used (it includes names the template sets itself, and loop names).
  std::vector<std::string> names_read() const;

 private:
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace xg::text::jinja

// A builtin's arguments by position or keyword, as Python binds them to its parameters.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/error.hpp"
#include "text/jinja.hpp"

namespace xg::text::jinja::detail {

// A call's arguments by position or keyword, for a builtin with the parameters `names`.
class Args {
 public:
  Args(const char* what, const List& args, const Kwargs& kwargs, std::vector<const char*> names)
      : what_(what), args_(args), kwargs_(kwargs), names_(std::move(names)) {
    if (args.size() > names_.size())
      throw Error(str_cat(what_, " takes at most ", names_.size(), " argument(s) (", args.size(), " given)"));
    for (const auto& kv : kwargs) {
      const std::string& k = kv.first;
      auto it = std::find_if(names_.begin(), names_.end(), [&](const char* n) { return k == n; });
      if (it == names_.end()) throw Error(str_cat(what_, " got an unexpected keyword argument '", k, "'"));
      if (size_t(it - names_.begin()) < args.size()) throw Error(str_cat(what_, " got multiple values for '", k, "'"));
    }
  }
  bool has(size_t i) const { return i < args_.size() || kw(i); }
  Value get(size_t i, Value def = Value()) const {
    if (i < args_.size()) return args_[i];
    if (const Value* v = kw(i)) return *v;
    return def;
  }
  std::string str(size_t i, const std::string& def) const {
    Value v = get(i, Value(def));
    if (!v.is_string()) throw Error(str_cat(what_, ": '", names_[i], "' must be a string, not ", v.type_name()));
    return v.as_string();
  }
  int64_t integer(size_t i, int64_t def) const {
    Value v = get(i, Value(def));
    if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool)
      throw Error(str_cat(what_, ": '", names_[i], "' must be an integer, not ", v.type_name()));
    return v.as_int();
  }
  bool flag(size_t i, bool def) const { return get(i, Value(def)).truthy(); }

 private:
  const Value* kw(size_t i) const {
    if (i >= names_.size()) return nullptr;
    for (const auto& [k, v] : kwargs_)
      if (k == names_[i]) return &v;
    return nullptr;
  }
  const char* what_;
  const List& args_;
  const Kwargs& kwargs_;
  std::vector<const char*> names_;
};

}  // namespace xg::text::jinja::detail

// Reading tokenizer.json and tokenizer_config.json: a JSON value with the file it came from and
// its path inside it, so that every complaint names both:
//   /m/tokenizer.json: pre_tokenizer.pretokenizers[1].type "Whitespace" is not supported
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "autograd/error.hpp"

namespace xg::text::detail {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& j, std::string file, std::string path) : j_(j), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& json() const { return j_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  bool is_null() const { return j_.is_null(); }

  // True when this object has `key` with a value other than null.
  bool has(const char* key) const {
    if (!j_.is_object()) return false;
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  // The member `key` (a null node when absent); this node must be an object.
  JsonNode operator[](const char* key) const {
    expect_object();
    static const nlohmann::json null_json;
    auto it = j_.find(key);
    return JsonNode(it == j_.end() ? null_json : *it, file_, child_path(key));
  }
  JsonNode at(std::size_t i) const { return JsonNode(j_.at(i), file_, path_ + "[" + std::to_string(i) + "]"); }
  std::size_t size() const { return j_.size(); }

  void expect_object() const {
    if (!j_.is_object()) fail(str_cat("must be an object, got ", shown()));
  }
  void expect_array() const {
    if (!j_.is_array()) fail(str_cat("must be an array, got ", shown()));
  }
  std::string str() const {
    if (!j_.is_string()) fail(str_cat("must be a string, got ", shown()));
    return j_.get<std::string>();
  }
  bool boolean() const {
    if (!j_.is_boolean()) fail(str_cat("must be true or false, got ", shown()));
    return j_.get<bool>();
  }
  int64_t integer() const {
    if (!j_.is_number_integer()) fail(str_cat("must be an integer, got ", shown()));
    return j_.get<int64_t>();
  }
  // Required members.
  std::string str(const char* key) const { return require(key).str(); }
  int64_t integer(const char* key) const { return require(key).integer(); }
  // Optional members: `fallback` when absent or null.
  bool boolean_or(const char* key, bool fallback) const { return has(key) ? (*this)[key].boolean() : fallback; }
  std::string str_or(const char* key, const std::string& fallback) const { return has(key) ? (*this)[key].str() : fallback; }

  JsonNode require(const char* key) const {
    expect_object();
    if (!has(key)) fail_at(child_path(key), "is missing");
    return (*this)[key];
  }

  // "FILE: PATH WHAT" as an xg::Error.
  [[noreturn]] void fail(const std::string& what) const { fail_at(path_, what); }
  [[noreturn]] void fail_at(const std::string& path, const std::string& what) const {
    throw Error(file_ + ": " + (path.empty() ? std::string("the top level") : path) + " " + what);
  }
  // "FILE: PATH "VALUE" is not supported" (what, when given, follows in parentheses).
  [[noreturn]] void unsupported(const std::string& what = "") const {
    fail(shown() + " is not supported" + (what.empty() ? "" : " (" + what + ")"));
  }
  // This value, shortened for a message.
  std::string shown() const {
    std::string s = j_.dump();
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
  }

 private:
  std::string child_path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  const nlohmann::json& j_;
  std::string file_, path_;
};

}  // namespace xg::text::detail

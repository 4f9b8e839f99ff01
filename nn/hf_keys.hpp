// Typed access to the keys of a Hugging Face config.json, shared by the architectures' readers
// (nn/hf_config.cpp, nn/hf_gpt2.cpp); every error names the file and the key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autograd/error.hpp"
#include "nn/hf.hpp"

namespace xg::nn::hf_detail {

using json = nlohmann::ordered_json;

// Typed access to config.json's keys; every error names the file, the key and its value.
class Keys {
 public:
  Keys(const json& j, std::string source) : j_(j), source_(std::move(source)) {}
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool present(const char* key) const { return j_.contains(key); }  // null included
  const json& at(const char* key) const { return j_[key]; }
  int64_t integer(const char* key, int64_t def) const {
    if (!has(key)) return def;
    if (!j_[key].is_number_integer()) bad(key, "an integer");
    return j_[key].get<int64_t>();
  }
  int64_t positive(const char* key, int64_t def) const {
    const int64_t v = integer(key, def);
    if (v <= 0) bad(key, "a positive integer");
    return v;
  }
  double number(const char* key, double def) const {
    if (!has(key)) return def;
    if (!j_[key].is_number()) bad(key, "a number");
    return j_[key].get<double>();
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j_[key].is_boolean()) bad(key, "true or false");
    return j_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    if (!j_[key].is_string()) bad(key, "a string");
    return j_[key].get<std::string>();
  }
  [[noreturn]] void bad(const std::string& key, const std::string& expected) const {
    throw Error(str_cat(source_, ": key '", key, "' must be ", expected, ", got ", value(key)));
  }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw Error(str_cat(source_, ": key '", key, "' = ", value(key), " is not supported (", why, ")"));
  }

 private:
  // A key may be dotted ("rope_scaling.rope_type") to name a field of an object.
  std::string value(const std::string& key) const {
    const json* v = &j_;
    std::size_t start = 0;
    while (true) {
      const std::size_t dot = key.find('.', start);
      const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!v->is_object() || !v->contains(part)) return "nothing";
      v = &(*v)[part];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return v->dump();
  }
  const json& j_;
  std::string source_;
};

// An integer or a list of integers (eos_token_id); is_list says which.
inline std::vector<int64_t> read_ids(const Keys& k, const json& j, const char* key, bool& is_list) {
  is_list = false;
  if (!k.has(key)) return {};
  const json& v = j[key];
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (!v.is_array()) k.bad(key, "an integer, a list of integers or null");
  is_list = true;
  std::vector<int64_t> out;
  for (const json& e : v) {
    if (!e.is_number_integer()) k.bad(key, "an integer, a list of integers or null");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

// bos_token_id and eos_token_id as config.json holds them (null, an integer or a list).
void write_token_ids(json& j, const HFConfig& c);

// GPT2LMHeadModel (nn/hf_gpt2.cpp): config.json's keys into lm, back out, and the HF config of
// an xgrad model with GPT-2's block (an error naming what does not fit).
void read_gpt2(const Keys& k, LMConfig& lm);
std::string gpt2_to_json(const HFConfig& c);
HFConfig gpt2_from_lm(const LMConfig& lm);

}  // namespace xg::nn::hf_detail

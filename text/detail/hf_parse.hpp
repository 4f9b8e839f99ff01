// The tokenizer.json components read from their JSON (defined beside each component, in
// text/normalizers.cpp, pre_tokenizers.cpp and decoders.cpp). Each returns nullptr for a JSON
// null and throws an xg::Error naming the file, the path and the value of anything unsupported.
#pragma once

#include <memory>
#include <vector>

#include "text/decoders.hpp"
#include "text/detail/json_node.hpp"
#include "text/normalizers.hpp"
#include "text/pre_tokenizers.hpp"

namespace xg::text::detail {

std::unique_ptr<Normalizer> parse_normalizer(const JsonNode& j);
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const JsonNode& j);
std::unique_ptr<Decoder> parse_decoder(const JsonNode& j);

// The "pattern" of Split, Replace: {"String": "..."} or {"Regex": "..."}. For a string, sets
// `literal`; for a regex, returns it compiled.
// The components of a Sequence: parse(j[key][i]) for each i, nulls left out.
template <class T, class Parse>
std::vector<std::unique_ptr<T>> parse_list(const JsonNode& j, const char* key, Parse parse) {
  const JsonNode list = j.require(key);
  list.expect_array();
  std::vector<std::unique_ptr<T>> steps;
  for (std::size_t i = 0; i < list.size(); ++i)
    if (std::unique_ptr<T> step = parse(list.at(i))) steps.push_back(std::move(step));
  return steps;
}

// Metaspace's "prepend_scheme" ("always", "first", "never"), or its older "add_prefix_space".
PrependScheme parse_prepend_scheme(const JsonNode& j);

std::unique_ptr<Regex> parse_pattern(const JsonNode& j, std::string& literal);

}  // namespace xg::text::detail

// Reader for R's lazy-load databases (`<base>.rdx` index + `<base>.rdb` blobs), enough of R's
// XDR serialization (formats 2 and 3) to get the character vectors of r-cran-janeaustenr.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace xg::finetune::rdata {

// An R value, as far as this reader understands one. Types: R's SEXPTYPE codes.
struct RObject {
  enum Type : int { Nil = 0, Symbol = 1, Pairlist = 2, Char = 9, Logical = 10, Integer = 13,
                    Real = 14, String = 16, List = 19 };
  Type type = Nil;
  std::string text;                           // Char, Symbol: the bytes (NA: na = true)
  bool na = false;                            // Char: NA_character_
  std::vector<int32_t> ints;                  // Logical, Integer (NA = INT32_MIN)
  std::vector<double> reals;                  // Real
  std::vector<std::string> strings;           // String (NA elements as "")
  std::vector<std::shared_ptr<RObject>> items;  // List elements; Pairlist values (CARs)
  std::vector<std::string> tags;              // Pairlist: each cell's tag ("" when untagged)
  std::shared_ptr<RObject> attributes;        // a Pairlist, or null

  // The `names` attribute as strings (empty when absent).
  std::vector<std::string> names() const;
};
using RObjectPtr = std::shared_ptr<RObject>;

// Deserialises R's XDR format ("X\n", version 2 or 3) from `bytes`. `source` names the input
// in error messages ("Rdata.rdb[0+352043]"). Throws xg::Error on anything it does not know.
RObjectPtr unserialize(const std::string& bytes, const std::string& source);

// Inflates a zlib stream (raw zlib, or gzip when `gzip` is set) whose inflated size is at most
// `max_size` (and exactly `expected_size` when that is >= 0).
std::string inflate(const std::string& compressed, const std::string& source, int64_t expected_size,
                    bool gzip = false, std::size_t max_size = std::size_t(1) << 30);

// Every variable of the lazy-load database `<base>.rdx`/`<base>.rdb` that is a character
// vector, by name (e.g. janeaustenr's data/Rdata: "emma" -> its lines). Other variables throw.
std::map<std::string, std::vector<std::string>> read_lazyload_character_vectors(const std::string& base);

}  // namespace xg::finetune::rdata

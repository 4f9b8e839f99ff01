// Command-line flags of xgrad's executables (finetune/tools, experiments, bench): one-line usage
// errors, parsing with boost::program_options, choices by name, comma-separated lists, flags as JSON.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace xg::cli {

namespace po = boost::program_options;

// A bad flag or flag value: reported in one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// po::store, and a usage error for a negative value of an unsigned flag (a seed): Boost reads
// "-1" as 2^64 - 1 without a word; and for NaN or Inf given to any number flag.
void store_checked(const po::parsed_options& parsed, po::variables_map& vm);

// A group of flags for help_text(): Boost's own wrapping is off (it cuts a word in two when the
// line has no space in its second half: "checkpoint.safetens/ors").
po::options_description flag_group(const std::string& caption = "");
// The --help text of `opts` (made by flag_group): one column of flag names, the descriptions
// wrapped at spaces to `width` columns, and a floating-point default as %.15g (Boost prints 17
// digits: 0.10000000000000001).
std::string help_text(const po::options_description& opts, std::size_t width = 100);

// Parses argv into vm (a usage error for an unknown flag or a bad value); prints `usage`, a blank
// line and the options, and returns true, for --help.
bool parse(int argc, char** argv, const po::options_description& opts, po::variables_map& vm,
           const std::string& usage);

// `text` as one of the names of `choices`, or a usage error
// "--FLAG: expected one of A, B, C, got 'TEXT'".
template <class T>
T choice(const std::string& flag, const std::string& text, const std::map<std::string, T>& choices) {
  auto it = choices.find(text);
  if (it != choices.end()) return it->second;
  std::string names;
  for (const auto& [k, v] : choices) names += (names.empty() ? "" : ", ") + k;
  throw UsageError("--" + flag + ": expected one of " + names + ", got '" + text + "'");
}

// A usage error saying `message` unless `ok`.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

// A usage error "WHAT needs about N GB, more than this machine's M GB of memory" when `bytes`
// exceed it (xg::check_memory): `what` names the flags and values that ask for them.
void require_memory(double bytes, const std::string& what);

// "a,b,c" as numbers, each > 0 when `positive`, each finite when `finite`; otherwise a
// UsageError "--FLAG: expected a comma-separated list of [positive ]numbers, got 'TEXT'".
std::vector<double> parse_doubles(const std::string& flag, const std::string& text, bool positive, bool finite);

// "a,b,c" as integers >= min; otherwise a UsageError "--FLAG: expected a comma-separated list of
// WHAT, got 'TEXT'", WHAT being `what` or, when empty, "integers >= MIN".
std::vector<int64_t> parse_ints(const std::string& flag, const std::string& text, int64_t min,
                                const std::string& what = "");

// NAME=VALUE items of a repeatable flag as a JSON object: VALUE parsed as JSON (false, 3,
// [...], {...}, "quoted"), else taken as a string (a bare word). A usage error "--FLAG: ..." for
// an item without '=' or with an empty name, and for a name given twice.
nlohmann::ordered_json parse_assignments(const std::string& flag, const std::vector<std::string>& items);

// Every flag in vm by its name, as a JSON object (for the args.json or JSON header beside an
// executable's outputs): numbers, strings and booleans as themselves, any other type as true;
// no flags at all is {}. NOTE: a switch declared without a value (--sweep) holds an empty string
// in program_options, so it is recorded as "" (as the JSON outputs always have).
nlohmann::json flags_json(const po::variables_map& vm);

}  // namespace xg::cli

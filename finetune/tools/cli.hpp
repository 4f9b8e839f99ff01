// What xg-train, xg-finetune and xg-generate share on the command line: usage errors in one
// line with exit status 2, other failures in one line with status 1, choices parsed by name,
// and the flags recorded as JSON beside the outputs.
#pragma once

#include <boost/program_options.hpp>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "autograd/error.hpp"

namespace xg::finetune::cli {

namespace po = boost::program_options;

// A bad flag or flag value: one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses argv into vm (a usage error for an unknown flag or a bad value); prints the options
// and returns true for --help.
inline bool parse(int argc, char** argv, const po::options_description& opts, po::variables_map& vm,
                  const std::string& usage) {
  po::store(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << opts << "\n";
    return true;
  }
  po::notify(vm);
  return false;
}

// Runs `parse_flags` then `body`, turning exceptions into one line on stderr:
// po::error / UsageError while parsing -> 2; any error in body -> 1 (an xg::Error already
// names the file, line or module).
inline int run_main(const char* program, const std::function<int()>& parse_flags, const std::function<int()>& body) {
  try {
    const int rc = parse_flags();
    if (rc >= 0) return rc;  // --help
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    std::cerr << program << ": " << e.what() << " (see --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << "\n";
    return 1;
  }
}

// `text` as one of the names of `choices`, or a usage error naming the flag.
template <class T>
T choice(const std::string& flag, const std::string& text, const std::map<std::string, T>& choices) {
  auto it = choices.find(text);
  if (it != choices.end()) return it->second;
  std::string names;
  for (const auto& [k, v] : choices) names += (names.empty() ? "" : ", ") + k;
  throw UsageError("--" + flag + ": expected one of " + names + ", got '" + text + "'");
}

inline void require(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

// The parsed flags as a JSON object (for args.json beside the outputs).
inline nlohmann::json flags_json(const po::variables_map& vm) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, v] : vm) {
    const auto& val = v.value();
    if (val.type() == typeid(int64_t)) j[name] = v.as<int64_t>();
    else if (val.type() == typeid(uint64_t)) j[name] = v.as<uint64_t>();
    else if (val.type() == typeid(double)) j[name] = v.as<double>();
    else if (val.type() == typeid(std::string)) j[name] = v.as<std::string>();
    else if (val.type() == typeid(bool)) j[name] = v.as<bool>();
    else j[name] = true;
  }
  return j;
}

}  // namespace xg::finetune::cli

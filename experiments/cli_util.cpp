// The experiment executables' shared command-line plumbing (see cli_util.hpp): list parsing
// with one-line usage errors, mkdir -p, file writing, printf formatting and the JSON header.
#include "experiments/cli_util.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#ifndef XGRAD_GIT_REVISION
#define XGRAD_GIT_REVISION "unknown"
#endif

namespace xg::experiments::cli {

namespace {

// Splits `text` at commas and converts each item whole with `convert` (std::stod, std::stoll);
// an item it cannot read whole, or that `ok` rejects, is a UsageError naming what was expected.
template <typename T, typename Convert, typename Ok>
std::vector<T> parse_list(const std::string& flag, const std::string& text, const std::string& expected,
                          Convert convert, Ok ok) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    T v = 0;
    try {
      v = convert(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !ok(v))
      throw UsageError("--" + flag + ": expected a comma-separated list of " + expected + ", got '" + text + "'");
    out.push_back(v);
  }
  if (out.empty()) throw UsageError("--" + flag + ": expected at least one value");
  return out;
}

}  // namespace

std::vector<double> parse_doubles(const std::string& flag, const std::string& text, bool positive, bool finite) {
  return parse_list<double>(
      flag, text, positive ? "positive numbers" : "numbers",
      [](const std::string& s, std::size_t* used) { return std::stod(s, used); },
      [&](double v) { return (!finite || std::isfinite(v)) && (!positive || v > 0); });
}

std::vector<int64_t> parse_ints(const std::string& flag, const std::string& text, int64_t min,
                                const std::string& what) {
  return parse_list<int64_t>(
      flag, text, what.empty() ? "integers >= " + std::to_string(min) : what,
      [](const std::string& s, std::size_t* used) { return static_cast<int64_t>(std::stoll(s, used)); },
      [&](int64_t v) { return v >= min; });
}

void make_dir(const std::string& dir) {
  std::string path;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/') path = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    path += part + "/";
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create output folder " + path);
  }
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << text;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

nlohmann::json flags_json(const boost::program_options::variables_map& vm) {
  nlohmann::json flags;
  for (const auto& [name, v] : vm) {
    const auto& val = v.value();
    if (val.type() == typeid(int64_t)) flags[name] = v.as<int64_t>();
    else if (val.type() == typeid(uint64_t)) flags[name] = v.as<uint64_t>();
    else if (val.type() == typeid(double)) flags[name] = v.as<double>();
    else if (val.type() == typeid(std::string)) flags[name] = v.as<std::string>();  // also --sweep: ""
    else if (val.type() == typeid(bool)) flags[name] = v.as<bool>();  // po::bool_switch (--quick, --final-norm)
    else flags[name] = true;
  }
  return flags;
}

nlohmann::json experiment_json(const std::string& prog, const std::string& part, uint64_t seed,
                               const nlohmann::json& flags) {
  return nlohmann::json{
      {"experiment", prog + " " + part}, {"git_revision", XGRAD_GIT_REVISION}, {"seed", seed}, {"flags", flags}};
}

void report_plot(const std::string& dir, const std::string& stem, bool ok, const std::string& why, bool& warned) {
  if (ok) {
    std::cout << "wrote " << dir << "/" << stem << ".png and .svg\n";
  } else if (!warned) {
    std::cout << "no plot: " << why << "\n";
    warned = true;
  }
}

}  // namespace xg::experiments::cli

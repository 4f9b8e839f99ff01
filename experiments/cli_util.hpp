// What the experiment executables (prenorm_vs_postnorm, seed_demos) share on the command line:
// usage errors, comma-separated lists, the output folder and files, the JSON header, plot notes.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace xg::experiments::cli {

// A usage error: reported in one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "a,b,c" as numbers, each > 0 when `positive`, each finite when `finite`; otherwise a
// UsageError "--FLAG: expected a comma-separated list of [positive ]numbers, got 'TEXT'".
std::vector<double> parse_doubles(const std::string& flag, const std::string& text, bool positive, bool finite);

// "a,b,c" as integers >= min; otherwise a UsageError "--FLAG: expected a comma-separated list of
// WHAT, got 'TEXT'", WHAT being `what` or, when empty, "integers >= MIN".
std::vector<int64_t> parse_ints(const std::string& flag, const std::string& text, int64_t min,
                                const std::string& what = "");

// Creates `dir` and its missing parents (mkdir -p).
void make_dir(const std::string& dir);

// Writes `text` to `path`, replacing it.
void write_text(const std::string& path, const std::string& text);

// One number through printf's format `f` ("%.9g"); NaN as printf writes it ("nan" or "-nan").
std::string fmt(const char* f, double v);

// Every flag in vm by its name: numbers, strings and booleans as themselves, any other type as
// true. NOTE: a switch declared without a value (--sweep) holds an empty string in
// program_options, so it is recorded as "" (as the JSON outputs always have).
nlohmann::json flags_json(const boost::program_options::variables_map& vm);

// The header of every JSON output: {"experiment": "PROG PART", "git_revision", "seed", "flags"}.
nlohmann::json experiment_json(const std::string& prog, const std::string& part, uint64_t seed,
                               const nlohmann::json& flags);

// Prints "wrote DIR/STEM.png and .svg" when the plot was made (`ok`); otherwise, once per run
// (`warned`), "no plot: WHY".
void report_plot(const std::string& dir, const std::string& stem, bool ok, const std::string& why, bool& warned);

}  // namespace xg::experiments::cli

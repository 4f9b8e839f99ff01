// What xgrad's executables write beside their results: the output folder and text files, printf
// formatting, the git revision they were built from, the experiments' JSON header, plot notes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace xg::cli {

// Creates `dir` and its missing parents (mkdir -p).
void make_dir(const std::string& dir);

// Writes `text` to `path`, replacing it.
void write_text(const std::string& path, const std::string& text);

// One number through printf's format `f` ("%.9g"); NaN as printf writes it ("nan" or "-nan").
std::string fmt(const char* f, double v);

// The short git revision of the source tree these executables were configured from ("unknown"
// outside a git clone): recorded in every JSON they write.
const char* git_revision();

// The header of every experiment's JSON output: {"experiment": "PROG PART", "git_revision",
// "seed", "flags"}.
// The run's settings (xg::settings(): every environment variable xgrad reads, and --threads),
// with the gemm backend and the thread policy they resolved to: what the run log, args.json and
// the benchmarks' JSON record of how a number was made.
nlohmann::json settings_json();

nlohmann::json experiment_json(const std::string& prog, const std::string& part, uint64_t seed,
                               const nlohmann::json& flags);

// Prints "wrote DIR/STEM.png and .svg" when the plot was made (`ok`); otherwise, once per run
// (`warned`), "no plot: WHY".
void report_plot(const std::string& dir, const std::string& stem, bool ok, const std::string& why, bool& warned);

}  // namespace xg::cli

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
#include "finetune/distributed.hpp"
#include "finetune/train_loop.hpp"

namespace xg::finetune::cli {

namespace po = boost::program_options;

// A bad flag or flag value: one line, exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// po::store, and a usage error for a negative value of an unsigned flag (a seed): Boost
// reads "-1" as 2^64 - 1 without a word.
inline void store_checked(const po::parsed_options& parsed, po::variables_map& vm) {
  po::store(parsed, vm);
  for (const po::option& o : parsed.options) {
    auto it = vm.find(o.string_key);
    if (it == vm.end() || it->second.value().type() != typeid(uint64_t)) continue;
    for (const std::string& v : o.value)
      if (v.find('-') != std::string::npos)
        throw UsageError("--" + o.string_key + ": expected an integer >= 0, got '" + v + "'");
  }
}

// Parses argv into vm (a usage error for an unknown flag or a bad value); prints the options
// and returns true for --help.
inline bool parse(int argc, char** argv, const po::options_description& opts, po::variables_map& vm,
                  const std::string& usage) {
  store_checked(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << opts << "\n";
    return true;
  }
  po::notify(vm);
  return false;
}

// Runs `parse_flags` then `body`, turning exceptions into one line on stderr:
// po::error / UsageError while parsing -> 2; any error in body -> 1 (an xg::Error already
// names the file, line or module). Under mpirun, every rank parses the same flags, so only
// rank 0 reports a bad one; an error while running is reported by each rank that meets it
// (ranks other than 0 say which they are) and aborts the whole job, since the other ranks
// would wait for the failed one in a collective.
inline int run_main(const char* program, const std::function<int()>& parse_flags, const std::function<int()>& body) {
  // Library errors from the training loop already start with the program's name.
  auto what = [&](const std::exception& e) {
    const std::string w = e.what(), prefix = std::string(program) + ": ";
    return w.rfind(prefix, 0) == 0 ? w.substr(prefix.size()) : w;
  };
  const bool parallel = Distributed::size() > 1;
  auto fail = [&](const std::exception& e, const char* hint, int rc) {
    std::string rank;
    if (parallel && !Distributed::is_main()) rank = " [rank " + std::to_string(Distributed::rank()) + "]";
    std::cerr << (std::string(program) + rank + ": " + what(e) + hint + "\n") << std::flush;  // one write
    if (parallel) Distributed::abort(rc);
    return rc;
  };
  try {
    const int rc = parse_flags();
    if (rc >= 0) return rc;  // --help
  } catch (const std::exception& e) {
    if (Distributed::is_main()) std::cerr << (std::string(program) + ": " + what(e) + " (see --help)\n");
    return 2;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    return fail(e, " (see --help)", 2);
  } catch (const std::exception& e) {
    return fail(e, "", 1);
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

// The flags of the training loop every trainer shares (xg-train, xg-finetune), bound to `o`,
// whose current values are the defaults shown. `seed_help` says what the seed drives.
inline po::options_description loop_flags(LoopOptions& o, const std::string& seed_help) {
  po::options_description g("training loop");
  // clang-format off
  g.add_options()
    ("lr", po::value(&o.lr)->default_value(o.lr), "peak learning rate (AdamW over the trained parameters)")
    ("warmup", po::value(&o.warmup)->default_value(o.warmup), "linear warmup steps")
    ("schedule", po::value(&o.schedule)->default_value(o.schedule), "cosine | linear | constant (after the warmup)")
    ("min-lr-ratio", po::value(&o.min_lr_ratio)->default_value(o.min_lr_ratio), "final lr / peak lr (cosine, linear)")
    ("weight-decay", po::value(&o.weight_decay)->default_value(o.weight_decay), "AdamW weight decay (not on 1-d parameters)")
    ("clip", po::value(&o.clip)->default_value(o.clip), "max gradient norm (0 = off)")
    ("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps")
    ("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum), "micro-batches per optimizer step (per rank under mpirun)")
    ("seed", po::value(&o.seed)->default_value(o.seed), seed_help.c_str())
    ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "held-out evaluation every N steps (0 = at the end only)")
    ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every), "checkpoint every N steps (0 = at the end only)")
    ("log-every", po::value(&o.log_every)->default_value(o.log_every), "log line every N steps when not on a terminal")
    ("resume", po::bool_switch(&o.resume), "continue from <out>/checkpoint.safetensors (same flags)")
    ("on-nan", po::value(&o.on_nan)->default_value(o.on_nan), "a NaN/Inf loss or gradient: stop (error, last checkpoint kept) | skip (no update that step)")
    ("detect-anomaly", po::bool_switch(&o.detect_anomaly), "name the first op and module that made a NaN/Inf (slower)");
  // clang-format on
  return g;
}

// LoopOptions::validate, reported as a usage error (one line, exit status 2).
inline void validate_loop(const LoopOptions& o, const std::string& program) {
  try {
    o.validate(program);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace xg::finetune::cli

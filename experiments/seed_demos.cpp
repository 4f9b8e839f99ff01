// seed_demos: small demonstrations of LLM components with xgrad's real modules, one subcommand
// each: positional encodings (none / sinusoidal / RoPE), KV-cache sizes (MHA / GQA / MQA / MLA),
// QK-Norm, LayerNorm and RMSNorm by hand, SwiGLU parameter counts and softmax overflow.
// Prints each table; writes CSV, JSON (flags, seed, git revision) and gnuplot plots to --out.
// The computations live in experiments/demos/; this file parses flags and writes files.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/error.hpp"
#include "experiments/demos/demo_plot.hpp"
#include "experiments/demos/kvcache.hpp"
#include "experiments/demos/norms.hpp"
#include "experiments/demos/positions.hpp"
#include "experiments/demos/qknorm.hpp"
#include "experiments/demos/softmax_overflow.hpp"
#include "experiments/demos/swiglu.hpp"
#include "experiments/plot.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/output.hpp"
#include "tools/cli/threads.hpp"

namespace po = boost::program_options;
namespace ex = xg::experiments;
namespace dm = xg::experiments::demos;
namespace cli = xg::cli;
using nlohmann::json;

namespace {

constexpr const char* kProg = "seed_demos";

using cli::UsageError;

// --- flag parsing and output helpers ---------------------------------------------------------------

// Numbers must be finite here (NaN and inf are what the softmax demo computes, not takes).
std::vector<double> parse_doubles(const std::string& flag, const std::string& text, bool positive) {
  return cli::parse_doubles(flag, text, positive, /*finite=*/true);
}

// printf may print "-nan": the demos' tables and CSV files say "nan".
std::string fmt(const char* f, double v) { return std::isnan(v) ? "nan" : cli::fmt(f, v); }

std::string list(const std::vector<double>& v, const char* f) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fmt(f, v[i]);
  return s + "]";
}

// NaN and inf as strings: JSON has no literal for them.
json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json nums(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(num(x));
  return a;
}

// Everything a subcommand needs besides its own flags.
struct Run {
  std::string out;  // the folder of this subcommand's files
  json flags;
  uint64_t seed = 42;
  bool quick = false;
  bool warned = false;  // "no plot" reported once
  json base(const std::string& demo) const { return cli::experiment_json(kProg, demo, seed, flags); }
  void wrote(const std::string& what) const { std::cout << "wrote " << out << "/" << what << "\n"; }
  void plotted(const std::string& stem, bool ok, const std::string& why) {
    cli::report_plot(out, stem, ok, why, warned);
  }
  void line_plot(const std::string& stem, const ex::PlotSpec& spec) {
    std::string why;
    bool ok = ex::plot(out, stem, spec, &why);
    plotted(stem, ok, why);
  }
};

// --- the flags of every subcommand ----------------------------------------------------------------

struct Flags {
  // positions
  dm::PositionsConfig pos;
  std::string pos_shifts = "1,7,100,1000";
  // kvcache
  int64_t kv_seq_len = 4096, kv_bytes = 2;
  dm::CacheCheckConfig kv_check;
  // qknorm
  dm::QKNormConfig qk;
  std::string qk_scales;
  // norms
  std::string norms_x = "1,3,5,7", norms_homework = "3,4";
  int64_t norms_param_dim = 8;
  // swiglu
  std::string swiglu_d_models = "64,512,1024";
  int64_t swiglu_multiple_of = 256;
  // softmax
  std::string softmax_logits = "1000,1001,1002;10,5,100;1,2,3", softmax_targets = "2,1,2";
};

void add_positions(po::options_description& o, Flags& f) {
  // clang-format off
  o.add_options()
    ("seq-len", po::value<int64_t>(&f.pos.seq_len)->default_value(16), "tokens")
    ("d-model", po::value<int64_t>(&f.pos.d_model)->default_value(32), "token width")
    ("d-head", po::value<int64_t>(&f.pos.head_dim)->default_value(32), "q/k width (one head)")
    ("noise", po::value<double>(&f.pos.noise)->default_value(0.03), "per-token noise on the shared vector (0: identical tokens)")
    ("token-scale", po::value<double>(&f.pos.token_scale)->default_value(0.5), "scale of the shared token vector")
    ("gain", po::value<double>(&f.pos.gain)->default_value(0.5), "xavier_normal_ gain of W_q and W_k")
    ("shifts", po::value<std::string>(&f.pos_shifts)->default_value("1,7,100,1000"), "position shifts s of the RoPE check");
  // clang-format on
}

void add_kvcache(po::options_description& o, Flags& f) {
  // clang-format off
  o.add_options()
    ("seq-len", po::value<int64_t>(&f.kv_seq_len)->default_value(4096), "context length of the tables")
    ("dtype-bytes", po::value<int64_t>(&f.kv_bytes)->default_value(2), "bytes per cached number (2: bf16)")
    ("check-d-model", po::value<int64_t>(&f.kv_check.d_model)->default_value(64), "cross-check model width")
    ("check-heads", po::value<int64_t>(&f.kv_check.n_heads)->default_value(4), "cross-check query heads")
    ("check-latent", po::value<int64_t>(&f.kv_check.latent_dim)->default_value(16), "cross-check MLA latent size")
    ("check-rope-dim", po::value<int64_t>(&f.kv_check.rope_dim)->default_value(8), "cross-check decoupled RoPE key size (0: skip)")
    ("batch", po::value<int64_t>(&f.kv_check.batch)->default_value(2), "cross-check batch")
    ("prefill", po::value<int64_t>(&f.kv_check.prefill)->default_value(6), "cross-check prompt tokens")
    ("decode", po::value<int64_t>(&f.kv_check.decode)->default_value(3), "cross-check tokens decoded one at a time");
  // clang-format on
}

void add_qknorm(po::options_description& o, Flags& f) {
  // clang-format off
  o.add_options()
    ("d-head", po::value<int64_t>(&f.qk.head_dim)->default_value(8), "head width")
    ("seq-len", po::value<int64_t>(&f.qk.seq_len)->default_value(4), "keys per query")
    ("k-scale", po::value<double>(&f.qk.k_scale)->default_value(8.0), "key scale of the example: K = randn * k-scale")
    ("scales", po::value<std::string>(&f.qk_scales), "key scales of the sweep (default 2^-2 .. 2^7)")
    ("trials", po::value<int64_t>(&f.qk.trials)->default_value(32), "random (Q, K) draws per sweep point");
  // clang-format on
}

void add_norms(po::options_description& o, Flags& f) {
  // clang-format off
  o.add_options()
    ("x", po::value<std::string>(&f.norms_x)->default_value("1,3,5,7"), "the vector to normalise")
    ("homework", po::value<std::string>(&f.norms_homework)->default_value("3,4"), "the second example's vector")
    ("param-dim", po::value<int64_t>(&f.norms_param_dim)->default_value(8), "width of the parameter-count comparison");
  // clang-format on
}

void add_swiglu(po::options_description& o, Flags& f) {
  // clang-format off
  o.add_options()
    ("d-models", po::value<std::string>(&f.swiglu_d_models)->default_value("64,512,1024"),
     "model widths (4096 gives LLaMA-7B's 11008 but allocates about 1 GB)")
    ("multiple-of", po::value<int64_t>(&f.swiglu_multiple_of)->default_value(256), "SwiGLU d_ff rounding");
  // clang-format on
}

void add_softmax(po::options_description& o, Flags& f) {
  // clang-format off
  o.add_options()
    ("logits", po::value<std::string>(&f.softmax_logits)->default_value("1000,1001,1002;10,5,100;1,2,3"),
     "rows of logits, ';' between rows")
    ("targets", po::value<std::string>(&f.softmax_targets)->default_value("2,1,2"), "one class per row (cross-entropy)");
  // clang-format on
}

// --- positions ---------------------------------------------------------------------------------------

void run_positions(const Flags& f, Run& run) {
  dm::PositionsConfig c = f.pos;
  c.seed = run.seed;
  c.shifts = cli::parse_ints("shifts", f.pos_shifts, 1);
  dm::PositionsResult r = dm::run_positions(c);
  const int64_t T = c.seq_len;
  std::cout << "=== Positional encodings: none vs sinusoidal vs RoPE ===\n"
            << "All tokens are nearly the same vector (randn * " << c.token_scale << " + randn * " << c.noise
            << "), so differences in attention come from positions alone.\n"
            << "seq_len " << T << ", d_model " << c.d_model << ", d_head " << c.head_dim
            << ", W_q/W_k xavier_normal_(gain " << c.gain << "), xgrad generator seed " << c.seed
            << "; RoPE in interleaved pairs (2i, 2i+1)\n\n";
  std::printf("Mean attention weight by relative distance |i-j| (uniform = %.4f):\n", 1.0 / T);
  std::printf("%6s  %10s  %10s  %10s   %10s  %10s  %10s\n", "|i-j|", "none", "sinusoidal", "rope", "score none",
              "score sin", "score rope");
  const dm::PositionScheme* schemes[3] = {&r.none, &r.sinusoidal, &r.rope};
  for (int64_t d = 0; d < T; ++d)
    std::printf("%6lld  %10.4f  %10.4f  %10.4f   %10.4f  %10.4f  %10.4f\n", static_cast<long long>(d),
                r.none.weight_profile[d], r.sinusoidal.weight_profile[d], r.rope.weight_profile[d],
                r.none.score_profile[d], r.sinusoidal.score_profile[d], r.rope.score_profile[d]);
  std::printf("\nKey observations:\n");
  const char* labels[3] = {"no positional encoding", "sinusoidal", "RoPE"};
  for (int s = 0; s < 3; ++s)
    std::printf("  %d. %-22s weight at distance 0 %.3f, at distance %lld %.3f; max |w - 1/T| = %.4f\n", s + 1,
                labels[s], schemes[s]->weight_profile.front(), static_cast<long long>(T - 1),
                schemes[s]->weight_profile.back(), schemes[s]->max_dev_uniform);
  std::printf("\nRelative position: the same tokens at positions i+s, j+s (s in %s):\n", f.pos_shifts.c_str());
  std::printf("  RoPE scores change by at most %.3g (max |score| %.3f): q_i.k_j depends on j-i alone\n",
              r.rope.max_shift_change, r.max_abs_score);
  std::printf("  sinusoidal scores change by up to %.3g: PE_i.PE_j cross terms depend on absolute positions\n",
              r.sinusoidal.max_shift_change);
  std::printf("Spread of the scores along each diagonal j-i (max - min; 0 = a function of j-i alone):\n"
              "  these tokens (noise %g):  none %.3g, sinusoidal %.3g, RoPE %.3g\n"
              "  identical tokens:       none %.3g, sinusoidal %.3g, RoPE %.3g\n\n",
              c.noise, r.none.toeplitz_spread, r.sinusoidal.toeplitz_spread, r.rope.toeplitz_spread,
              r.none.identical_toeplitz_spread, r.sinusoidal.identical_toeplitz_spread,
              r.rope.identical_toeplitz_spread);

  std::ostringstream maps, prof;
  maps << "scheme,i,j,score,weight\n";
  for (const auto* s : schemes)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        maps << s->name << "," << i << "," << j << "," << fmt("%.9g", s->scores[i][j]) << ","
             << fmt("%.9g", s->weights[i][j]) << "\n";
  prof << "distance,weight_none,weight_sinusoidal,weight_rope,score_none,score_sinusoidal,score_rope\n";
  for (int64_t d = 0; d < T; ++d) {
    prof << d;
    for (const auto* s : schemes) prof << "," << fmt("%.9g", s->weight_profile[d]);
    for (const auto* s : schemes) prof << "," << fmt("%.9g", s->score_profile[d]);
    prof << "\n";
  }
  cli::write_text(run.out + "/positions_maps.csv", maps.str());
  cli::write_text(run.out + "/positions_profile.csv", prof.str());
  json j = run.base("positions");
  for (const auto* s : schemes)
    j["schemes"][s->name] = {{"weight_profile", s->weight_profile}, {"score_profile", s->score_profile},
                             {"max_dev_uniform", s->max_dev_uniform}, {"toeplitz_spread", s->toeplitz_spread},
                             {"identical_toeplitz_spread", s->identical_toeplitz_spread},
                             {"max_shift_change", s->max_shift_change}};
  j["shifts"] = c.shifts;
  j["max_abs_score"] = r.max_abs_score;
  cli::write_text(run.out + "/positions.json", j.dump(2) + "\n");
  run.wrote("positions_maps.csv, positions_profile.csv and positions.json");

  ex::HeatmapGrid grid;
  grid.title = "Near-identical tokens: attention scores (top) and weights (bottom)";
  grid.xlabel = "key position j";
  grid.ylabel = "query position i";
  for (int s = 0; s < 3; ++s) grid.panels.push_back({std::string(labels[s]) + ": scores", schemes[s]->scores, true});
  for (int s = 0; s < 3; ++s) grid.panels.push_back({std::string(labels[s]) + ": softmax", schemes[s]->weights, false});
  std::string why;
  bool ok = ex::plot_heatmaps(run.out, "positions_maps", grid, &why);
  run.plotted("positions_maps", ok, why);

  std::vector<double> dist;
  for (int64_t d = 0; d < T; ++d) dist.push_back(static_cast<double>(d));
  for (bool weights : {true, false}) {
    ex::PlotSpec spec;
    spec.title = weights ? "Mean attention weight by relative distance" : "Mean attention score by relative distance";
    spec.xlabel = "|i - j|";
    spec.ylabel = weights ? "mean softmax weight" : "mean q.k / sqrt(d_head)";
    for (int s = 0; s < 3; ++s)
      spec.series.push_back({labels[s], dist, weights ? schemes[s]->weight_profile : schemes[s]->score_profile, {}, {},
                             false, s + 1});
    run.line_plot(weights ? "positions_profile" : "positions_score_profile", spec);
  }
}

// --- kvcache -----------------------------------------------------------------------------------------

void run_kvcache(const Flags& f, Run& run) {
  if (f.kv_seq_len < 1) throw UsageError("--seq-len: must be at least 1, got " + std::to_string(f.kv_seq_len));
  if (f.kv_bytes < 1) throw UsageError("--dtype-bytes: must be at least 1, got " + std::to_string(f.kv_bytes));
  dm::CacheCheckConfig cc = f.kv_check;
  cc.seed = run.seed;
  cc.validate();
  std::ostringstream csv;
  csv << "section,scheme,kv_heads,q_per_group,elements_per_token,bytes_per_token,bytes,mib,percent_of_mha\n";
  json j = run.base("kvcache");
  int section = 7;
  for (const dm::CacheTableConfig& c : {dm::seed_section7(f.kv_seq_len, f.kv_bytes), dm::seed_section9(f.kv_seq_len, f.kv_bytes)}) {
    auto rows = dm::cache_table(c);
    std::cout << "=== KV cache per layer, " << c.title << " ===\n"
              << "sequence length " << c.seq_len << ", " << c.bytes_per_element << " bytes per element"
              << (c.bytes_per_element == 2 ? " (bf16)" : "") << "\n\n";
    std::printf("%-8s %8s %12s %12s %14s %9s\n", "scheme", "KV heads", "Q per group", "bytes/token", "KV cache",
                "vs MHA");
    std::printf("%s\n", std::string(68, '-').c_str());
    json jrows = json::array();
    ex::BarChart bars;
    bars.title = "KV cache per layer, " + c.title + ", " + std::to_string(c.seq_len) + " tokens";
    bars.ylabel = "MiB";
    bars.series = {"KV cache (MiB)"};
    for (const auto& r : rows) {
      std::printf("%-8s %8s %12s %12lld %10.1f MiB %8.1f%%\n", r.name.c_str(),
                  r.n_kv_heads ? std::to_string(r.n_kv_heads).c_str() : "-",
                  r.q_per_group ? std::to_string(r.q_per_group).c_str() : "-", static_cast<long long>(r.bytes_per_token),
                  r.mib, r.percent_of_first);
      csv << section << "," << r.name << "," << r.n_kv_heads << "," << r.q_per_group << "," << r.elements_per_token
          << "," << r.bytes_per_token << "," << r.bytes << "," << fmt("%.6g", r.mib) << ","
          << fmt("%.6g", r.percent_of_first) << "\n";
      jrows.push_back({{"scheme", r.name}, {"kv_heads", r.n_kv_heads}, {"q_per_group", r.q_per_group},
                       {"elements_per_token", r.elements_per_token}, {"bytes_per_token", r.bytes_per_token},
                       {"bytes", r.bytes}, {"mib", r.mib}, {"percent_of_mha", r.percent_of_first}});
      bars.categories.push_back(r.name);
      bars.values.push_back({r.mib});
    }
    std::printf("\n");
    for (std::size_t i = 1; i < rows.size(); ++i)
      std::printf("  MHA -> %-6s saves %.1f%%\n", rows[i].name.c_str(), 100.0 - rows[i].percent_of_first);
    if (section == 9)
      std::printf("  GQA-4 -> MLA  saves %.1f%%\n",
                  100.0 * (1.0 - static_cast<double>(rows[3].bytes) / static_cast<double>(rows[1].bytes)));
    std::printf("\n");
    j["section" + std::to_string(section)] = {{"title", c.title}, {"q_heads", c.n_heads}, {"head_dim", c.head_dim},
                                              {"seq_len", c.seq_len}, {"bytes_per_element", c.bytes_per_element},
                                              {"rows", jrows}};
    std::string why;
    bool ok = ex::plot_bars(run.out, "kvcache_sec" + std::to_string(section), bars, &why);
    run.plotted("kvcache_sec" + std::to_string(section), ok, why);
    section = 9;
  }
  auto checks = dm::check_caches(cc);
  const int64_t tokens = cc.prefill + cc.decode;
  std::cout << "=== Cross-check: floats in xgrad's KVCache after a real cached decode ===\n"
            << "float32, d_model " << cc.d_model << ", " << cc.n_heads << " query heads x " << cc.d_model / cc.n_heads
            << ", MLA latent " << cc.latent_dim << ", batch " << cc.batch << ", " << cc.prefill << " prompt tokens + "
            << cc.decode << " decoded one by one\n\n";
  std::printf("%-13s %16s %14s %12s %22s  %s\n", "scheme", "formula floats", "cached floats", "cache length",
              "module bytes/token", "");
  std::ostringstream ccsv;
  ccsv << "scheme,expected_floats,cached_floats,cache_length,module_bytes_per_token\n";
  json jc = json::array();
  bool all_match = true;
  for (const auto& k : checks) {
    const bool match = k.expected_floats == k.cached_floats && k.cache_length == tokens &&
                       k.module_bytes_per_token * cc.batch * tokens == 4 * k.cached_floats;
    all_match = all_match && match;
    std::printf("%-13s %16lld %14lld %12lld %22lld  %s\n", k.name.c_str(), static_cast<long long>(k.expected_floats),
                static_cast<long long>(k.cached_floats), static_cast<long long>(k.cache_length),
                static_cast<long long>(k.module_bytes_per_token), match ? "ok" : "MISMATCH");
    ccsv << k.name << "," << k.expected_floats << "," << k.cached_floats << "," << k.cache_length << ","
         << k.module_bytes_per_token << "\n";
    jc.push_back({{"scheme", k.name}, {"expected_floats", k.expected_floats}, {"cached_floats", k.cached_floats},
                  {"cache_length", k.cache_length}, {"module_bytes_per_token", k.module_bytes_per_token},
                  {"match", match}});
  }
  std::printf("\n");
  j["check"] = {{"d_model", cc.d_model}, {"heads", cc.n_heads}, {"latent_dim", cc.latent_dim},
                {"rope_dim", cc.rope_dim}, {"batch", cc.batch},     {"prefill", cc.prefill},
                {"decode", cc.decode},     {"rows", jc},            {"all_match", all_match}};
  cli::write_text(run.out + "/kvcache.csv", csv.str());
  cli::write_text(run.out + "/kvcache_check.csv", ccsv.str());
  cli::write_text(run.out + "/kvcache.json", j.dump(2) + "\n");
  run.wrote("kvcache.csv, kvcache_check.csv and kvcache.json");
  if (!all_match) throw std::runtime_error("kvcache: the cached floats differ from the formula (see the table)");
}

// --- qknorm ------------------------------------------------------------------------------------------

void run_qknorm(const Flags& f, Run& run) {
  dm::QKNormConfig c = f.qk;
  c.seed = run.seed;
  if (!f.qk_scales.empty()) c.scales = parse_doubles("scales", f.qk_scales, true);
  if (run.quick && c.trials == 32) c.trials = 8;
  dm::QKNormResult r = dm::run_qknorm(c);
  std::cout << "=== QK-Norm: attention logit degeneration ===\n"
            << "d_head " << c.head_dim << ", " << c.seq_len << " keys; Q ~ N(0, 1), K ~ N(0, 1) * " << c.k_scale
            << " (keys grown large late in training); xgrad generator seed " << c.seed << "\n\n";
  auto show = [&](const char* title, const dm::QKExample& e, const char* note) {
    std::printf("%s:\n", title);
    std::printf("  Q norm range: %.2f ~ %.2f\n", e.q_norm_min, e.q_norm_max);
    std::printf("  K norm range: %.2f ~ %.2f\n", e.k_norm_min, e.k_norm_max);
    std::printf("  Attention score: %s\n", list(e.scores, "%.4f").c_str());
    std::printf("  Attention weights: %s\n", list(e.weights, "%.3f").c_str());
    std::printf("  -> %s\n\n", note);
  };
  show("Without QK-Norm", r.plain, "softmax degenerates: the mass sits on few positions");
  show("With QK-Norm (the attention's q_norm / k_norm RMSNorm)", r.qknorm,
       "the weights spread over several positions again");
  std::printf("Sweep: keys scaled by s, %lld draws x %lld queries per point (uniform entropy log %lld = %.4f)\n",
              static_cast<long long>(c.trials), static_cast<long long>(c.seq_len), static_cast<long long>(c.seq_len),
              r.max_entropy);
  std::printf("%9s  %12s %12s %12s  %12s %12s %12s\n", "scale", "entropy", "max prob", "max |logit|", "QK entropy",
              "QK max prob", "QK |logit|");
  std::ostringstream csv;
  csv << "scale,entropy_plain,max_prob_plain,max_logit_plain,entropy_qknorm,max_prob_qknorm,max_logit_qknorm\n";
  json pts = json::array();
  ex::PlotSpec ent, mp;
  ent.title = "Attention entropy as the keys grow (d_head " + std::to_string(c.head_dim) + ", " +
              std::to_string(c.seq_len) + " keys)";
  ent.xlabel = "key scale s";
  ent.ylabel = "mean entropy of the weights (nats)";
  ent.logx = true;
  mp = ent;
  mp.title = "Largest attention weight as the keys grow";
  mp.ylabel = "mean max weight";
  ex::Series e_plain{"without QK-Norm", {}, {}, {}, {}, false, 1}, e_qk{"with QK-Norm", {}, {}, {}, {}, false, 2};
  ex::Series m_plain = e_plain, m_qk = e_qk;
  for (const auto& p : r.sweep) {
    std::printf("%9.3f  %12.4f %12.4f %12.2f  %12.4f %12.4f %12.2f\n", p.scale, p.entropy_plain, p.max_prob_plain,
                p.max_logit_plain, p.entropy_qknorm, p.max_prob_qknorm, p.max_logit_qknorm);
    csv << fmt("%.9g", p.scale) << "," << fmt("%.9g", p.entropy_plain) << "," << fmt("%.9g", p.max_prob_plain) << ","
        << fmt("%.9g", p.max_logit_plain) << "," << fmt("%.9g", p.entropy_qknorm) << ","
        << fmt("%.9g", p.max_prob_qknorm) << "," << fmt("%.9g", p.max_logit_qknorm) << "\n";
    pts.push_back({{"scale", p.scale}, {"entropy_plain", p.entropy_plain}, {"max_prob_plain", p.max_prob_plain},
                   {"max_logit_plain", p.max_logit_plain}, {"entropy_qknorm", p.entropy_qknorm},
                   {"max_prob_qknorm", p.max_prob_qknorm}, {"max_logit_qknorm", p.max_logit_qknorm}});
    for (auto* s : {&e_plain, &e_qk, &m_plain, &m_qk}) s->x.push_back(p.scale);
    e_plain.y.push_back(p.entropy_plain);
    e_qk.y.push_back(p.entropy_qknorm);
    m_plain.y.push_back(p.max_prob_plain);
    m_qk.y.push_back(p.max_prob_qknorm);
  }
  std::printf("\nWith QK-Norm every logit is within +-sqrt(d_head) = %.3f, so no weight can exceed %.4f;\n"
              "without it the logits grow with the scale and the weights collapse to one-hot.\n\n",
              r.logit_bound, r.max_prob_bound);
  ent.series = {e_plain, e_qk};
  mp.series = {m_plain, m_qk};
  cli::write_text(run.out + "/qknorm.csv", csv.str());
  json j = run.base("qknorm");
  auto ex_json = [](const dm::QKExample& e) {
    return json{{"q_norm_range", {e.q_norm_min, e.q_norm_max}}, {"k_norm_range", {e.k_norm_min, e.k_norm_max}},
                {"scores", e.scores}, {"weights", e.weights}};
  };
  j["example"] = {{"without_qk_norm", ex_json(r.plain)}, {"with_qk_norm", ex_json(r.qknorm)}};
  j["sweep"] = pts;
  j["trials"] = c.trials;
  j["max_entropy"] = r.max_entropy;
  j["logit_bound"] = r.logit_bound;
  j["max_prob_bound"] = r.max_prob_bound;
  cli::write_text(run.out + "/qknorm.json", j.dump(2) + "\n");
  run.wrote("qknorm.csv and qknorm.json");
  run.line_plot("qknorm_entropy", ent);
  run.line_plot("qknorm_max_prob", mp);
}

// --- norms -------------------------------------------------------------------------------------------

void run_norms(const Flags& f, Run& run) {
  dm::NormsConfig c;
  c.x = parse_doubles("x", f.norms_x, false);
  c.homework = parse_doubles("homework", f.norms_homework, false);
  c.param_dim = f.norms_param_dim;
  c.validate();
  dm::NormsResult r = dm::run_norms(c);
  const auto& l = r.layer;
  const std::string xs = list(c.x, "%g");
  std::cout << "=== LayerNorm by hand: x = " << xs << " ===\n\n";
  std::printf("Step 1 - mean mu = %.1f\n", l.mean);
  std::printf("Step 2 - variance sigma^2 = mean((x - mu)^2) = %.1f   (divides by N, not N-1)\n", l.var);
  std::printf("Step 3 - standard deviation sigma = sqrt(%.1f) = %.4f\n", l.var, l.sigma);
  std::printf("Step 4 - normalise: (x - %g) / %.4f\n", l.mean, l.sigma);
  for (std::size_t i = 0; i < c.x.size(); ++i)
    std::printf("         x[%zu] = (%.1f - %g) / %.4f = % .4f\n", i, c.x[i], l.mean, l.sigma, l.formula[i]);
  std::printf("         normalised: %s\n", list(l.formula, "%.4f").c_str());
  std::printf("         mean: %.4f (=0), std: %.4f (=1)\n", l.out_mean, l.out_std);
  std::printf("Step 5 - scale: gamma = 1, beta = 0 at init, so the output is the normalised vector\n");
  std::printf("xgrad nn::LayerNorm(%zu, eps 1e-5, no affine): %s\n\n", c.x.size(), list(l.module, "%.4f").c_str());

  const auto& m = r.rms;
  std::cout << "=== RMSNorm by hand: x = " << xs << " ===\n\n";
  std::printf("Step 1 - mean of squares = %.1f\n", m.mean_sq);
  std::printf("    RMS = sqrt(%.1f) = %.4f\n", m.mean_sq, m.rms);
  std::printf("Step 2 - RMSNorm = x / %.4f\n", m.rms);
  for (std::size_t i = 0; i < c.x.size(); ++i)
    std::printf("         x[%zu] = %.1f / %.4f = %.4f\n", i, c.x[i], m.rms, m.formula[i]);
  std::printf("\nRMSNorm result: %s\n", list(m.formula, "%.4f").c_str());
  std::printf("Check - RMS after RMSNorm = %.4f (should be 1); its mean is %.4f, not 0: no centring\n\n", m.out_rms,
              m.out_mean);
  std::printf("LayerNorm result: %s   mean=%.4f, std=%.4f\n", list(l.module, "%.4f").c_str(), l.out_mean, l.out_std);
  std::printf("RMSNorm   result: %s   mean=%.4f, RMS=%.4f\n", list(m.module, "%.4f").c_str(), m.out_mean, m.out_rms);
  std::printf("(xgrad nn::RMSNorm(%zu, eps 1e-6) above; the hand formula without eps differs by at most %.1e)\n\n",
              c.x.size(), [&] {
                double d = 0;
                for (std::size_t i = 0; i < m.module.size(); ++i) d = std::max(d, std::fabs(m.module[i] - m.formula[i]));
                return d;
              }());
  const auto& h = r.homework;
  std::printf("Second example: x = %s, gamma = 1: RMS = %.4f, output = %s (nn::RMSNorm: %s)\n\n",
              list(c.homework, "%g").c_str(), h.rms, list(h.formula, "%.4f").c_str(), list(h.module, "%.4f").c_str());
  std::printf("Parameters (num_parameters()): LayerNorm(%lld) = %lld (gamma + beta), RMSNorm(%lld) = %lld (gamma)\n\n",
              static_cast<long long>(c.param_dim), static_cast<long long>(r.layernorm_params),
              static_cast<long long>(c.param_dim), static_cast<long long>(r.rmsnorm_params));
  json j = run.base("norms");
  j["x"] = c.x;
  j["layernorm"] = {{"mean", l.mean}, {"var", l.var}, {"sigma", l.sigma}, {"formula", l.formula},
                    {"formula_eps", l.formula_eps}, {"module", l.module}, {"out_mean", l.out_mean},
                    {"out_std", l.out_std}};
  auto rj = [](const dm::RMSNormSteps& s) {
    return json{{"mean_sq", s.mean_sq}, {"rms", s.rms}, {"formula", s.formula}, {"formula_eps", s.formula_eps},
                {"module", s.module}, {"out_mean", s.out_mean}, {"out_rms", s.out_rms}};
  };
  j["rmsnorm"] = rj(m);
  j["homework"] = rj(h);
  j["homework"]["x"] = c.homework;
  j["params"] = {{"dim", c.param_dim}, {"layernorm", r.layernorm_params}, {"rmsnorm", r.rmsnorm_params}};
  cli::write_text(run.out + "/norms.json", j.dump(2) + "\n");
  run.wrote("norms.json");
}

// --- swiglu ------------------------------------------------------------------------------------------

void run_swiglu(const Flags& f, Run& run) {
  dm::SwiGLUConfig c;
  c.d_models = cli::parse_ints("d-models", f.swiglu_d_models, 1);
  c.multiple_of = f.swiglu_multiple_of;
  auto rows = dm::run_swiglu(c);
  std::cout << "=== SwiGLU vs ReLU FFN parameter counts ===\n"
            << "ReLU FFN: fc1 (d -> 4d) + fc2 (4d -> d) with biases (the original Transformer's FFN);\n"
            << "SwiGLU: W_gate, W_up (d -> d_ff) + W_down (d_ff -> d), no biases, d_ff = int(8/3 d) rounded up to "
            << c.multiple_of << "\n\n";
  for (const auto& r : rows) {
    const long long d = r.d_model, f4 = r.relu_d_ff, s = r.swiglu_d_ff;
    std::printf("d_model = %lld\n", d);
    std::printf("ReLU FFN:  W1(%lldx%lld) + W2(%lldx%lld) = %lld weights, + %lld biases = %lld parameters\n", d, f4, f4, d,
                static_cast<long long>(r.relu_weights), static_cast<long long>(r.relu_params - r.relu_weights),
                static_cast<long long>(r.relu_params));
    std::printf("SwiGLU:    W_gate(%lldx%lld) + W_up(%lldx%lld) + W_down(%lldx%lld) = %lld parameters\n", d, s, d, s, s, d,
                static_cast<long long>(r.swiglu_params));
    std::printf("ratio SwiGLU / ReLU: %.2fx (%.4f; %.4f against the ReLU weights alone)\n\n", r.ratio, r.ratio,
                r.ratio_weights);
  }
  std::printf("%8s %10s %14s %12s %14s %8s %10s\n", "d_model", "ReLU d_ff", "ReLU params", "SwiGLU d_ff",
              "SwiGLU params", "ratio", "ratio (W)");
  std::ostringstream csv;
  csv << "d_model,relu_d_ff,relu_params,relu_weights,swiglu_d_ff,swiglu_params,ratio,ratio_weights\n";
  json jr = json::array();
  ex::BarChart bars;
  bars.title = "FFN parameters: ReLU (d -> 4d -> d, biases) vs SwiGLU (d_ff = 8/3 d rounded up)";
  bars.ylabel = "parameters (millions)";
  bars.series = {"ReLU FFN", "SwiGLU"};
  for (const auto& r : rows) {
    std::printf("%8lld %10lld %14lld %12lld %14lld %8.4f %10.4f\n", static_cast<long long>(r.d_model),
                static_cast<long long>(r.relu_d_ff), static_cast<long long>(r.relu_params),
                static_cast<long long>(r.swiglu_d_ff), static_cast<long long>(r.swiglu_params), r.ratio, r.ratio_weights);
    csv << r.d_model << "," << r.relu_d_ff << "," << r.relu_params << "," << r.relu_weights << "," << r.swiglu_d_ff << ","
        << r.swiglu_params << "," << fmt("%.9g", r.ratio) << "," << fmt("%.9g", r.ratio_weights) << "\n";
    jr.push_back({{"d_model", r.d_model}, {"relu_d_ff", r.relu_d_ff}, {"relu_params", r.relu_params},
                  {"relu_weights", r.relu_weights}, {"swiglu_d_ff", r.swiglu_d_ff}, {"swiglu_params", r.swiglu_params},
                  {"ratio", r.ratio}, {"ratio_weights", r.ratio_weights}});
    bars.categories.push_back("d_model " + std::to_string(r.d_model));
    bars.values.push_back({r.relu_params / 1e6, r.swiglu_params / 1e6});
  }
  std::printf("\n");
  cli::write_text(run.out + "/swiglu.csv", csv.str());
  json j = run.base("swiglu");
  j["multiple_of"] = c.multiple_of;
  j["rows"] = jr;
  cli::write_text(run.out + "/swiglu.json", j.dump(2) + "\n");
  run.wrote("swiglu.csv and swiglu.json");
  std::string why;
  bool ok = ex::plot_bars(run.out, "swiglu", bars, &why);
  run.plotted("swiglu", ok, why);
}

// --- softmax -----------------------------------------------------------------------------------------

void run_softmax(const Flags& f, Run& run) {
  dm::SoftmaxConfig c;
  c.logits.clear();
  std::stringstream ss(f.softmax_logits);
  std::string row;
  while (std::getline(ss, row, ';')) c.logits.push_back(parse_doubles("logits", row, false));
  c.targets = cli::parse_ints("targets", f.softmax_targets, 0);
  try {
    c.validate();
  } catch (const xg::Error& e) {
    throw UsageError(e.what());
  }
  dm::SoftmaxResult r = dm::run_softmax(c);
  std::cout << "=== Softmax overflow and the max-subtracted form, float32 ===\n"
            << "exp(x) overflows float32 for x > log(FLT_MAX) = " << fmt("%.4f", r.overflow_at) << "\n\n";
  json jrows = json::array();
  for (const auto& w : r.rows) {
    std::printf("logits %s, target %lld\n", list(w.logits, "%g").c_str(), static_cast<long long>(w.target));
    std::printf("  naive exp(x)/sum exp(x):        %s%s\n", list(w.naive, "%.4e").c_str(),
                w.naive_finite ? "" : "   <- overflow");
    std::printf("  stable exp(x-M)/sum exp(x-M):   %s\n", list(w.stable_formula, "%.4e").c_str());
    std::printf("  xgrad softmax:                  %s\n", list(w.softmax, "%.4e").c_str());
    std::printf("  naive log(softmax):             %s\n", list(w.naive_log, "%.4f").c_str());
    std::printf("  x - M - log sum exp(x-M):       %s\n", list(w.log_formula, "%.4f").c_str());
    std::printf("  xgrad log_softmax:              %s\n", list(w.log_softmax, "%.4f").c_str());
    std::printf("  cross-entropy: naive %s, formula %.4f, xgrad cross_entropy %.4f\n\n",
                fmt("%.4f", w.ce_naive).c_str(), w.ce_formula, w.ce);
    jrows.push_back({{"logits", w.logits}, {"target", w.target}, {"naive", nums(w.naive)},
                     {"naive_log", nums(w.naive_log)}, {"stable_formula", nums(w.stable_formula)},
                     {"log_formula", nums(w.log_formula)}, {"softmax", nums(w.softmax)},
                     {"log_softmax", nums(w.log_softmax)}, {"ce_naive", num(w.ce_naive)},
                     {"ce_formula", num(w.ce_formula)}, {"ce", num(w.ce)}, {"naive_finite", w.naive_finite}});
  }
  std::printf("mean cross-entropy: xgrad %.4f, formula %.4f\n\n", r.ce_mean, r.ce_mean_formula);
  json j = run.base("softmax");
  j["rows"] = jrows;
  j["ce_mean"] = num(r.ce_mean);
  j["ce_mean_formula"] = num(r.ce_mean_formula);
  j["overflow_at"] = r.overflow_at;
  cli::write_text(run.out + "/softmax.json", j.dump(2) + "\n");
  run.wrote("softmax.json");
}

// --- the subcommands ---------------------------------------------------------------------------------

struct Subcommand {
  const char* name;
  const char* what;
  std::function<void(po::options_description&, Flags&)> add;
  std::function<void(const Flags&, Run&)> run;
};

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> all = {
      {"positions", "attention maps and distance profile with no PE / sinusoidal / RoPE", add_positions,
       run_positions},
      {"kvcache", "KV-cache tables for MHA / GQA / MQA / MLA, checked against xgrad's KVCache", add_kvcache,
       run_kvcache},
      {"qknorm", "softmax degeneration without QK-Norm, bounded with it (scale sweep)", add_qknorm, run_qknorm},
      {"norms", "LayerNorm / RMSNorm hand calculations against the modules", add_norms, run_norms},
      {"swiglu", "SwiGLU vs ReLU FFN parameter counts", add_swiglu, run_swiglu},
      {"softmax", "naive softmax overflow vs the stable form", add_softmax, run_softmax},
  };
  return all;
}

po::options_description common_options(std::string& out, uint64_t& seed) {
  po::options_description o = cli::flag_group("Common options");
  // clang-format off
  o.add_options()
    ("help,h", "show this help")
    ("out", po::value<std::string>(&out)->default_value("seed_demos_out"), "folder for CSV, JSON and plots")
    ("seed", po::value<uint64_t>(&seed)->default_value(42), "seed of xgrad's generator")
    ("quick", po::bool_switch(), "smaller sweeps (CI)");
  // clang-format on
  return o;
}

void print_help(std::ostream& os) {
  std::string out;
  uint64_t seed = 0;
  Flags f;
  os << "Usage: " << kProg << " <subcommand> [flags] --out DIR\n"
     << "Small demonstrations of LLM components with xgrad's modules: each prints its table and\n"
     << "writes CSV/JSON (flags, seed, git revision) and gnuplot PNG/SVG plots into --out.\n\nSubcommands:\n";
  for (const auto& s : subcommands()) os << "  " << s.name << std::string(11 - std::string(s.name).size(), ' ') << s.what << "\n";
  os << "  all        every subcommand, each into its own subfolder of --out\n\n" << cli::help_text(common_options(out, seed)) << "\n";
  for (const auto& s : subcommands()) {
    po::options_description o = cli::flag_group(std::string(s.name) + " options");
    s.add(o, f);
    os << cli::help_text(o) << "\n";
  }
  os << "Example: " << kProg << " all --out demos\n";
}

// "seed_demos: positions: ..." (the library's messages already start with the subcommand).
std::string error_line(const std::string& sub, const std::string& what) {
  const bool named = what.rfind(sub + ": ", 0) == 0;
  return std::string(kProg) + ": " + (named ? "" : sub + ": ") + what;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kProg << ": expected a subcommand (positions, kvcache, qknorm, norms, swiglu, softmax, all) (see --help)\n";
    return 2;
  }
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    print_help(std::cout);
    return 0;
  }
  const Subcommand* chosen = nullptr;
  for (const auto& s : subcommands())
    if (sub == s.name) chosen = &s;
  if (!chosen && sub != "all" && !sub.empty() && sub[0] == '-') {
    std::cerr << kProg << ": expected a subcommand before the flags, got '" << sub << "' (see --help)\n";
    return 2;
  }
  if (!chosen && sub != "all") {
    std::cerr << kProg << ": unknown subcommand '" << sub
              << "' (expected positions, kvcache, qknorm, norms, swiglu, softmax or all; see --help)\n";
    return 2;
  }
  std::string out;
  uint64_t seed = 42;
  Flags flags;
  po::options_description opts = common_options(out, seed);
  if (chosen) {
    po::options_description own = cli::flag_group(sub + " options");
    chosen->add(own, flags);
    opts.add(own);
  }
  int threads = 0;
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  try {
    std::vector<std::string> args(argv + 2, argv + argc);
    po::positional_options_description no_positionals;  // "seed_demos all extra" is an error
    cli::store_checked(po::command_line_parser(args).options(opts).positional(no_positionals).run(), vm);
    po::notify(vm);
    cli::apply_threads(threads);
  } catch (const std::exception& e) {
    std::cerr << error_line(sub, e.what()) << " (see " << kProg << " --help)\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << "Usage: " << kProg << " " << sub << " [flags] --out DIR\n\n" << cli::help_text(opts) << "\n";
    return 0;
  }
  const bool quick = vm["quick"].as<bool>();
  if (quick && vm.count("d-models") && vm["d-models"].defaulted()) flags.swiglu_d_models = "64,512";
  json fj = cli::flags_json(vm);
  fj["subcommand"] = sub;
  try {
    if (chosen) {
      cli::make_dir(out);
      Run run{out, fj, seed, quick};
      chosen->run(flags, run);
    } else {
      for (const auto& s : subcommands()) {
        Flags defaults;
        po::options_description own = cli::flag_group();
        s.add(own, defaults);
        po::variables_map dvm;  // the subcommand's defaults, recorded in its JSON
        po::store(po::command_line_parser(std::vector<std::string>{}).options(own).run(), dvm);
        po::notify(dvm);
        if (quick && std::string(s.name) == "swiglu") defaults.swiglu_d_models = "64,512";
        json sj = fj;
        sj["subcommand"] = std::string("all: ") + s.name;
        sj[s.name] = cli::flags_json(dvm);
        Run run{out + "/" + s.name, sj, seed, quick};
        cli::make_dir(run.out);
        s.run(defaults, run);
        std::cout << "\n";
      }
    }
  } catch (const UsageError& e) {
    std::cerr << error_line(sub, e.what()) << " (see " << kProg << " --help)\n";
    return 2;
  } catch (const xg::Error& e) {  // a bad configuration the library rejected: still the user's input
    std::cerr << error_line(sub, e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << error_line(sub, e.what()) << "\n";
    return 1;
  }
  return 0;
}

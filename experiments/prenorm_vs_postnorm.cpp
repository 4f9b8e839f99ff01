// prenorm_vs_postnorm: Post-Norm vs Pre-Norm gradient flow in two deep residual nets from the
// same initial tensors (by default 8 layers of relu(Linear(4, 4)), a LayerNorm each, MSE loss),
// then, on request, a depth sweep (--sweep), real Transformer blocks at init (--xiong) and
// training runs (--train).
// Prints the tables; writes CSV, JSON (flags, seed, git revision) and gnuplot plots to --out.
// The measurements live in experiments/study.cpp; this file parses flags and writes files.
#include <algorithm>
#include <array>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/bootstrap.hpp"
#include "experiments/encdec.hpp"
#include "experiments/plot.hpp"
#include "experiments/study.hpp"
#include "experiments/training.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/output.hpp"
#include "tools/cli/threads.hpp"

namespace po = boost::program_options;
namespace ex = xg::experiments;
namespace cli = xg::cli;
using nlohmann::json;

namespace {

constexpr const char* kProg = "prenorm_vs_postnorm";
constexpr std::size_t kLossWindow = 10;  // steps averaged in the training-loss plots

std::vector<int64_t> parse_positive_ints(const std::string& flag, const std::string& text) {
  return cli::parse_ints(flag, text, 1, "positive integers");
}

std::vector<double> iota_1(std::size_t n) {
  std::vector<double> v;
  for (std::size_t i = 1; i <= n; ++i) v.push_back(static_cast<double>(i));
  return v;
}

void report_plot(const std::string& dir, const std::string& stem, const ex::PlotSpec& spec, bool& warned) {
  std::string why;
  const bool ok = ex::plot(dir, stem, spec, &why);
  cli::report_plot(dir, stem, ok, why, warned);
}

json base_json(const std::string& part, const json& flags, uint64_t seed) {
  return cli::experiment_json(kProg, part, seed, flags);
}

// "0.949 [0.902, 1.02]": a median over seeds and its 95% bootstrap interval.
std::string ci_str(const ex::Interval& i, const char* f = "%.3g") {
  return cli::fmt(f, i.estimate) + " [" + cli::fmt(f, i.lo) + ", " + cli::fmt(f, i.hi) + "]";
}
std::string ci_csv(const ex::Interval& i) {
  return cli::fmt("%.9g", i.estimate) + "," + cli::fmt("%.9g", i.lo) + "," + cli::fmt("%.9g", i.hi);
}
json ci_json(const ex::Interval& i) { return {{"median", i.estimate}, {"lo", i.lo}, {"hi", i.hi}, {"seeds", i.n}}; }
json profile_json(const std::vector<ex::Interval>& v) {
  json a = json::array();
  for (const auto& i : v) a.push_back(ci_json(i));
  return a;
}
json interval_note() {
  const ex::BootstrapOptions o;
  return {{"method", "percentile bootstrap over seeds (experiments/bootstrap.hpp)"},
          {"level", o.level},
          {"resamples", o.resamples},
          {"resampling_seed", o.seed}};
}

// --- part 1 -------------------------------------------------------------------------------------
void part1(const ex::StudyConfig& c, const std::string& init_file, bool xgrad_init, const std::string& save_init,
           const std::string& out, const json& flags, bool& warned) {
  // The default net with no --init starts from PyTorch's own seed-42 tensors (compiled in), so
  // the table is the one the same experiment prints in PyTorch (tests/fixtures/gen_prenorm.py);
  // --xgrad-init draws from xgrad's generator.
  const bool torch_init = init_file.empty() && !xgrad_init && ex::uses_torch_seed42_init(c);
  ex::Init init = !init_file.empty() ? ex::load_init(init_file, c) : torch_init ? ex::torch_seed42_init(c) : ex::make_init(c);
  const std::string init_desc = !init_file.empty() ? init_file
                                : torch_init       ? "PyTorch's torch.manual_seed(42) tensors"
                                                   : "xgrad generator, seed " + std::to_string(c.seed);
  if (!save_init.empty()) {
    ex::save_init(save_init, init);
    std::cout << "wrote the initial state to " << save_init << "\n";
  }
  ex::StudyResult r = ex::run_study(c, init);
  auto rel_post = r.rel_post(), rel_pre = r.rel_pre();
  // Beside the requested nets, the same experiment with a final norm on the Pre-Norm net (when
  // it has none): the original experiment's Pre-Norm output is not normalised, so its loss and every gradient
  // are on another scale than Post-Norm's, whose last layer ends in a norm.
  ex::StudyConfig cf = c;
  cf.final_norm = true;
  const bool side = !c.final_norm;
  ex::StudyResult rf = side ? ex::run_study(cf, ex::with_final_norm(cf, init)) : r;

  std::cout << "=== Post-Norm vs Pre-Norm: gradient flow ===\n\n";
  std::cout << "depth: " << c.layers << " layers (d_model " << c.d_model << ", sublayer "
            << ex::sublayer_name(c.sublayer) << ", " << xg::nn::norm_kind_name(c.norm)
            << (c.final_norm ? ", Pre-Norm with a final norm" : "") << ")\ninit: " << init_desc << "\n\n";
  if (side) {
    std::printf("%6s  %16s  %16s  %22s\n", "Layer", "Post-Norm grad", "Pre-Norm grad", "Pre-Norm + final norm");
    std::printf("%s\n", std::string(66, '-').c_str());
  } else {
    std::printf("%6s  %16s  %16s\n", "Layer", "Post-Norm grad", "Pre-Norm grad");
    std::printf("%s\n", std::string(42, '-').c_str());
  }
  for (int64_t i = 0; i < c.layers; ++i) {
    std::printf("Layer %lld:  %16.6f  %16.6f", static_cast<long long>(i + 1), r.grad_post[i], r.grad_pre[i]);
    if (side) std::printf("  %22.6f", rf.grad_pre[i]);
    std::printf("\n");
  }
  std::printf("\nRelative to the top layer (grad[i] / grad[%lld]):\n", static_cast<long long>(c.layers));
  std::printf("%6s  %16s  %16s%s\n", "Layer", "Post-Norm", "Pre-Norm", side ? "  Pre-Norm + final norm" : "");
  auto rel_pre_f = rf.rel_pre();
  for (int64_t i = 0; i < c.layers; ++i) {
    std::printf("Layer %lld:  %16.6f  %16.6f", static_cast<long long>(i + 1), rel_post[i], rel_pre[i]);
    if (side) std::printf("  %22.6f", rel_pre_f[i]);
    std::printf("\n");
  }
  std::printf("\nThe bottom layer (Layer 1):\n");
  std::printf("  Post-Norm Layer 1 grad: %.6f\n", r.grad_post[0]);
  std::printf("  Pre-Norm  Layer 1 grad: %.6f\n", r.grad_pre[0]);
  std::printf("  Pre-Norm / Post-Norm = %.2fx\n", r.ratio_layer1());
  std::printf("\nloss: Post-Norm %.6f, Pre-Norm %.6f\n", r.loss_post, r.loss_pre);
  if (side) {
    std::printf("\nWith a final norm on the Pre-Norm net (same initial tensors):\n");
    std::printf("  Pre-Norm + final norm Layer 1 grad: %.6f, loss %.6f\n", rf.grad_pre[0], rf.loss_pre);
    std::printf("  Pre-Norm + final norm / Post-Norm = %.2fx\n", rf.ratio_layer1());
    std::printf("  (without a final norm the Pre-Norm output is the un-normalised residual sum, so its MSE loss\n"
                "   and every gradient are on a larger scale; with one, both nets end in a norm and the loss\n"
                "   scales match)\n");
  }
  std::printf("\n");

  std::ostringstream csv;
  csv << "layer,post_grad,pre_grad,post_rel_top,pre_rel_top,pre_final_norm_grad\n";
  for (int64_t i = 0; i < c.layers; ++i)
    csv << i + 1 << "," << cli::fmt("%.9g", r.grad_post[i]) << "," << cli::fmt("%.9g", r.grad_pre[i]) << ","
        << cli::fmt("%.9g", rel_post[i]) << "," << cli::fmt("%.9g", rel_pre[i]) << ","
        << cli::fmt("%.9g", rf.grad_pre[i]) << "\n";
  cli::write_text(out + "/prenorm.csv", csv.str());
  json j = base_json("part 1", flags, c.seed);
  j["init"] = init_desc;
  j["loss_post"] = r.loss_post;
  j["loss_pre"] = r.loss_pre;
  j["ratio_layer1"] = r.ratio_layer1();
  j["grad_post"] = r.grad_post;
  j["grad_pre"] = r.grad_pre;
  j["rel_top_post"] = rel_post;
  j["rel_top_pre"] = rel_pre;
  if (side) {
    j["final_norm_variant"] = {{"loss_pre", rf.loss_pre}, {"grad_pre", rf.grad_pre}, {"rel_top_pre", rf.rel_pre()},
                               {"ratio_layer1", rf.ratio_layer1()}};
  }
  cli::write_text(out + "/prenorm.json", j.dump(2) + "\n");
  std::cout << "wrote " << out << "/prenorm.csv and prenorm.json\n";

  ex::PlotSpec spec;
  spec.title = "Weight-gradient norm per layer (" + std::to_string(c.layers) + " layers, d_model " +
               std::to_string(c.d_model) + ")";
  spec.xlabel = "layer";
  spec.ylabel = "||dL/dW||";
  spec.logy = true;
  spec.series.push_back({"Post-Norm", iota_1(c.layers), r.grad_post, {}, {}, false, 1});
  spec.series.push_back({side ? "Pre-Norm (no final norm)" : "Pre-Norm", iota_1(c.layers), r.grad_pre, {}, {}, false, 2});
  if (side) spec.series.push_back({"Pre-Norm + final norm", iota_1(c.layers), rf.grad_pre, {}, {}, false, 3});
  report_plot(out, "prenorm", spec, warned);
}

// --- part 2 -------------------------------------------------------------------------------------
void part2(const ex::StudyConfig& c, const std::vector<int64_t>& depths, const std::vector<int64_t>& dims,
           int64_t seeds, const std::string& init_dir, const std::string& save_dir, const std::string& out,
           const json& flags, bool& warned) {
  std::cout << "\n=== Depth sweep: " << seeds << " seeds per point, Pre-Norm "
            << (c.final_norm ? "with a final norm" : "without a final norm (the original experiment's variant)")
            << " ===\n(median over seeds [95% bootstrap interval of the median]; the ratio is the median of "
               "per-seed ratios)\n\n";
  ex::InitSource source = ex::make_init;
  if (!init_dir.empty())
    source = [&](const ex::StudyConfig& sc) { return ex::load_init(init_dir + "/" + ex::sweep_init_file(sc), sc); };
  std::function<void(const ex::StudyConfig&, const ex::Init&)> on_init;
  if (!save_dir.empty()) {
    cli::make_dir(save_dir);
    on_init = [&](const ex::StudyConfig& sc, const ex::Init& init) {
      ex::save_init(save_dir + "/" + ex::sweep_init_file(sc), init);
    };
  }
  auto points = ex::run_sweep(c, depths, dims, seeds, source, on_init);
  if (!save_dir.empty()) std::cout << "wrote every run's initial state to " << save_dir << "/sweep_d*_L*_seed*.safetensors\n\n";
  std::printf("%7s %5s  %-24s  %-24s  %-24s  %-24s  %-24s\n", "d_model", "depth", "Post L1 grad", "Pre L1 grad",
              "Pre/Post L1 ratio", "L1/top Post", "L1/top Pre");
  std::ostringstream csv, seeds_csv;
  csv << "d_model,depth,seeds,pre_final_norm";
  for (const char* q : {"post_l1", "pre_l1", "ratio", "post_l1_rel_top", "pre_l1_rel_top"})
    csv << "," << q << "_median," << q << "_lo," << q << "_hi";
  for (const char* q : {"post_l1", "pre_l1", "ratio"}) csv << "," << q << "_q1," << q << "_q3";
  csv << "\n";
  seeds_csv << "d_model,depth,seed,layer,post_grad,pre_grad\n";
  json rows = json::array();
  for (const auto& p : points) {
    std::printf("%7lld %5lld  %-24s  %-24s  %-24s  %-24s  %-24s\n", static_cast<long long>(p.d_model),
                static_cast<long long>(p.depth), ci_str(p.post_layer1_ci).c_str(), ci_str(p.pre_layer1_ci).c_str(),
                ci_str(p.ratio_ci).c_str(), ci_str(p.rel_post.front()).c_str(), ci_str(p.rel_pre.front()).c_str());
    csv << p.d_model << "," << p.depth << "," << seeds << "," << (c.final_norm ? 1 : 0);
    for (const ex::Interval* i : {&p.post_layer1_ci, &p.pre_layer1_ci, &p.ratio_ci, &p.rel_post.front(), &p.rel_pre.front()})
      csv << "," << ci_csv(*i);
    for (const auto* q : {&p.post_layer1, &p.pre_layer1, &p.ratio})
      csv << "," << cli::fmt("%.9g", q->q1) << "," << cli::fmt("%.9g", q->q3);
    csv << "\n";
    for (std::size_t s = 0; s < p.seeds.size(); ++s)
      for (int64_t i = 0; i < p.depth; ++i)
        seeds_csv << p.d_model << "," << p.depth << "," << p.seeds[s] << "," << i + 1 << ","
                  << cli::fmt("%.9g", p.post[s][i]) << "," << cli::fmt("%.9g", p.pre[s][i]) << "\n";
    auto qj = [](const ex::Quartiles& q) { return json{{"q1", q.q1}, {"median", q.median}, {"q3", q.q3}}; };
    rows.push_back({{"d_model", p.d_model},
                    {"depth", p.depth},
                    {"seeds", p.seeds.size()},
                    {"post_layer1", ci_json(p.post_layer1_ci)},
                    {"pre_layer1", ci_json(p.pre_layer1_ci)},
                    {"ratio", ci_json(p.ratio_ci)},
                    {"post_layer1_quartiles", qj(p.post_layer1)},
                    {"pre_layer1_quartiles", qj(p.pre_layer1)},
                    {"ratio_quartiles", qj(p.ratio)},
                    {"rel_top_post", profile_json(p.rel_post)},
                    {"rel_top_pre", profile_json(p.rel_pre)},
                    {"raw_post", profile_json(p.raw_post)},
                    {"raw_pre", profile_json(p.raw_pre)}});
  }
  // The layer-1 gradient against depth, y ~ c L^p: p from a log-log least-squares fit of the
  // medians over the depths, its interval from resampling each depth's seeds.
  json fits = json::array();
  if (depths.size() >= 2) {
    std::printf("\nLayer-1 gradient ~ depth^p (least squares on log median vs log depth; [95%% bootstrap interval]):\n");
    for (int64_t d : dims) {
      std::vector<double> x;
      std::vector<std::vector<double>> post, pre;
      for (const auto& p : points)
        if (p.d_model == d) {
          x.push_back(static_cast<double>(p.depth));
          post.emplace_back(), pre.emplace_back();
          for (std::size_t s = 0; s < p.seeds.size(); ++s) {
            post.back().push_back(p.post[s][0]);
            pre.back().push_back(p.pre[s][0]);
          }
        }
      const ex::Interval pp = ex::exponent_ci(x, post), pq = ex::exponent_ci(x, pre);
      std::printf("  d_model %lld: Post-Norm p = %s, Pre-Norm p = %s\n", static_cast<long long>(d),
                  ci_str(pp, "%.3f").c_str(), ci_str(pq, "%.3f").c_str());
      fits.push_back({{"d_model", d}, {"post_exponent", ci_json(pp)}, {"pre_exponent", ci_json(pq)}});
    }
  }
  cli::write_text(out + "/sweep.csv", csv.str());
  cli::write_text(out + "/sweep_seeds.csv", seeds_csv.str());
  json j = base_json("--sweep", flags, c.seed);
  j["seeds"] = seeds;
  j["interval"] = interval_note();
  j["pre_final_norm"] = c.final_norm;
  j["points"] = rows;
  j["layer1_exponent"] = fits;
  cli::write_text(out + "/sweep.json", j.dump(2) + "\n");
  std::cout << "\nwrote " << out << "/sweep.csv, sweep_seeds.csv (every seed's gradients) and sweep.json\n";

  ex::PlotSpec ratio;
  ratio.title = "Pre-Norm / Post-Norm layer-1 gradient, median of " + std::to_string(seeds) +
                " seeds\nbars: 95% bootstrap interval; widths nudged apart in depth";
  ratio.xlabel = "depth (layers)";
  ratio.ylabel = "ratio";
  ratio.logx = ratio.logy = true;
  for (std::size_t di = 0; di < dims.size(); ++di) {
    const int64_t d = dims[di];
    // Each width's points a few percent apart in depth, so that the bars do not overlap.
    const double nudge = std::pow(1.03, static_cast<double>(di) - (static_cast<double>(dims.size()) - 1) / 2);
    ex::Series s{"d_model " + std::to_string(d), {}, {}, {}, {}, false, 0};
    for (const auto& p : points)
      if (p.d_model == d) {
        s.x.push_back(static_cast<double>(p.depth) * nudge);
        s.y.push_back(p.ratio_ci.estimate);
        s.ylo.push_back(p.ratio_ci.lo);
        s.yhi.push_back(p.ratio_ci.hi);
      }
    ratio.series.push_back(s);
  }
  report_plot(out, "sweep_ratio", ratio, warned);
  // One plot per norm position and width, a colour per depth: twelve lines in one
  // plot, Pre and Post told apart only by dashes, were unreadable. Bands: the intervals.
  for (int64_t d : dims)
    for (bool post : {true, false}) {
      ex::PlotSpec prof;
      prof.title = std::string(post ? "Post-Norm" : (c.final_norm ? "Pre-Norm (final norm)" : "Pre-Norm (no final norm)")) +
                   ": gradient norm relative to the top layer, d_model " + std::to_string(d) + "\nmedian of " +
                   std::to_string(seeds) + " seeds, band: 95% bootstrap interval";
      prof.xlabel = "layer";
      prof.ylabel = "grad[i] / grad[top]";
      prof.logy = true;
      int color = 0;
      for (const auto& p : points)
        if (p.d_model == d) {
          ex::Series s{"depth " + std::to_string(p.depth), iota_1(p.depth), post ? p.rel_post_median : p.rel_pre_median,
                       {}, {}, false, ++color};
          for (const auto& i : post ? p.rel_post : p.rel_pre) s.ylo.push_back(i.lo), s.yhi.push_back(i.hi);
          s.band = true;
          prof.series.push_back(s);
        }
      report_plot(out, "sweep_profile_d" + std::to_string(d) + (post ? "_post" : "_pre"), prof, warned);
    }
}

// --- part 3 -------------------------------------------------------------------------------------
// Per-layer medians over seeds of one profile, with their intervals.
std::vector<ex::Interval> layer_cis(const std::vector<std::vector<double>>& per_seed) {
  std::vector<ex::Interval> q;
  for (std::size_t i = 0; i < per_seed.front().size(); ++i) {
    std::vector<double> v;
    for (const auto& s : per_seed) v.push_back(s[i]);
    q.push_back(ex::median_ci(v));
  }
  return q;
}

void part3(const ex::EncDecConfig& base, const std::vector<int64_t>& depths, const std::vector<double>& dropouts,
           int64_t seeds, const std::string& init_dir, const std::string& save_dir, const std::string& out,
           const json& flags, bool& warned) {
  std::cout << "\n=== Encoder-decoder at initialisation (Xiong et al. 2020, fig. 3): FFN W2 gradient norm per layer ===\n";
  std::cout << "d_model " << base.d_model << ", " << base.n_heads << " heads, batch " << base.batch << " x "
            << base.src_len << " source / " << base.tgt_len << " target tokens (random), vocabulary " << base.vocab
            << " (tied), label smoothing " << base.label_smoothing << ", fairseq init, " << seeds
            << " seeds; expected-loss gradient = mean over " << base.batches << " batches\n";
  std::cout << "initial states: "
            << (init_dir.empty() ? "drawn from xgrad's generator" : "read from " + init_dir + "/xiong_L*_seed*.safetensors")
            << "\n";
  if (!save_dir.empty()) cli::make_dir(save_dir);
  const char* stacks[] = {"encoder", "decoder"};
  const char* norms[] = {"Post-LN", "Pre-LN"};
  std::ostringstream csv, ratios_csv, seeds_csv;
  csv << "dropout,layers,stack,norm,layer,seeds,single_median,single_lo,single_hi,expected_median,expected_lo,"
         "expected_hi\n";
  ratios_csv << "dropout,layers,stack,norm,seeds,quantity,median,lo,hi\n";
  seeds_csv << "dropout,layers,seed,stack,norm,layer,single,expected\n";
  json results = json::array();
  // [dropout index][stack][norm] -> per depth: per seed, the top layer's expected-loss gradient
  using PerStackNorm = std::array<std::array<std::vector<std::vector<double>>, 2>, 2>;
  std::vector<PerStackNorm> top_per_seed(dropouts.size());
  // profiles for the plots (dropout off): [stack][norm][depth index] -> per-layer median (expected)
  std::vector<std::vector<ex::Interval>> plot_prof[2][2];
  // A run's state (its initial weights and token batches) does not depend on the dropout: drawn
  // (or read) again for each dropout rate rather than held, and saved once.
  auto state_of = [&](const ex::EncDecConfig& c, int64_t L, bool save) {
    ex::EncDecState s = init_dir.empty() ? ex::make_encdec_state(c, L, L)
                                         : ex::load_encdec_state(init_dir + "/" + ex::encdec_state_file(L, c.seed), c, L, L);
    if (save && !save_dir.empty()) ex::save_encdec_state(save_dir + "/" + ex::encdec_state_file(L, c.seed), s, c);
    return s;
  };
  for (std::size_t di = 0; di < dropouts.size(); ++di) {
    std::printf("\ndropout %g: top/bottom = W2 grad of the last layer / the first, median of per-seed ratios "
                "[95%% bootstrap interval]\n", dropouts[di]);
    std::printf("%6s %-8s %-8s  %-24s  %-24s  %-26s\n", "layers", "stack", "norm", "top/bottom expected",
                "top/bottom one batch", "top-layer grad, expected");
    for (std::size_t li = 0; li < depths.size(); ++li) {
      const int64_t L = depths[li];
      // [stack][norm] -> per seed profile, single and expected
      std::vector<std::vector<double>> single[2][2], expct[2][2];
      for (int64_t s = 0; s < seeds; ++s) {
        ex::EncDecConfig c = base;
        c.dropout = dropouts[di];
        c.seed = base.seed + static_cast<uint64_t>(s);
        ex::EncDecProfile p = ex::run_encdec(c, state_of(c, L, di == 0));
        single[0][0].push_back(p.enc_post), single[0][1].push_back(p.enc_pre);
        single[1][0].push_back(p.dec_post), single[1][1].push_back(p.dec_pre);
        expct[0][0].push_back(p.enc_post_exp), expct[0][1].push_back(p.enc_pre_exp);
        expct[1][0].push_back(p.dec_post_exp), expct[1][1].push_back(p.dec_pre_exp);
        for (int st = 0; st < 2; ++st)
          for (int nm = 0; nm < 2; ++nm)
            for (std::size_t i = 0; i < single[st][nm].back().size(); ++i)
              seeds_csv << dropouts[di] << "," << L << "," << c.seed << "," << stacks[st] << "," << norms[nm] << ","
                        << i + 1 << "," << cli::fmt("%.9g", single[st][nm].back()[i]) << ","
                        << cli::fmt("%.9g", expct[st][nm].back()[i]) << "\n";
      }
      for (int st = 0; st < 2; ++st)
        for (int nm = 0; nm < 2; ++nm) {
          auto qs = layer_cis(single[st][nm]), qe = layer_cis(expct[st][nm]);
          std::vector<double> tb_s, tb_e, top_e;
          for (int64_t s = 0; s < seeds; ++s) {
            tb_s.push_back(single[st][nm][s].back() / single[st][nm][s].front());
            tb_e.push_back(expct[st][nm][s].back() / expct[st][nm][s].front());
            top_e.push_back(expct[st][nm][s].back());
          }
          const ex::Interval ctb_s = ex::median_ci(tb_s), ctb_e = ex::median_ci(tb_e), ctop = ex::median_ci(top_e);
          top_per_seed[di][st][nm].push_back(top_e);
          std::printf("%6lld %-8s %-8s  %-24s  %-24s  %-26s\n", static_cast<long long>(L), stacks[st], norms[nm],
                      ci_str(ctb_e, "%.2f").c_str(), ci_str(ctb_s, "%.2f").c_str(), ci_str(ctop).c_str());
          for (std::size_t i = 0; i < qs.size(); ++i)
            csv << dropouts[di] << "," << L << "," << stacks[st] << "," << norms[nm] << "," << i + 1 << "," << seeds
                << "," << ci_csv(qs[i]) << "," << ci_csv(qe[i]) << "\n";
          const std::pair<const char*, const ex::Interval*> quantities[] = {
              {"top_over_bottom_expected", &ctb_e}, {"top_over_bottom_single", &ctb_s}, {"top_layer_expected", &ctop}};
          for (const auto& [name, ci] : quantities)
            ratios_csv << dropouts[di] << "," << L << "," << stacks[st] << "," << norms[nm] << "," << seeds << ","
                       << name << "," << ci_csv(*ci) << "\n";
          if (di == 0) plot_prof[st][nm].push_back(qe);
          json prof = json::array();
          for (std::size_t i = 0; i < qs.size(); ++i)
            prof.push_back({{"single", ci_json(qs[i])}, {"expected", ci_json(qe[i])}});
          results.push_back({{"dropout", dropouts[di]}, {"layers", L}, {"stack", stacks[st]}, {"norm", norms[nm]},
                             {"seeds", seeds}, {"top_over_bottom_expected", ci_json(ctb_e)},
                             {"top_over_bottom_single", ci_json(ctb_s)}, {"top_layer_expected", ci_json(ctop)},
                             {"profile", prof}});
        }
    }
  }
  // Theorem 1: the last layer's W2 gradient is O(d sqrt(ln d)) for Post-LN (constant in L) and
  // O(d sqrt(ln d / L)) for Pre-LN (exponent -1/2).
  json fits = json::array();
  if (depths.size() >= 2) {
    std::printf("\nTop-layer W2 gradient (expected loss, median over seeds) ~ L^p, least squares on log-log "
                "[95%% bootstrap interval]:\n");
    std::printf("%8s %-8s %-8s %-26s %10s\n", "dropout", "stack", "norm", "fitted p", "theorem p");
    std::vector<double> x(depths.begin(), depths.end());
    for (std::size_t di = 0; di < dropouts.size(); ++di)
      for (int st = 0; st < 2; ++st)
        for (int nm = 0; nm < 2; ++nm) {
          const ex::Interval p = ex::exponent_ci(x, top_per_seed[di][st][nm]);
          const double theorem = nm == 0 ? 0.0 : -0.5;
          std::printf("%8g %-8s %-8s %-26s %10.1f\n", dropouts[di], stacks[st], norms[nm], ci_str(p, "%.3f").c_str(),
                      theorem);
          fits.push_back({{"dropout", dropouts[di]}, {"stack", stacks[st]}, {"norm", norms[nm]}, {"fitted", ci_json(p)},
                          {"theorem", theorem}});
        }
  }
  cli::write_text(out + "/xiong.csv", csv.str());
  cli::write_text(out + "/xiong_ratios.csv", ratios_csv.str());
  cli::write_text(out + "/xiong_seeds.csv", seeds_csv.str());
  json j = base_json("--xiong", flags, base.seed);
  j["d_model"] = base.d_model;
  j["heads"] = base.n_heads;
  j["seeds"] = seeds;
  j["interval"] = interval_note();
  j["expected_loss_batches"] = base.batches;
  j["label_smoothing"] = base.label_smoothing;
  j["init"] = init_dir.empty() ? "fairseq: embeddings N(0, d^-1/2) scaled by sqrt(d) + sinusoidal; xavier_uniform "
                                 "weights, q/k/v gain 1/sqrt(2); zero biases; tied output layer"
                               : "read from " + init_dir;
  j["results"] = results;
  j["top_layer_exponent"] = fits;
  cli::write_text(out + "/xiong.json", j.dump(2) + "\n");
  std::cout << "\nwrote " << out << "/xiong.csv, xiong_ratios.csv, xiong_seeds.csv (every seed's gradients) and xiong.json\n";
  if (!save_dir.empty()) std::cout << "wrote every run's initial state to " << save_dir << "/xiong_L*_seed*.safetensors\n";
  if (dropouts.empty()) return;
  for (int st = 0; st < 2; ++st) {
    ex::PlotSpec spec;
    spec.title = std::string(st == 0 ? "Encoder" : "Decoder") + " FFN W2 gradient at init, dropout " +
                 cli::fmt("%g", dropouts[0]) + "\nmedian of " + std::to_string(seeds) +
                 " seeds, bars: 95% bootstrap interval";
    spec.xlabel = "layer";
    spec.ylabel = "||dL/dW2||";
    spec.logy = true;
    int color = 0;
    for (int nm = 0; nm < 2; ++nm)
      for (std::size_t li = 0; li < depths.size(); ++li) {
        ex::Series s{std::string(norms[nm]) + ", " + std::to_string(depths[li]) + "+" + std::to_string(depths[li]) +
                         " layers",
                     iota_1(depths[li]), {}, {}, {}, nm == 1, ++color};
        for (const auto& i : plot_prof[st][nm][li]) {
          s.y.push_back(i.estimate);
          s.ylo.push_back(i.lo);
          s.yhi.push_back(i.hi);
        }
        spec.series.push_back(s);
      }
    report_plot(out, std::string("xiong_") + stacks[st], spec, warned);
  }
}

// --- part 4 -------------------------------------------------------------------------------------
void part4(const ex::TrainConfig& tc, const std::vector<int64_t>& depths, const std::vector<double>& lrs,
           int64_t train_seeds, const std::string& out, const json& flags, bool& warned) {
  auto corpus = ex::read_corpus(tc.corpus, 4 * tc.seq_len);
  std::cout << "\n=== Training stability: byte-level decoder LMs on " << tc.corpus << " (" << corpus.size()
            << " bytes) ===\n";
  std::cout << "d_model " << tc.d_model << ", " << tc.n_heads << " heads, " << tc.batch << " x " << tc.seq_len
            << " tokens per step, " << tc.steps << " steps of AdamW (no clipping), linear warmup " << tc.warmup
            << " steps when on, " << train_seeds << " seeds\n\n";
  std::printf("%-9s %5s %8s %7s %4s  %10s %10s %10s %10s  %s\n", "norm", "depth", "lr", "warmup", "seed", "first loss",
              "final loss", "max |g|", "max |dW|", "status");
  std::ostringstream summary, curves;
  summary << "norm,depth,lr,warmup,seed,first_loss,final_loss,max_grad_norm,max_update_norm,status\n";
  curves << "norm,depth,lr,warmup,seed,step,loss,grad_norm,update_norm\n";
  json runs = json::array();
  double unigram = 0;
  const std::vector<ex::TrainMethod> methods{ex::TrainMethod::Post, ex::TrainMethod::Pre, ex::TrainMethod::DeepNorm,
                                             ex::TrainMethod::Admin};
  // stable[method][warmup][depth][lr]: every seed "ok"
  std::map<std::string, std::map<int64_t, std::map<double, int>>> ok_count;
  // Per cell, seed by seed: the final loss and whether the run was "ok".
  std::map<std::string, std::map<int64_t, std::map<double, std::vector<double>>>> finals;
  std::map<std::string, std::map<int64_t, std::map<double, std::vector<bool>>>> oks;
  auto key = [](ex::TrainMethod m, bool w) { return std::string(ex::train_method_name(m)) + (w ? "+warmup" : ""); };
  for (int64_t depth : depths)
    for (double lr : lrs) {
      ex::PlotSpec spec;
      spec.title = "Training loss, depth " + std::to_string(depth) + ", lr " + cli::fmt("%g", lr) + " (seed " +
                   std::to_string(tc.seed) + "; mean of the last " + std::to_string(kLossWindow) + " steps)";
      spec.xlabel = "step";
      spec.ylabel = "cross-entropy (nats/byte)";
      // The cell's runs (method x warmup x seed) are independent: one per thread, each run's own
      // ops single-threaded inside the parallel region (at d_model 16 a run has no parallelism
      // worth a thread, and a run's result does not depend on which thread ran it). Printed in
      // grid order once the cell is done.
      struct Job {
        ex::TrainMethod norm;
        bool warmup;
        int64_t s;
      };
      std::vector<Job> jobs;
      for (auto norm : methods)
        for (bool warmup : {false, true})
          for (int64_t s = 0; s < train_seeds; ++s) jobs.push_back({norm, warmup, s});
      std::vector<ex::TrainRun> results(jobs.size());
      std::vector<std::string> errors(jobs.size());
#pragma omp parallel for schedule(dynamic, 1)
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        ex::TrainConfig c = tc;
        c.seed = tc.seed + static_cast<uint64_t>(jobs[i].s);
        try {
          results[i] = ex::train_run(c, corpus, jobs[i].norm, depth, lr, jobs[i].warmup);
        } catch (const std::exception& e) {  // no exception may leave an OpenMP region
          errors[i] = e.what();
        }
      }
      for (const std::string& e : errors)
        if (!e.empty()) throw std::runtime_error(e);
      int color = 0;
      std::size_t job = 0;
      for (auto norm : methods) {
        ++color;
        for (bool warmup : {false, true})
          for (int64_t s = 0; s < train_seeds; ++s) {
            ex::TrainConfig c = tc;
            c.seed = tc.seed + static_cast<uint64_t>(s);
            const ex::TrainRun& r = results[job++];
            unigram = r.unigram_entropy;
            if (r.status == "ok") ++ok_count[key(norm, warmup)][depth][lr];
            finals[key(norm, warmup)][depth][lr].push_back(r.final_loss);
            oks[key(norm, warmup)][depth][lr].push_back(r.status == "ok");
            const char* name = ex::train_method_name(norm);
            double gmax = 0, umax = 0;
            for (double g : r.grad_norms) gmax = std::max(gmax, g);
            for (double u : r.update_norms) umax = std::max(umax, u);
            std::printf("%-9s %5lld %8g %7s %4lld  %10.4f %10.4f %10.3g %10.3g  %s\n", name, static_cast<long long>(depth),
                        lr, warmup ? "yes" : "no", static_cast<long long>(c.seed), r.losses.front(), r.final_loss, gmax,
                        umax, r.status.c_str());
            std::fflush(stdout);
            summary << name << "," << depth << "," << lr << "," << (warmup ? 1 : 0) << "," << c.seed << ","
                    << cli::fmt("%.6g", r.losses.front()) << "," << cli::fmt("%.6g", r.final_loss) << ","
                    << cli::fmt("%.6g", gmax) << "," << cli::fmt("%.6g", umax) << "," << r.status << "\n";
            for (std::size_t i = 0; i < r.losses.size(); ++i)
              curves << name << "," << depth << "," << lr << "," << (warmup ? 1 : 0) << "," << c.seed << "," << i << ","
                     << cli::fmt("%.6g", r.losses[i]) << ","
                     << cli::fmt("%.6g", i < r.grad_norms.size() ? r.grad_norms[i] : NAN) << ","
                     << cli::fmt("%.6g", i < r.update_norms.size() ? r.update_norms[i] : NAN) << "\n";
            runs.push_back({{"norm", name}, {"depth", depth}, {"lr", lr}, {"warmup", warmup}, {"seed", c.seed},
                            {"final_loss", r.final_loss}, {"status", r.status}, {"max_grad_norm", gmax},
                            {"max_update_norm", umax}});
            if (s != 0) continue;  // the plots show the first seed
            // A trailing mean over kLossWindow steps: the per-step losses of a batch of 8 x 32
            // bytes swing by +-0.3 nats, which hides one method under another; a spike still
            // shows (at a tenth of its height) and train_curves.csv has every step.
            ex::Series ser{std::string(name) + (warmup ? " + warmup" : ""), {}, {}, {}, {}, warmup, color, false};
            double sum = 0;
            std::size_t n = 0;
            for (std::size_t i = 0; i < r.losses.size() && std::isfinite(r.losses[i]); ++i) {
              sum += r.losses[i];
              if (++n > kLossWindow) sum -= r.losses[i - kLossWindow], n = kLossWindow;
              ser.x.push_back(static_cast<double>(i));
              ser.y.push_back(sum / static_cast<double>(n));
            }
            spec.series.push_back(ser);
          }
      }
      // What "stalled" means: a run that ends at (or above) the unigram entropy.
      ex::Series uni{"unigram " + cli::fmt("%.2f", unigram) + " (stalled)", {0, double(tc.steps - 1)},
                     {unigram, unigram}, {}, {}, true, 8};
      spec.series.push_back(uni);
      report_plot(out, "train_d" + std::to_string(depth) + "_lr" + cli::fmt("%g", lr), spec, warned);
    }
  std::printf("\n(the corpus's unigram entropy is %.4f nats/byte: \"stalled\" runs ended there or above)\n", unigram);
  std::vector<std::string> keys;
  for (auto m : methods)
    for (bool w : {false, true}) keys.push_back(key(m, w));
  // Each cell's final loss: the median over seeds with its interval, and how many seeds trained.
  std::printf("\nFinal loss per cell (nats/byte): median over %lld seeds [95%% bootstrap interval], seeds \"ok\"\n",
              static_cast<long long>(train_seeds));
  std::printf("%5s %8s", "depth", "lr");
  for (const auto& k : keys) std::printf("  %-28s", k.c_str());
  std::printf("\n");
  std::ostringstream ccsv;
  ccsv << "method,depth,lr,seeds,ok,final_median,final_lo,final_hi\n";
  json cells = json::array();
  for (int64_t depth : depths)
    for (double lr : lrs) {
      std::printf("%5lld %8g", static_cast<long long>(depth), lr);
      for (const auto& k : keys) {
        const ex::Interval f = ex::median_ci(finals[k][depth][lr]);
        const int ok = ok_count[k][depth][lr];
        std::printf("  %-28s", (ci_str(f, "%.2f") + " " + std::to_string(ok) + "/" + std::to_string(train_seeds)).c_str());
        ccsv << k << "," << depth << "," << lr << "," << train_seeds << "," << ok << "," << ci_csv(f) << "\n";
        cells.push_back({{"method", k}, {"depth", depth}, {"lr", lr}, {"seeds", train_seeds}, {"ok", ok},
                         {"final_loss", ci_json(f)}});
      }
      std::printf("\n");
    }
  // The stability boundary: the largest learning rate of the grid at which every seed is "ok";
  // beside it each seed's own boundary (the largest lr at which that seed is "ok"), how many
  // seeds' own boundary is the same, and the median of the seeds' own boundaries with its
  // interval (on log lr).
  std::printf("\nStability boundary: largest lr with all %lld seeds ok (- : none); in brackets, how many seeds' own "
              "boundary (largest lr that seed trains at) is the same\n%5s",
              static_cast<long long>(train_seeds), "depth");
  std::ostringstream bcsv;
  bcsv << "depth,method,seeds,boundary_all_ok,seeds_agreeing,per_seed_boundaries,per_seed_median,per_seed_lo,"
          "per_seed_hi\n";
  for (const auto& k : keys) std::printf(" %18s", k.c_str());
  std::printf("\n");
  json boundary = json::array();
  ex::PlotSpec bspec;
  bspec.title = "Largest lr with every seed ok (" + std::to_string(tc.steps) + " steps, d_model " +
                std::to_string(tc.d_model) + ", " + std::to_string(train_seeds) + " seeds; lines nudged apart)";
  bspec.xlabel = "depth (layers)";
  bspec.ylabel = "largest stable lr";
  bspec.logx = bspec.logy = true;
  std::map<std::string, ex::Series> bser;
  int bcolor = 0;
  for (const auto& k : keys)
    bser[k] = ex::Series{k, {}, {}, {}, {}, k.find("warmup") != std::string::npos, (bcolor++ / 2) + 1};
  const double none_log = std::log10(*std::min_element(lrs.begin(), lrs.end())) - 1;
  for (int64_t depth : depths) {
    std::printf("%5lld", static_cast<long long>(depth));
    json row = {{"depth", depth}};
    for (const auto& k : keys) {
      double best = 0;
      for (double lr : lrs)
        if (ok_count[k][depth][lr] == train_seeds) best = std::max(best, lr);
      std::vector<double> own(static_cast<std::size_t>(train_seeds), 0.0), own_log;
      for (double lr : lrs)
        for (int64_t s = 0; s < train_seeds; ++s)
          if (oks[k][depth][lr][s]) own[s] = std::max(own[s], lr);
      int agree = 0;
      std::string own_list;
      for (double b : own) {
        agree += b == best;
        own_list += (own_list.empty() ? "" : ";") + (b > 0 ? cli::fmt("%g", b) : std::string("-"));
        own_log.push_back(b > 0 ? std::log10(b) : none_log);  // no lr of the grid: one decade below it
      }
      const ex::Interval m = ex::median_ci(own_log);
      auto lr_of = [&](double l) { return l < none_log + 0.5 ? 0.0 : std::pow(10.0, l); };  // 0: none
      std::printf(" %18s", ((best > 0 ? cli::fmt("%g", best) : std::string("-")) + " (" + std::to_string(agree) + "/" +
                            std::to_string(train_seeds) + ")")
                               .c_str());
      bcsv << depth << "," << k << "," << train_seeds << "," << (best > 0 ? cli::fmt("%g", best) : "") << "," << agree
           << "," << own_list << "," << cli::fmt("%g", lr_of(m.estimate)) << "," << cli::fmt("%g", lr_of(m.lo)) << ","
           << cli::fmt("%g", lr_of(m.hi)) << "\n";
      row[k] = {{"boundary", best > 0 ? json(best) : json(nullptr)},
                {"seeds_agreeing", agree},
                {"per_seed", own},
                {"per_seed_median", {{"median", lr_of(m.estimate)}, {"lo", lr_of(m.lo)}, {"hi", lr_of(m.hi)}}}};
      if (best > 0) {
        // Nudged apart by a few percent per series (the values are grid points, so the lines
        // of methods that agree would otherwise lie on top of each other and hide).
        const double nudge = std::pow(1.045, static_cast<double>(&k - &keys[0]) - (keys.size() - 1) / 2.0);
        bser[k].x.push_back(static_cast<double>(depth));
        bser[k].y.push_back(best * nudge);
      }
    }
    std::printf("\n");
    boundary.push_back(row);
  }
  for (const auto& k : keys)
    if (!bser[k].x.empty()) bspec.series.push_back(bser[k]);
  if (!bspec.series.empty()) report_plot(out, "train_boundary", bspec, warned);
  cli::write_text(out + "/train.csv", summary.str());
  cli::write_text(out + "/train_curves.csv", curves.str());
  cli::write_text(out + "/train_boundary.csv", bcsv.str());
  cli::write_text(out + "/train_cells.csv", ccsv.str());
  json j = base_json("--train", flags, tc.seed);
  j["corpus"] = tc.corpus;
  j["unigram_entropy"] = unigram;
  j["seeds"] = train_seeds;
  j["interval"] = interval_note();
  j["cells"] = cells;
  j["boundary"] = boundary;
  j["runs"] = runs;
  cli::write_text(out + "/train.json", j.dump(2) + "\n");
  std::cout << "wrote " << out << "/train.csv (every run), train_curves.csv, train_cells.csv, train_boundary.csv and "
               "train.json\n";
}

}  // namespace

int main(int argc, char** argv) {
  ex::StudyConfig c;
  std::string norm = "layernorm", sublayer = "linear", init_file, save_init, out = "prenorm_out";
  std::string depths_s = "4,8,16,32,64,80", dims_s = "64,256", xiong_s = "3,6,12", dropouts_s = "0";
  std::string sweep_init, sweep_save_init, xiong_init, xiong_save_init;
  // The default seed counts: enough for each headline ratio's 95% interval to be within about 10%
  // of its median (experiments/README.md gives the half-widths reached and the CPU time).
  int64_t seeds = 200;
  ex::XiongConfig xc;
  ex::EncDecConfig ec;
  int64_t xiong_seeds = 200;
  ex::TrainConfig tc;
  std::string train_depths_s = "6,12,24,48", lrs_s = "0.0001,0.000316,0.001,0.00316,0.01";
  int64_t train_seeds = 3;
  po::options_description opts = cli::flag_group(
      "prenorm_vs_postnorm: the Pre-Norm vs Post-Norm gradient experiment.\n"
      "Default: 8 layers, d_model 4, Linear+ReLU sublayers with a LayerNorm each, MSE against a random\n"
      "target, seed 42; prints each layer's weight-gradient norm and the layer-1 Pre/Post ratio.\n"
      "Options");
  // clang-format off
  opts.add_options()
    ("help,h", "show this help")
    ("layers", po::value<int64_t>(&c.layers)->default_value(8), "number of layers")
    ("d-model", po::value<int64_t>(&c.d_model)->default_value(4), "width of the residual stream")
    ("batch", po::value<int64_t>(&c.batch)->default_value(2), "rows of the random input")
    ("seq-len", po::value<int64_t>(&c.seq_len)->default_value(4), "tokens per row (attention, block sublayers)")
    ("heads", po::value<int64_t>(&c.n_heads)->default_value(1), "attention heads (attention, block sublayers)")
    ("seed", po::value<uint64_t>(&c.seed)->default_value(42), "seed of xgrad's generator (init, x, target)")
    ("norm", po::value<std::string>(&norm)->default_value("layernorm"), "layernorm | rmsnorm")
    ("final-norm", po::bool_switch(&c.final_norm), "end the Pre-Norm net with a norm (by default it has none)")
    ("sublayer", po::value<std::string>(&sublayer)->default_value("linear"), "linear | ffn | attention | block")
    ("init", po::value<std::string>(&init_file), "load the initial weights, x and target (PyTorch's names) "
                                                  "from a safetensors file")
    ("save-init", po::value<std::string>(&save_init), "write the initial state in the --init format")
    ("xgrad-init", "draw the default net from xgrad's generator too (by default that shape starts "
                   "from PyTorch's seed-42 tensors, compiled in)")
    ("out", po::value<std::string>(&out)->default_value("prenorm_out"), "folder for CSV, JSON and plots")
    ("sweep", "also run the depth sweep (part 2)")
    ("depths", po::value<std::string>(&depths_s)->default_value("4,8,16,32,64,80"), "sweep depths")
    ("seeds", po::value<int64_t>(&seeds)->default_value(200), "sweep seeds per point (seed, seed+1, ...)")
    ("sweep-d-models", po::value<std::string>(&dims_s)->default_value("64,256"), "sweep widths")
    ("sweep-init", po::value<std::string>(&sweep_init), "read each sweep run's initial state from "
                                                         "DIR/sweep_d{D}_L{L}_seed{S}.safetensors (the --init format)")
    ("sweep-save-init", po::value<std::string>(&sweep_save_init), "write each sweep run's initial state into that folder")
    ("sweep-seed-variant", "sweep the original experiment's Pre-Norm net, without a final norm (by default the sweep's "
                           "Pre-Norm nets end with one)")
    ("xiong", "also measure an encoder-decoder Transformer at init (part 3, Xiong et al. 2020)")
    ("xiong-depths", po::value<std::string>(&xiong_s)->default_value("3,6,12"), "encoder-decoder depths (L encoder + L decoder layers)")
    ("xiong-d-model", po::value<int64_t>(&xc.d_model)->default_value(64), "encoder-decoder width")
    ("xiong-heads", po::value<int64_t>(&xc.n_heads)->default_value(4), "encoder-decoder heads")
    ("xiong-seeds", po::value<int64_t>(&xiong_seeds)->default_value(200), "encoder-decoder seeds per depth")
    ("xiong-batches", po::value<int64_t>(&ec.batches)->default_value(32), "batches averaged for the expected-loss gradient")
    ("xiong-dropouts", po::value<std::string>(&dropouts_s)->default_value("0"), "encoder-decoder dropout rates (fairseq's "
                                                                              "is 0.1: --xiong-dropouts 0,0.1)")
    ("xiong-init", po::value<std::string>(&xiong_init), "read each encoder-decoder run's initial weights and token "
                                                        "batches from DIR/xiong_L{L}_seed{S}.safetensors")
    ("xiong-save-init", po::value<std::string>(&xiong_save_init), "write each encoder-decoder run's initial weights "
                                                                  "and token batches into that folder")
    ("train", "also train Post-Norm, Pre-Norm, DeepNorm and Admin decoder LMs with and without warmup (part 4)")
    ("corpus", po::value<std::string>(&tc.corpus)->default_value(tc.corpus), "training text (bytes)")
    ("train-depths", po::value<std::string>(&train_depths_s)->default_value("6,12,24,48"), "training depths")
    ("train-lrs", po::value<std::string>(&lrs_s)->default_value("0.0001,0.000316,0.001,0.00316,0.01"),
     "peak learning rates (log-spaced)")
    ("train-seeds", po::value<int64_t>(&train_seeds)->default_value(3), "training seeds per cell")
    ("train-d-model", po::value<int64_t>(&tc.d_model)->default_value(16), "training width")
    ("train-steps", po::value<int64_t>(&tc.steps)->default_value(600), "steps per run")
    ("warmup", po::value<int64_t>(&tc.warmup)->default_value(150), "warmup steps of the runs with warmup")
    ("full", "longer training runs: 3000 steps, d_model 64, warmup 500 (unless given)")
    ("quick", "tiny sizes for CI: sweep depths 4,8 x 2 seeds x d_model 8,16; encoder-decoder 1+1, 2+2 at d_model 16, "
              "dropout 0 and 0.1; "
              "training depth 2, 10 steps, lr 0.001,0.01, 1 seed");
  // clang-format on
  int threads = 0;
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  std::vector<int64_t> depths, dims, xiong_depths, train_depths;
  std::vector<double> lrs, dropouts;
  try {
    cli::store_checked(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
    cli::apply_threads(threads);
    if (vm.count("help")) {
      std::cout << cli::help_text(opts) << "\nExample: " << kProg << " --sweep --xiong --train --out results\n";
      return 0;
    }
    c.norm = ex::parse_norm(norm);
    c.sublayer = ex::parse_sublayer(sublayer);
    if (vm.count("quick")) {
      if (vm["depths"].defaulted()) depths_s = "4,8";
      if (vm["seeds"].defaulted()) seeds = 2;
      if (vm["sweep-d-models"].defaulted()) dims_s = "8,16";
      if (vm["xiong-depths"].defaulted()) xiong_s = "1,2";
      if (vm["xiong-seeds"].defaulted()) xiong_seeds = 2;
      if (vm["xiong-batches"].defaulted()) ec.batches = 2;
      if (vm["xiong-dropouts"].defaulted()) dropouts_s = "0,0.1";
      if (vm["xiong-d-model"].defaulted()) xc.d_model = 16;
      if (vm["xiong-heads"].defaulted()) xc.n_heads = 2;
      xc.batch = 2;
      xc.seq_len = 8;
      if (vm["train-depths"].defaulted()) train_depths_s = "2";
      if (vm["train-steps"].defaulted()) tc.steps = 10;
      if (vm["warmup"].defaulted()) tc.warmup = 3;
      if (vm["train-lrs"].defaulted()) lrs_s = "0.001,0.01";
      if (vm["train-seeds"].defaulted()) train_seeds = 1;
      tc.d_model = 16;
      tc.seq_len = 16;
      tc.batch = 2;
    }
    if (vm.count("full")) {
      if (vm["train-steps"].defaulted()) tc.steps = 3000;
      if (vm["warmup"].defaulted()) tc.warmup = 500;
      if (vm["train-d-model"].defaulted()) tc.d_model = 64;
    }
    train_depths = parse_positive_ints("train-depths", train_depths_s);
    lrs = cli::parse_doubles("train-lrs", lrs_s, /*positive=*/true, /*finite=*/false);
    if (train_seeds < 1) throw cli::UsageError("--train-seeds: must be at least 1, got " + std::to_string(train_seeds));
    if (tc.d_model < tc.n_heads || tc.d_model % tc.n_heads != 0)
      throw cli::UsageError("--train-d-model: must be a multiple of the " + std::to_string(tc.n_heads) +
                            " heads, got " + std::to_string(tc.d_model));
    if (tc.steps < 1) throw cli::UsageError("--train-steps: must be at least 1, got " + std::to_string(tc.steps));
    if (tc.warmup < 1) throw cli::UsageError("--warmup: must be at least 1, got " + std::to_string(tc.warmup));
    depths = parse_positive_ints("depths", depths_s);
    dims = parse_positive_ints("sweep-d-models", dims_s);
    xiong_depths = parse_positive_ints("xiong-depths", xiong_s);
    dropouts = cli::parse_doubles("xiong-dropouts", dropouts_s, /*positive=*/false, /*finite=*/true);
    for (double p : dropouts)
      if (p < 0 || p >= 1) throw cli::UsageError("--xiong-dropouts: each rate must be in [0, 1), got " + cli::fmt("%g", p));
    if (xiong_seeds < 1) throw cli::UsageError("--xiong-seeds: must be at least 1, got " + std::to_string(xiong_seeds));
    if (ec.batches < 1) throw cli::UsageError("--xiong-batches: must be at least 1, got " + std::to_string(ec.batches));
    if (seeds < 1) throw cli::UsageError("--seeds: must be at least 1, got " + std::to_string(seeds));
    if (xc.d_model < 1 || xc.n_heads < 1 || xc.d_model % xc.n_heads != 0)
      throw cli::UsageError("--xiong-heads: must be at least 1 and divide --xiong-d-model " + std::to_string(xc.d_model));
    c.validate();
  } catch (const std::exception& e) {  // po::error, UsageError, xg::Error from validation
    std::cerr << kProg << ": " << e.what() << " (see --help)\n";
    return 2;
  }
  xc.seed = c.seed;
  tc.seed = c.seed;
  ec.d_model = xc.d_model;
  ec.n_heads = xc.n_heads;
  ec.batch = xc.batch;
  ec.src_len = ec.tgt_len = xc.seq_len;
  ec.seed = c.seed;

  const json flags = cli::flags_json(vm);

  bool warned = false;
  try {
    cli::make_dir(out);
    part1(c, init_file, vm.count("xgrad-init") > 0, save_init, out, flags, warned);
  } catch (const xg::Error& e) {  // a bad --init file, say: still the user's input
    std::cerr << kProg << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << kProg << ": " << e.what() << "\n";
    return 1;
  }
  try {
    if (vm.count("sweep")) {
      ex::StudyConfig sc = c;
      sc.final_norm = c.final_norm || vm.count("sweep-seed-variant") == 0;
      part2(sc, depths, dims, seeds, sweep_init, sweep_save_init, out, flags, warned);
    }
    if (vm.count("xiong")) part3(ec, xiong_depths, dropouts, xiong_seeds, xiong_init, xiong_save_init, out, flags, warned);
    if (vm.count("train")) part4(tc, train_depths, lrs, train_seeds, out, flags, warned);
  } catch (const std::exception& e) {
    std::cerr << kProg << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// prenorm_vs_postnorm: Post-Norm vs Pre-Norm gradient flow in two deep residual nets from the
// same initial tensors (by default 8 layers of relu(Linear(4, 4)), a LayerNorm each, MSE loss),
// then, on request, a depth sweep (--sweep), real Transformer blocks at init (--xiong) and
// training runs (--train).
// Prints the tables; writes CSV, JSON (flags, seed, git revision) and gnuplot plots to --out.
// The measurements live in experiments/study.cpp; this file parses flags and writes files.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

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
           int64_t seeds, const std::string& out, const json& flags, bool& warned) {
  std::cout << "\n=== Depth sweep: " << seeds << " seeds per point, Pre-Norm "
            << (c.final_norm ? "with a final norm" : "without a final norm (the original experiment's variant)") << " ===\n\n";
  auto points = ex::run_sweep(c, depths, dims, seeds);
  std::printf("%7s %5s  %-26s  %-26s  %-26s  %-26s\n", "d_model", "depth", "Post L1 grad [q1 med q3]",
              "Pre L1 grad [q1 med q3]", "Pre/Post L1 ratio [q1 med q3]", "L1/top Post | Pre (median)");
  std::ostringstream csv;
  csv << "d_model,depth,seeds,pre_final_norm,post_l1_q1,post_l1_median,post_l1_q3,pre_l1_q1,pre_l1_median,pre_l1_q3,"
         "ratio_q1,ratio_median,ratio_q3,post_l1_rel_top_median,pre_l1_rel_top_median\n";
  json rows = json::array();
  auto q3s = [](const ex::Quartiles& q) {
    return cli::fmt("%.3g", q.q1) + " " + cli::fmt("%.3g", q.median) + " " + cli::fmt("%.3g", q.q3);
  };
  for (const auto& p : points) {
    std::printf("%7lld %5lld  %-26s  %-26s  %-29s  %.3g | %.3g\n", static_cast<long long>(p.d_model),
                static_cast<long long>(p.depth), q3s(p.post_layer1).c_str(), q3s(p.pre_layer1).c_str(),
                q3s(p.ratio).c_str(), p.rel_post_median.front(), p.rel_pre_median.front());
    csv << p.d_model << "," << p.depth << "," << seeds << "," << (c.final_norm ? 1 : 0);
    for (const auto* q : {&p.post_layer1, &p.pre_layer1, &p.ratio})
      csv << "," << cli::fmt("%.9g", q->q1) << "," << cli::fmt("%.9g", q->median) << "," << cli::fmt("%.9g", q->q3);
    csv << "," << cli::fmt("%.9g", p.rel_post_median.front()) << "," << cli::fmt("%.9g", p.rel_pre_median.front())
        << "\n";
    auto qj = [](const ex::Quartiles& q) { return json{{"q1", q.q1}, {"median", q.median}, {"q3", q.q3}}; };
    rows.push_back({{"d_model", p.d_model},
                    {"depth", p.depth},
                    {"post_layer1", qj(p.post_layer1)},
                    {"pre_layer1", qj(p.pre_layer1)},
                    {"ratio", qj(p.ratio)},
                    {"rel_top_post_median", p.rel_post_median},
                    {"rel_top_pre_median", p.rel_pre_median},
                    {"raw_post_median", p.raw_post_median},
                    {"raw_pre_median", p.raw_pre_median}});
  }
  // The layer-1 gradient against depth, y ~ c L^p: p from a log-log least-squares fit of the
  // medians over the depths.
  json fits = json::array();
  if (depths.size() >= 2) {
    std::printf("\nLayer-1 gradient ~ depth^p (least squares on log median vs log depth):\n");
    for (int64_t d : dims) {
      std::vector<double> x, post, pre;
      for (const auto& p : points)
        if (p.d_model == d) {
          x.push_back(static_cast<double>(p.depth));
          post.push_back(p.post_layer1.median);
          pre.push_back(p.pre_layer1.median);
        }
      const double pp = ex::fit_exponent(x, post), pq = ex::fit_exponent(x, pre);
      std::printf("  d_model %lld: Post-Norm p = %.3f, Pre-Norm p = %.3f\n", static_cast<long long>(d), pp, pq);
      fits.push_back({{"d_model", d}, {"post_exponent", pp}, {"pre_exponent", pq}});
    }
  }
  cli::write_text(out + "/sweep.csv", csv.str());
  json j = base_json("--sweep", flags, c.seed);
  j["seeds"] = seeds;
  j["pre_final_norm"] = c.final_norm;
  j["points"] = rows;
  j["layer1_exponent"] = fits;
  cli::write_text(out + "/sweep.json", j.dump(2) + "\n");
  std::cout << "\nwrote " << out << "/sweep.csv and sweep.json\n";

  ex::PlotSpec ratio;
  ratio.title = "Pre-Norm / Post-Norm layer-1 gradient (median, quartile bars, " + std::to_string(seeds) + " seeds)";
  ratio.xlabel = "depth (layers)";
  ratio.ylabel = "ratio";
  ratio.logx = ratio.logy = true;
  for (int64_t d : dims) {
    ex::Series s{"d_model " + std::to_string(d), {}, {}, {}, {}, false, 0};
    for (const auto& p : points)
      if (p.d_model == d) {
        s.x.push_back(static_cast<double>(p.depth));
        s.y.push_back(p.ratio.median);
        s.ylo.push_back(p.ratio.q1);
        s.yhi.push_back(p.ratio.q3);
      }
    ratio.series.push_back(s);
  }
  report_plot(out, "sweep_ratio", ratio, warned);
  // One plot per norm position and width, a colour per depth: twelve lines in one
  // plot, Pre and Post told apart only by dashes, were unreadable.
  for (int64_t d : dims)
    for (bool post : {true, false}) {
      ex::PlotSpec prof;
      prof.title = std::string(post ? "Post-Norm" : (c.final_norm ? "Pre-Norm (final norm)" : "Pre-Norm (no final norm)")) +
                   ": gradient norm relative to the top layer, median of " + std::to_string(seeds) + " seeds, d_model " +
                   std::to_string(d);
      prof.xlabel = "layer";
      prof.ylabel = "grad[i] / grad[top]";
      prof.logy = true;
      int color = 0;
      for (const auto& p : points)
        if (p.d_model == d)
          prof.series.push_back({"depth " + std::to_string(p.depth), iota_1(p.depth),
                                 post ? p.rel_post_median : p.rel_pre_median, {}, {}, false, ++color});
      report_plot(out, "sweep_profile_d" + std::to_string(d) + (post ? "_post" : "_pre"), prof, warned);
    }
}

// --- part 3 -------------------------------------------------------------------------------------
// Per-layer quartiles over seeds of one profile.
std::vector<ex::Quartiles> layer_quartiles(const std::vector<std::vector<double>>& per_seed) {
  std::vector<ex::Quartiles> q;
  for (std::size_t i = 0; i < per_seed.front().size(); ++i) {
    std::vector<double> v;
    for (const auto& s : per_seed) v.push_back(s[i]);
    q.push_back(ex::quartiles(v));
  }
  return q;
}

void part3(const ex::EncDecConfig& base, const std::vector<int64_t>& depths, int64_t seeds, const std::string& out,
           const json& flags, bool& warned) {
  std::cout << "\n=== Encoder-decoder at initialisation (Xiong et al. 2020, fig. 3): FFN W2 gradient norm per layer ===\n";
  std::cout << "d_model " << base.d_model << ", " << base.n_heads << " heads, batch " << base.batch << " x "
            << base.src_len << " source / " << base.tgt_len << " target tokens (random), vocabulary " << base.vocab
            << " (tied), label smoothing " << base.label_smoothing << ", fairseq init, " << seeds
            << " seeds; expected-loss gradient = mean over " << base.batches << " batches\n";
  const char* stacks[] = {"encoder", "decoder"};
  const char* norms[] = {"Post-LN", "Pre-LN"};
  std::ostringstream csv;
  csv << "dropout,layers,stack,norm,layer,single_q1,single_median,single_q3,expected_q1,expected_median,expected_q3\n";
  json results = json::array();
  // [dropout][stack][norm] -> per depth: median over seeds of the top layer's expected-loss gradient
  std::vector<double> dropouts{0.0, 0.1};
  double top_median[2][2][2][16] = {};
  // profiles for the plots (dropout off): [stack][norm][depth index] -> per-layer median (expected)
  std::vector<std::vector<double>> plot_prof[2][2];
  for (std::size_t di = 0; di < dropouts.size(); ++di) {
    std::printf("\ndropout %.1f: top/bottom = W2 grad of the last layer / the first, quartiles over seeds\n", dropouts[di]);
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
        ex::EncDecProfile p = ex::run_encdec(c, L, L);
        single[0][0].push_back(p.enc_post), single[0][1].push_back(p.enc_pre);
        single[1][0].push_back(p.dec_post), single[1][1].push_back(p.dec_pre);
        expct[0][0].push_back(p.enc_post_exp), expct[0][1].push_back(p.enc_pre_exp);
        expct[1][0].push_back(p.dec_post_exp), expct[1][1].push_back(p.dec_pre_exp);
      }
      for (int st = 0; st < 2; ++st)
        for (int nm = 0; nm < 2; ++nm) {
          auto qs = layer_quartiles(single[st][nm]), qe = layer_quartiles(expct[st][nm]);
          std::vector<double> tb_s, tb_e, top_e;
          for (int64_t s = 0; s < seeds; ++s) {
            tb_s.push_back(single[st][nm][s].back() / single[st][nm][s].front());
            tb_e.push_back(expct[st][nm][s].back() / expct[st][nm][s].front());
            top_e.push_back(expct[st][nm][s].back());
          }
          const ex::Quartiles qtb_s = ex::quartiles(tb_s), qtb_e = ex::quartiles(tb_e), qtop = ex::quartiles(top_e);
          if (li < 16) top_median[di][st][nm][li] = qtop.median;
          std::printf("%6lld %-8s %-8s  %-24s  %-24s  %-26s\n", static_cast<long long>(L), stacks[st], norms[nm],
                      (cli::fmt("%.2f", qtb_e.q1) + " " + cli::fmt("%.2f", qtb_e.median) + " " + cli::fmt("%.2f", qtb_e.q3)).c_str(),
                      (cli::fmt("%.2f", qtb_s.q1) + " " + cli::fmt("%.2f", qtb_s.median) + " " + cli::fmt("%.2f", qtb_s.q3)).c_str(),
                      (cli::fmt("%.3g", qtop.q1) + " " + cli::fmt("%.3g", qtop.median) + " " + cli::fmt("%.3g", qtop.q3)).c_str());
          std::vector<double> med_e;
          for (std::size_t i = 0; i < qs.size(); ++i) {
            csv << dropouts[di] << "," << L << "," << stacks[st] << "," << norms[nm] << "," << i + 1;
            for (const auto* q : {&qs[i], &qe[i]})
              csv << "," << cli::fmt("%.9g", q->q1) << "," << cli::fmt("%.9g", q->median) << "," << cli::fmt("%.9g", q->q3);
            csv << "\n";
            med_e.push_back(qe[i].median);
          }
          if (di == 0) plot_prof[st][nm].push_back(med_e);
          auto qj = [](const ex::Quartiles& q) { return json{{"q1", q.q1}, {"median", q.median}, {"q3", q.q3}}; };
          json prof = json::array();
          for (std::size_t i = 0; i < qs.size(); ++i) prof.push_back({{"single", qj(qs[i])}, {"expected", qj(qe[i])}});
          results.push_back({{"dropout", dropouts[di]}, {"layers", L}, {"stack", stacks[st]}, {"norm", norms[nm]},
                             {"top_over_bottom_expected", qj(qtb_e)}, {"top_over_bottom_single", qj(qtb_s)},
                             {"top_layer_expected", qj(qtop)}, {"profile", prof}});
        }
    }
  }
  // Theorem 1: the last layer's W2 gradient is O(d sqrt(ln d)) for Post-LN (constant in L) and
  // O(d sqrt(ln d / L)) for Pre-LN (exponent -1/2).
  json fits = json::array();
  if (depths.size() >= 2 && depths.size() <= 16) {
    std::printf("\nTop-layer W2 gradient (expected loss, median over seeds) ~ L^p, least squares on log-log:\n");
    std::printf("%8s %-8s %-8s %8s %10s\n", "dropout", "stack", "norm", "fitted p", "theorem p");
    std::vector<double> x(depths.begin(), depths.end());
    for (std::size_t di = 0; di < dropouts.size(); ++di)
      for (int st = 0; st < 2; ++st)
        for (int nm = 0; nm < 2; ++nm) {
          std::vector<double> y(top_median[di][st][nm], top_median[di][st][nm] + depths.size());
          const double p = ex::fit_exponent(x, y), theorem = nm == 0 ? 0.0 : -0.5;
          std::printf("%8.1f %-8s %-8s %8.3f %10.1f\n", dropouts[di], stacks[st], norms[nm], p, theorem);
          fits.push_back({{"dropout", dropouts[di]}, {"stack", stacks[st]}, {"norm", norms[nm]}, {"fitted", p},
                          {"theorem", theorem}});
        }
  }
  cli::write_text(out + "/xiong.csv", csv.str());
  json j = base_json("--xiong", flags, base.seed);
  j["d_model"] = base.d_model;
  j["heads"] = base.n_heads;
  j["seeds"] = seeds;
  j["expected_loss_batches"] = base.batches;
  j["label_smoothing"] = base.label_smoothing;
  j["init"] = "fairseq: embeddings N(0, d^-1/2) scaled by sqrt(d) + sinusoidal; xavier_uniform weights, q/k/v gain "
              "1/sqrt(2); zero biases; tied output layer";
  j["results"] = results;
  j["top_layer_exponent"] = fits;
  cli::write_text(out + "/xiong.json", j.dump(2) + "\n");
  std::cout << "\nwrote " << out << "/xiong.csv and xiong.json\n";
  for (int st = 0; st < 2; ++st) {
    ex::PlotSpec spec;
    spec.title = std::string(st == 0 ? "Encoder" : "Decoder") + " FFN W2 gradient at init (median of " +
                 std::to_string(seeds) + " seeds, no dropout)";
    spec.xlabel = "layer";
    spec.ylabel = "||dL/dW2||";
    spec.logy = true;
    int color = 0;
    for (int nm = 0; nm < 2; ++nm)
      for (std::size_t li = 0; li < depths.size(); ++li)
        spec.series.push_back({std::string(norms[nm]) + ", " + std::to_string(depths[li]) + "+" +
                                   std::to_string(depths[li]) + " layers",
                               iota_1(depths[li]), plot_prof[st][nm][li], {}, {}, nm == 1, ++color});
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
  // The stability boundary: the largest learning rate of the grid at which every seed is "ok".
  std::printf("\nStability boundary: largest lr with all %lld seeds ok (- : none)\n%5s", static_cast<long long>(train_seeds),
              "depth");
  std::ostringstream bcsv;
  bcsv << "depth";
  std::vector<std::string> keys;
  for (auto m : methods)
    for (bool w : {false, true}) keys.push_back(key(m, w));
  for (const auto& k : keys) {
    std::printf(" %16s", k.c_str());
    bcsv << "," << k;
  }
  std::printf("\n");
  bcsv << "\n";
  json boundary = json::array();
  ex::PlotSpec bspec;
  bspec.title = "Largest lr with every seed ok (" + std::to_string(tc.steps) + " steps, d_model " +
                std::to_string(tc.d_model) + "; lines nudged apart)";
  bspec.xlabel = "depth (layers)";
  bspec.ylabel = "largest stable lr";
  bspec.logx = bspec.logy = true;
  std::map<std::string, ex::Series> bser;
  int bcolor = 0;
  for (const auto& k : keys)
    bser[k] = ex::Series{k, {}, {}, {}, {}, k.find("warmup") != std::string::npos, (bcolor++ / 2) + 1};
  for (int64_t depth : depths) {
    std::printf("%5lld", static_cast<long long>(depth));
    bcsv << depth;
    json row = {{"depth", depth}};
    for (const auto& k : keys) {
      double best = 0;
      for (double lr : lrs)
        if (ok_count[k][depth][lr] == train_seeds) best = std::max(best, lr);
      std::printf(" %16s", best > 0 ? cli::fmt("%g", best).c_str() : "-");
      bcsv << "," << (best > 0 ? cli::fmt("%g", best) : "");
      row[k] = best > 0 ? json(best) : json(nullptr);
      if (best > 0) {
        // Nudged apart by a few percent per series (the values are grid points, so the lines
        // of methods that agree would otherwise lie on top of each other and hide).
        const double nudge = std::pow(1.045, static_cast<double>(&k - &keys[0]) - (keys.size() - 1) / 2.0);
        bser[k].x.push_back(static_cast<double>(depth));
        bser[k].y.push_back(best * nudge);
      }
    }
    std::printf("\n");
    bcsv << "\n";
    boundary.push_back(row);
  }
  for (const auto& k : keys)
    if (!bser[k].x.empty()) bspec.series.push_back(bser[k]);
  if (!bspec.series.empty()) report_plot(out, "train_boundary", bspec, warned);
  cli::write_text(out + "/train.csv", summary.str());
  cli::write_text(out + "/train_curves.csv", curves.str());
  cli::write_text(out + "/train_boundary.csv", bcsv.str());
  json j = base_json("--train", flags, tc.seed);
  j["corpus"] = tc.corpus;
  j["unigram_entropy"] = unigram;
  j["seeds"] = train_seeds;
  j["boundary"] = boundary;
  j["runs"] = runs;
  cli::write_text(out + "/train.json", j.dump(2) + "\n");
  std::cout << "wrote " << out << "/train.csv, train_curves.csv, train_boundary.csv and train.json\n";
}

}  // namespace

int main(int argc, char** argv) {
  ex::StudyConfig c;
  std::string norm = "layernorm", sublayer = "linear", init_file, save_init, out = "prenorm_out";
  std::string depths_s = "4,8,16,32,64,80", dims_s = "64,256", xiong_s = "3,6,12";
  int64_t seeds = 10;
  ex::XiongConfig xc;
  ex::EncDecConfig ec;
  int64_t xiong_seeds = 10;
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
    ("seeds", po::value<int64_t>(&seeds)->default_value(10), "sweep seeds per point (seed, seed+1, ...)")
    ("sweep-d-models", po::value<std::string>(&dims_s)->default_value("64,256"), "sweep widths")
    ("sweep-seed-variant", "sweep the original experiment's Pre-Norm net, without a final norm (by default the sweep's "
                           "Pre-Norm nets end with one)")
    ("xiong", "also measure an encoder-decoder Transformer at init (part 3, Xiong et al. 2020)")
    ("xiong-depths", po::value<std::string>(&xiong_s)->default_value("3,6,12"), "encoder-decoder depths (L encoder + L decoder layers)")
    ("xiong-d-model", po::value<int64_t>(&xc.d_model)->default_value(64), "encoder-decoder width")
    ("xiong-heads", po::value<int64_t>(&xc.n_heads)->default_value(4), "encoder-decoder heads")
    ("xiong-seeds", po::value<int64_t>(&xiong_seeds)->default_value(10), "encoder-decoder seeds per depth")
    ("xiong-batches", po::value<int64_t>(&ec.batches)->default_value(32), "batches averaged for the expected-loss gradient")
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
    ("quick", "tiny sizes for CI: sweep depths 4,8 x 2 seeds x d_model 8,16; encoder-decoder 1+1, 2+2 at d_model 16; "
              "training depth 2, 10 steps, lr 0.001,0.01, 1 seed");
  // clang-format on
  int threads = 0;
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  std::vector<int64_t> depths, dims, xiong_depths, train_depths;
  std::vector<double> lrs;
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
      part2(sc, depths, dims, seeds, out, flags, warned);
    }
    if (vm.count("xiong")) part3(ec, xiong_depths, xiong_seeds, out, flags, warned);
    if (vm.count("train")) part4(tc, train_depths, lrs, train_seeds, out, flags, warned);
  } catch (const std::exception& e) {
    std::cerr << kProg << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

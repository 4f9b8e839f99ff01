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
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.hpp"
#include "cli/output.hpp"
#include "cli/threads.hpp"
#include "experiments/plot.hpp"
#include "experiments/study.hpp"
#include "experiments/training.hpp"

namespace po = boost::program_options;
namespace ex = xg::experiments;
namespace cli = xg::cli;
using nlohmann::json;

namespace {

constexpr const char* kProg = "prenorm_vs_postnorm";

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

  std::cout << "=== Post-Norm vs Pre-Norm: gradient flow ===\n\n";
  std::cout << "depth: " << c.layers << " layers (d_model " << c.d_model << ", sublayer "
            << ex::sublayer_name(c.sublayer) << ", " << xg::nn::norm_kind_name(c.norm)
            << (c.final_norm ? ", Pre-Norm with a final norm" : "") << ")\ninit: " << init_desc << "\n\n";
  std::printf("%6s  %16s  %16s\n", "Layer", "Post-Norm grad", "Pre-Norm grad");
  std::printf("%s\n", std::string(42, '-').c_str());
  for (int64_t i = 0; i < c.layers; ++i)
    std::printf("Layer %lld:  %16.6f  %16.6f\n", static_cast<long long>(i + 1), r.grad_post[i], r.grad_pre[i]);
  std::printf("\nRelative to the top layer (grad[i] / grad[%lld]):\n", static_cast<long long>(c.layers));
  std::printf("%6s  %16s  %16s\n", "Layer", "Post-Norm", "Pre-Norm");
  for (int64_t i = 0; i < c.layers; ++i)
    std::printf("Layer %lld:  %16.6f  %16.6f\n", static_cast<long long>(i + 1), rel_post[i], rel_pre[i]);
  std::printf("\nThe bottom layer (Layer 1):\n");
  std::printf("  Post-Norm Layer 1 grad: %.6f\n", r.grad_post[0]);
  std::printf("  Pre-Norm  Layer 1 grad: %.6f\n", r.grad_pre[0]);
  std::printf("  Pre-Norm / Post-Norm = %.2fx\n", r.ratio_layer1());
  std::printf("\nloss: Post-Norm %.6f, Pre-Norm %.6f%s\n\n", r.loss_post, r.loss_pre,
              c.final_norm ? "" : " (the Pre-Norm output has no final norm; try --final-norm)");

  std::ostringstream csv;
  csv << "layer,post_grad,pre_grad,post_rel_top,pre_rel_top\n";
  for (int64_t i = 0; i < c.layers; ++i)
    csv << i + 1 << "," << cli::fmt("%.9g", r.grad_post[i]) << "," << cli::fmt("%.9g", r.grad_pre[i]) << ","
        << cli::fmt("%.9g", rel_post[i]) << "," << cli::fmt("%.9g", rel_pre[i]) << "\n";
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
  cli::write_text(out + "/prenorm.json", j.dump(2) + "\n");
  std::cout << "wrote " << out << "/prenorm.csv and prenorm.json\n";

  ex::PlotSpec spec;
  spec.title = "Weight-gradient norm per layer (" + std::to_string(c.layers) + " layers, d_model " +
               std::to_string(c.d_model) + ")";
  spec.xlabel = "layer";
  spec.ylabel = "||dL/dW||";
  spec.logy = true;
  spec.series.push_back({"Post-Norm", iota_1(c.layers), r.grad_post, {}, {}, false, 1});
  spec.series.push_back({"Pre-Norm", iota_1(c.layers), r.grad_pre, {}, {}, true, 2});
  report_plot(out, "prenorm", spec, warned);
}

// --- part 2 -------------------------------------------------------------------------------------
void part2(const ex::StudyConfig& c, const std::vector<int64_t>& depths, const std::vector<int64_t>& dims,
           int64_t seeds, const std::string& out, const json& flags, bool& warned) {
  std::cout << "\n=== Depth sweep: " << seeds << " seeds per point ===\n\n";
  auto points = ex::run_sweep(c, depths, dims, seeds);
  std::printf("%7s %5s  %-30s  %-30s  %-30s\n", "d_model", "depth", "Post L1 grad [q1 med q3]",
              "Pre L1 grad [q1 med q3]", "Pre/Post L1 ratio [q1 med q3]");
  std::ostringstream csv;
  csv << "d_model,depth,seeds,post_l1_q1,post_l1_median,post_l1_q3,pre_l1_q1,pre_l1_median,pre_l1_q3,"
         "ratio_q1,ratio_median,ratio_q3\n";
  json rows = json::array();
  auto q3s = [](const ex::Quartiles& q) { return cli::fmt("%.3g", q.q1) + " " + cli::fmt("%.3g", q.median) + " " + cli::fmt("%.3g", q.q3); };
  for (const auto& p : points) {
    std::printf("%7lld %5lld  %-30s  %-30s  %-30s\n", static_cast<long long>(p.d_model),
                static_cast<long long>(p.depth), q3s(p.post_layer1).c_str(), q3s(p.pre_layer1).c_str(),
                q3s(p.ratio).c_str());
    csv << p.d_model << "," << p.depth << "," << seeds;
    for (const auto* q : {&p.post_layer1, &p.pre_layer1, &p.ratio})
      csv << "," << cli::fmt("%.9g", q->q1) << "," << cli::fmt("%.9g", q->median) << "," << cli::fmt("%.9g", q->q3);
    csv << "\n";
    auto qj = [](const ex::Quartiles& q) { return json{{"q1", q.q1}, {"median", q.median}, {"q3", q.q3}}; };
    rows.push_back({{"d_model", p.d_model},
                    {"depth", p.depth},
                    {"post_layer1", qj(p.post_layer1)},
                    {"pre_layer1", qj(p.pre_layer1)},
                    {"ratio", qj(p.ratio)},
                    {"rel_top_post_median", p.rel_post_median},
                    {"rel_top_pre_median", p.rel_pre_median}});
  }
  cli::write_text(out + "/sweep.csv", csv.str());
  json j = base_json("--sweep", flags, c.seed);
  j["seeds"] = seeds;
  j["points"] = rows;
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
  for (int64_t d : dims) {
    ex::PlotSpec prof;
    prof.title = "Gradient norm relative to the top layer (median over seeds), d_model " + std::to_string(d);
    prof.xlabel = "layer";
    prof.ylabel = "grad[i] / grad[top]";
    prof.logy = true;
    int color = 0;
    for (const auto& p : points)
      if (p.d_model == d) {
        ++color;
        prof.series.push_back({"Post " + std::to_string(p.depth), iota_1(p.depth), p.rel_post_median, {}, {}, false, color});
        prof.series.push_back({"Pre " + std::to_string(p.depth), iota_1(p.depth), p.rel_pre_median, {}, {}, true, color});
      }
    report_plot(out, "sweep_profile_d" + std::to_string(d), prof, warned);
  }
}

// --- part 3 -------------------------------------------------------------------------------------
void part3(const ex::XiongConfig& xc, const std::vector<int64_t>& depths, const std::string& out, const json& flags,
           bool& warned) {
  std::cout << "\n=== Transformer blocks at init (Xiong et al. 2020): FFN W2 (fc2) weight-gradient norm per layer ===\n";
  std::cout << "d_model " << xc.d_model << ", " << xc.heads << " heads, batch " << xc.batch << " x " << xc.seq_len
            << " tokens, linear head over " << xc.vocab << " classes, cross-entropy, "
            << (xc.xavier ? "Xavier init (the paper's)" : "nn.Linear's default init") << "\n";
  std::ostringstream csv;
  csv << "depth,layer,post_ln,pre_ln\n";
  json profs = json::array();
  ex::PlotSpec spec;
  spec.title = "FFN W2 weight-gradient norm at init, Post-LN vs Pre-LN (Xiong et al. 2020, fig. 3)";
  spec.xlabel = "layer";
  spec.ylabel = "||dL/dW2||";
  spec.logy = true;
  int color = 0;
  for (int64_t depth : depths) {
    ex::XiongProfile p = ex::run_xiong(xc, depth);
    ++color;
    std::printf("\ndepth %lld\n%6s  %12s  %12s\n", static_cast<long long>(depth), "Layer", "Post-LN", "Pre-LN");
    for (int64_t i = 0; i < depth; ++i) {
      std::printf("%6lld  %12.6f  %12.6f\n", static_cast<long long>(i + 1), p.post[i], p.pre[i]);
      csv << depth << "," << i + 1 << "," << cli::fmt("%.9g", p.post[i]) << "," << cli::fmt("%.9g", p.pre[i]) << "\n";
    }
    const double top_ratio = p.post.back() / p.pre.back();
    std::printf("top/bottom: Post-LN %.2fx, Pre-LN %.2fx; top layer Post-LN / Pre-LN = %.2fx (sqrt(L) = %.2f)\n",
                p.post.back() / p.post.front(), p.pre.back() / p.pre.front(), top_ratio,
                std::sqrt(static_cast<double>(depth)));
    profs.push_back({{"depth", depth}, {"post_ln", p.post}, {"pre_ln", p.pre}, {"top_post_over_pre", top_ratio}});
    spec.series.push_back({"Post-LN " + std::to_string(depth), iota_1(depth), p.post, {}, {}, false, color});
    spec.series.push_back({"Pre-LN " + std::to_string(depth), iota_1(depth), p.pre, {}, {}, true, color});
  }
  cli::write_text(out + "/xiong.csv", csv.str());
  json j = base_json("--xiong", flags, xc.seed);
  j["d_model"] = xc.d_model;
  j["heads"] = xc.heads;
  j["init"] = xc.xavier ? "xavier_uniform, zero biases" : "nn.Linear default";
  j["profiles"] = profs;
  cli::write_text(out + "/xiong.json", j.dump(2) + "\n");
  std::cout << "\nwrote " << out << "/xiong.csv and xiong.json\n";
  report_plot(out, "xiong", spec, warned);
}

// --- part 4 -------------------------------------------------------------------------------------
void part4(const ex::TrainConfig& tc, const std::vector<int64_t>& depths, const std::vector<double>& lrs,
           const std::string& out, const json& flags, bool& warned) {
  auto corpus = ex::read_corpus(tc.corpus, 4 * tc.seq_len);
  std::cout << "\n=== Training stability: byte-level decoder LMs on " << tc.corpus << " (" << corpus.size()
            << " bytes) ===\n";
  std::cout << "d_model " << tc.d_model << ", " << tc.heads << " heads, " << tc.batch << " x " << tc.seq_len
            << " tokens per step, " << tc.steps << " steps of AdamW (no clipping), warmup " << tc.warmup
            << " steps when on\n\n";
  std::printf("%-9s %5s %8s %7s  %10s %10s  %s\n", "norm", "depth", "lr", "warmup", "first loss", "final loss",
              "status");
  std::ostringstream summary, curves;
  summary << "norm,depth,lr,warmup,first_loss,final_loss,status\n";
  curves << "norm,depth,lr,warmup,step,loss\n";
  json runs = json::array();
  double unigram = 0;
  for (int64_t depth : depths)
    for (double lr : lrs) {
      ex::PlotSpec spec;
      spec.title = "Training loss, depth " + std::to_string(depth) + ", lr " + cli::fmt("%g", lr);
      spec.xlabel = "step";
      spec.ylabel = "cross-entropy (nats/byte)";
      int color = 0;
      for (auto norm : {xg::nn::NormPosition::Post, xg::nn::NormPosition::Pre, xg::nn::NormPosition::DeepNorm}) {
        ++color;
        for (bool warmup : {false, true}) {
          ex::TrainRun r = ex::train_run(tc, corpus, norm, depth, lr, warmup);
          unigram = r.unigram_entropy;
          const char* name = xg::nn::norm_position_name(norm);
          std::printf("%-9s %5lld %8g %7s  %10.4f %10.4f  %s\n", name, static_cast<long long>(depth), lr,
                      warmup ? "yes" : "no", r.losses.front(), r.final_loss, r.status.c_str());
          std::fflush(stdout);
          summary << name << "," << depth << "," << lr << "," << (warmup ? 1 : 0) << "," << cli::fmt("%.6g", r.losses.front())
                  << "," << cli::fmt("%.6g", r.final_loss) << "," << r.status << "\n";
          for (std::size_t i = 0; i < r.losses.size(); ++i)
            curves << name << "," << depth << "," << lr << "," << (warmup ? 1 : 0) << "," << i << ","
                   << cli::fmt("%.6g", r.losses[i]) << "\n";
          runs.push_back({{"norm", name}, {"depth", depth}, {"lr", lr}, {"warmup", warmup},
                          {"final_loss", r.final_loss}, {"status", r.status}, {"losses", r.losses}});
          ex::Series s{std::string(name) + (warmup ? " + warmup" : ""), {}, {}, {}, {}, warmup, color};
          for (std::size_t i = 0; i < r.losses.size(); ++i)
            if (std::isfinite(r.losses[i])) {
              s.x.push_back(static_cast<double>(i));
              s.y.push_back(r.losses[i]);
            }
          spec.series.push_back(s);
        }
      }
      report_plot(out, "train_d" + std::to_string(depth) + "_lr" + cli::fmt("%g", lr), spec, warned);
    }
  std::printf("\n(the corpus's unigram entropy is %.4f nats/byte: \"stalled\" runs ended there)\n", unigram);
  cli::write_text(out + "/train.csv", summary.str());
  cli::write_text(out + "/train_curves.csv", curves.str());
  json j = base_json("--train", flags, tc.seed);
  j["corpus"] = tc.corpus;
  j["unigram_entropy"] = unigram;
  j["runs"] = runs;
  cli::write_text(out + "/train.json", j.dump(2) + "\n");
  std::cout << "wrote " << out << "/train.csv, train_curves.csv and train.json\n";
}

}  // namespace

int main(int argc, char** argv) {
  ex::StudyConfig c;
  std::string norm = "layernorm", sublayer = "linear", init_file, save_init, out = "prenorm_out";
  std::string depths_s = "4,8,16,32,64,80", dims_s = "4,64", xiong_s = "6,12,24";
  int64_t seeds = 10;
  ex::XiongConfig xc;
  ex::TrainConfig tc;
  std::string train_depths_s = "6,12,24", lrs_s = "0.001,0.01";
  po::options_description opts(
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
    ("heads", po::value<int64_t>(&c.heads)->default_value(1), "attention heads (attention, block sublayers)")
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
    ("sweep-d-models", po::value<std::string>(&dims_s)->default_value("4,64"), "sweep widths")
    ("xiong", "also run real Transformer blocks at init (part 3, Xiong et al. 2020)")
    ("xiong-depths", po::value<std::string>(&xiong_s)->default_value("6,12,24"), "block-study depths")
    ("xiong-d-model", po::value<int64_t>(&xc.d_model)->default_value(64), "block-study width")
    ("xiong-heads", po::value<int64_t>(&xc.heads)->default_value(4), "block-study heads")
    ("xiong-torch-init", "block study with nn.Linear's default init instead of the paper's Xavier")
    ("train", "also train Post-Norm, Pre-Norm and DeepNorm decoder LMs with and without warmup (part 4)")
    ("corpus", po::value<std::string>(&tc.corpus)->default_value(tc.corpus), "training text (bytes)")
    ("train-depths", po::value<std::string>(&train_depths_s)->default_value("6,12,24"), "training depths")
    ("train-lrs", po::value<std::string>(&lrs_s)->default_value("0.001,0.01"), "peak learning rates")
    ("train-steps", po::value<int64_t>(&tc.steps)->default_value(300), "steps per run")
    ("warmup", po::value<int64_t>(&tc.warmup)->default_value(100), "warmup steps of the runs with warmup")
    ("full", "longer training runs: 3000 steps, d_model 64, warmup 500 (unless given)")
    ("quick", "tiny sizes for CI: sweep depths 4,8 x 2 seeds x d_model 4,16; block depths 2,4 at d_model 16");
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
      std::cout << opts << "\nExample: " << kProg << " --sweep --xiong --train --out results\n";
      return 0;
    }
    c.norm = ex::parse_norm(norm);
    c.sublayer = ex::parse_sublayer(sublayer);
    if (vm.count("quick")) {
      if (vm["depths"].defaulted()) depths_s = "4,8";
      if (vm["seeds"].defaulted()) seeds = 2;
      if (vm["sweep-d-models"].defaulted()) dims_s = "4,16";
      if (vm["xiong-depths"].defaulted()) xiong_s = "2,4";
      if (vm["xiong-d-model"].defaulted()) xc.d_model = 16;
      if (vm["xiong-heads"].defaulted()) xc.heads = 2;
      xc.batch = 2;
      xc.seq_len = 8;
      if (vm["train-depths"].defaulted()) train_depths_s = "2";
      if (vm["train-steps"].defaulted()) tc.steps = 10;
      if (vm["warmup"].defaulted()) tc.warmup = 3;
      tc.d_model = 16;
      tc.seq_len = 16;
      tc.batch = 2;
    }
    if (vm.count("full")) {
      if (vm["train-steps"].defaulted()) tc.steps = 3000;
      if (vm["warmup"].defaulted()) tc.warmup = 500;
      tc.d_model = 64;
    }
    train_depths = parse_positive_ints("train-depths", train_depths_s);
    lrs = cli::parse_doubles("train-lrs", lrs_s, /*positive=*/true, /*finite=*/false);
    if (tc.steps < 1) throw cli::UsageError("--train-steps: must be at least 1, got " + std::to_string(tc.steps));
    if (tc.warmup < 1) throw cli::UsageError("--warmup: must be at least 1, got " + std::to_string(tc.warmup));
    depths = parse_positive_ints("depths", depths_s);
    dims = parse_positive_ints("sweep-d-models", dims_s);
    xiong_depths = parse_positive_ints("xiong-depths", xiong_s);
    if (seeds < 1) throw cli::UsageError("--seeds: must be at least 1, got " + std::to_string(seeds));
    if (xc.d_model < 1 || xc.heads < 1 || xc.d_model % xc.heads != 0)
      throw cli::UsageError("--xiong-heads: must be at least 1 and divide --xiong-d-model " + std::to_string(xc.d_model));
    c.validate();
  } catch (const std::exception& e) {  // po::error, UsageError, xg::Error from validation
    std::cerr << kProg << ": " << e.what() << " (see --help)\n";
    return 2;
  }
  xc.seed = c.seed;
  tc.seed = c.seed;
  xc.xavier = vm.count("xiong-torch-init") == 0;

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
    if (vm.count("sweep")) part2(c, depths, dims, seeds, out, flags, warned);
    if (vm.count("xiong")) part3(xc, xiong_depths, out, flags, warned);
    if (vm.count("train")) part4(tc, train_depths, lrs, out, flags, warned);
  } catch (const std::exception& e) {
    std::cerr << kProg << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

#include "experiments/plot.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "autograd/error.hpp"

namespace xg::experiments {

namespace {

// Single-quoted for the shell (a ' inside becomes '\'').
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Double-quoted for gnuplot.
std::string gp_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

bool plot(const std::string& dir, const std::string& stem, const PlotSpec& spec, std::string* why) {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  {
    std::ofstream dat(dir + "/" + stem + ".dat");
    if (!dat) return fail("cannot write " + dir + "/" + stem + ".dat");
    dat << std::setprecision(10);
    for (std::size_t s = 0; s < spec.series.size(); ++s) {
      const Series& ser = spec.series[s];
      check(ser.x.size() == ser.y.size(), "plot ", stem, ": series '", ser.title, "' has ", ser.x.size(),
            " x values and ", ser.y.size(), " y values");
      const bool bars = !ser.ylo.empty();
      check(!bars || (ser.ylo.size() == ser.y.size() && ser.yhi.size() == ser.y.size()), "plot ", stem,
            ": series '", ser.title, "' needs one error bar per point");
      dat << "# " << ser.title << "\n";
      for (std::size_t i = 0; i < ser.x.size(); ++i) {
        dat << ser.x[i] << " " << ser.y[i];
        if (bars) dat << " " << ser.ylo[i] << " " << ser.yhi[i];
        dat << "\n";
      }
      dat << "\n\n";  // gnuplot's `index` separator
    }
  }
  std::ostringstream body;
  body << "set title " << gp_quote(spec.title) << " noenhanced\n"
       << "set xlabel " << gp_quote(spec.xlabel) << " noenhanced\n"
       << "set ylabel " << gp_quote(spec.ylabel) << " noenhanced\n"
       << "set key outside right top noenhanced\n"
       << "set grid\n";
  if (spec.logx) body << "set logscale x 2\n";
  if (spec.logy) body << "set logscale y\nset format y \"10^{%L}\"\n";
  body << "plot ";
  for (std::size_t s = 0; s < spec.series.size(); ++s) {
    const Series& ser = spec.series[s];
    if (s) body << ", \\\n     ";
    body << gp_quote(stem + ".dat") << " index " << s;
    if (!ser.ylo.empty())
      body << " using 1:2:3:4 with yerrorlines";
    else
      body << " using 1:2 with linespoints";
    if (ser.color > 0) body << " lt " << ser.color;
    body << " lw 2 pt 7 ps 0.6 dt " << (ser.dashed ? 2 : 1) << " title " << gp_quote(ser.title);
  }
  body << "\n";
  {
    std::ofstream gp(dir + "/" + stem + ".gp");
    if (!gp) return fail("cannot write " + dir + "/" + stem + ".gp");
    gp << "# Regenerate with: gnuplot " << stem << ".gp  (in this folder)\n"
       << "set terminal pngcairo size 900,560 font \",11\"\n"
       << "set output " << gp_quote(stem + ".png") << "\n"
       << body.str()
       << "set terminal svg size 900,560 dynamic font \"sans,11\"\n"
       << "set output " << gp_quote(stem + ".svg") << "\n"
       << "replot\n"
       << "unset output\n";
  }
  if (!gnuplot_available()) return fail("gnuplot not found (install gnuplot-nox); wrote " + stem + ".dat/.gp only");
  const std::string cmd = "cd " + shell_quote(dir) + " && gnuplot " + shell_quote(stem + ".gp") + " 2>" +
                          shell_quote(stem + ".gnuplot.log");
  if (std::system(cmd.c_str()) != 0)
    return fail("gnuplot failed on " + dir + "/" + stem + ".gp (see " + stem + ".gnuplot.log)");
  std::remove((dir + "/" + stem + ".gnuplot.log").c_str());
  return true;
}

}  // namespace xg::experiments

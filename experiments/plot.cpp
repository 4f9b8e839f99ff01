// The gnuplot driver (see plot.hpp): line plots from a PlotSpec, and the script writing and
// gnuplot run that the demos' heatmaps and bar charts share.
#include "experiments/plot.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "autograd/error.hpp"

namespace xg::experiments {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string gp_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

namespace {

bool fail(std::string* why, const std::string& msg) {
  if (why) *why = msg;
  return false;
}

// Writes DIR/STEM.gp (the PNG terminal and `png_body`, then the SVG terminal and `svg_body`) and
// runs gnuplot on it in `dir`, its stderr in STEM.gnuplot.log (removed when it succeeds).
bool write_and_run(const std::string& dir, const std::string& stem, const std::string& png_terminal,
                   const std::string& png_body, const std::string& svg_terminal, const std::string& svg_body,
                   std::string* why) {
  {
    std::ofstream gp(dir + "/" + stem + ".gp");
    if (!gp) return fail(why, "cannot write " + dir + "/" + stem + ".gp");
    gp << "# Regenerate with: gnuplot " << stem << ".gp  (in this folder)\n"
       << "set terminal " << png_terminal << "\n"
       << "set output " << gp_quote(stem + ".png") << "\n"
       << png_body << "set terminal " << svg_terminal << "\n"
       << "set output " << gp_quote(stem + ".svg") << "\n"
       << svg_body << "unset output\n";
  }
  if (!gnuplot_available())
    return fail(why, "gnuplot not found (install gnuplot-nox); wrote " + stem + ".dat/.gp only");
  const std::string cmd = "cd " + shell_quote(dir) + " && gnuplot " + shell_quote(stem + ".gp") + " 2>" +
                          shell_quote(stem + ".gnuplot.log");
  if (std::system(cmd.c_str()) != 0)
    return fail(why, "gnuplot failed on " + dir + "/" + stem + ".gp (see " + stem + ".gnuplot.log)");
  std::remove((dir + "/" + stem + ".gnuplot.log").c_str());
  return true;
}

}  // namespace

bool gnuplot_available() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

bool plot(const std::string& dir, const std::string& stem, const PlotSpec& spec, std::string* why) {
  {
    std::ofstream dat(dir + "/" + stem + ".dat");
    if (!dat) return fail(why, "cannot write " + dir + "/" + stem + ".dat");
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
    // A band needs its colour named, so that the line over it matches: the series' own, or
    // its position in the plot.
    const int color = ser.color > 0 ? ser.color : ser.band ? static_cast<int>(s) + 1 : 0;
    if (ser.band && !ser.ylo.empty())
      body << gp_quote(stem + ".dat") << " index " << s << " using 1:3:4 with filledcurves lt " << color
           << " fs transparent solid 0.2 noborder notitle, \\\n     ";
    body << gp_quote(stem + ".dat") << " index " << s;
    if (!ser.ylo.empty() && !ser.band)
      body << " using 1:2:3:4 with yerrorlines";
    else
      body << " using 1:2 with " << (ser.points ? "linespoints" : "lines");
    if (color > 0) body << " lt " << color;
    body << " lw 2 pt 7 ps 0.6 dt " << (ser.dashed ? 2 : 1) << " title " << gp_quote(ser.title);
  }
  body << "\n";
  return write_and_run(dir, stem, "pngcairo size 900,560 font \",11\"", body.str(),
                       "svg size 900,560 dynamic font \"sans,11\"", "replot\n", why);
}

bool run_gnuplot_script(const std::string& dir, const std::string& stem, const std::string& body, int width,
                        int height, std::string* why) {
  const std::string size = std::to_string(width) + "," + std::to_string(height);
  return write_and_run(dir, stem, "pngcairo size " + size + " font \",10\"", body + "unset multiplot\n",
                       "svg size " + size + " dynamic font \"sans,10\"", body + "unset multiplot\n", why);
}

}  // namespace xg::experiments

// Plots through gnuplot (Debian's gnuplot-nox): a data file and a gnuplot script are
// written into the output folder, then `gnuplot <script>` makes <stem>.png and <stem>.svg.
// The data and script stay next to the images, so a plot can be restyled by hand.
#pragma once

#include <string>
#include <vector>

namespace xg::experiments {

struct Series {
  std::string title;
  std::vector<double> x, y;
  std::vector<double> ylo, yhi;  // optional error bars (e.g. intervals); same length as y
  bool dashed = false;
  int color = 0;  // gnuplot line type for the colour (1, 2, ...); 0: the next one
  bool points = true;  // a marker at each point (false: the line alone, for long noisy curves)
  bool band = false;   // draw ylo..yhi as a translucent band under the line instead of error bars
};

struct PlotSpec {
  std::string title, xlabel, ylabel;
  bool logx = false, logy = false;
  std::vector<Series> series;
};

// True when a `gnuplot` executable is on the PATH.
bool gnuplot_available();

// Writes DIR/STEM.dat and DIR/STEM.gp and runs gnuplot on them. Returns true when gnuplot
// ran and succeeded; otherwise false with a one-line reason in *why.
bool plot(const std::string& dir, const std::string& stem, const PlotSpec& spec, std::string* why = nullptr);

// The plumbing under plot() and the demos' plots (experiments/demos/demo_plot.cpp):
// `s` single-quoted for the shell (a ' inside becomes '\''),
std::string shell_quote(const std::string& s);
// and double-quoted for gnuplot (", \ and newlines escaped).
std::string gp_quote(const std::string& s);

// Writes DIR/STEM.gp drawing `body` (gnuplot commands, possibly a multiplot) into STEM.png, then
// again into STEM.svg, both width x height pixels, and runs gnuplot on it in `dir`. Returns as
// plot() does; gnuplot's messages stay in DIR/STEM.gnuplot.log when it fails.
bool run_gnuplot_script(const std::string& dir, const std::string& stem, const std::string& body, int width,
                        int height, std::string* why = nullptr);

}  // namespace xg::experiments

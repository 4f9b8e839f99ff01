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
  std::vector<double> ylo, yhi;  // optional error bars (e.g. quartiles); same length as y
  bool dashed = false;
  int color = 0;  // gnuplot line type for the colour (1, 2, ...); 0: the next one
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

}  // namespace xg::experiments

// Heatmap grids (`matrix with image`, one multiplot panel per map) and clustered bar charts
// (`histograms`), run through experiments/plot.cpp's run_gnuplot_script.
#include "experiments/demos/demo_plot.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "autograd/error.hpp"
#include "experiments/plot.hpp"

namespace xg::experiments {

bool plot_heatmaps(const std::string& dir, const std::string& stem, const HeatmapGrid& grid, std::string* why) {
  check(!grid.panels.empty() && grid.columns > 0, "plot_heatmaps ", stem, ": needs at least one panel");
  {
    std::ofstream dat(dir + "/" + stem + ".dat");
    if (!dat) {
      if (why) *why = "cannot write " + dir + "/" + stem + ".dat";
      return false;
    }
    dat << std::setprecision(8);
    for (const Heatmap& h : grid.panels) {
      check(!h.values.empty(), "plot_heatmaps ", stem, ": panel '", h.title, "' is empty");
      dat << "# " << h.title << "\n";
      for (const auto& row : h.values) {
        check(row.size() == h.values[0].size(), "plot_heatmaps ", stem, ": panel '", h.title, "' is ragged");
        for (std::size_t j = 0; j < row.size(); ++j) dat << (j ? " " : "") << row[j];
        dat << "\n";
      }
      dat << "\n\n";
    }
  }
  const int cols = grid.columns;
  const int rows = static_cast<int>((grid.panels.size() + cols - 1) / cols);
  std::ostringstream body;
  body << "set multiplot layout " << rows << "," << cols << " title " << gp_quote(grid.title) << " noenhanced\n"
       << "set xlabel " << gp_quote(grid.xlabel) << " noenhanced\n"
       << "set ylabel " << gp_quote(grid.ylabel) << " noenhanced\n"
       << "set size ratio -1\nunset key\nset tics out\n";
  // One colour scale per kind of panel, shared by all panels of that kind: a panel
  // scaled to its own range made a nearly flat map, 0.0620-0.0629, look striped.
  double lim = 0, lo = INFINITY, hi = -INFINITY;
  for (const Heatmap& h : grid.panels)
    for (const auto& row : h.values)
      for (double v : row) {
        if (h.diverging) {
          lim = std::max(lim, std::fabs(v));
        } else {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
  if (!(hi > lo)) hi = lo + 1;
  for (std::size_t p = 0; p < grid.panels.size(); ++p) {
    const Heatmap& h = grid.panels[p];
    const std::size_t n_rows = h.values.size(), n_cols = h.values[0].size();
    if (h.diverging) {
      body << "set palette defined (0 \"#2166ac\", 1 \"#f7f7f7\", 2 \"#b2182b\")\n"
           << "set cbrange [" << -lim << ":" << (lim > 0 ? lim : 1) << "]\n";
    } else {
      body << "set palette defined (0 \"#ffffcc\", 1 \"#fd8d3c\", 2 \"#800026\")\n"
           << "set cbrange [" << lo << ":" << hi << "]\n";
    }
    body << "set title " << gp_quote(h.title) << " noenhanced\n"
         << "set xrange [-0.5:" << n_cols - 0.5 << "]\n"
         << "set yrange [" << n_rows - 0.5 << ":-0.5]\n"
         << "plot " << gp_quote(stem + ".dat") << " index " << p << " matrix with image\n";
  }
  const int width = 400 * cols + 80, height = 340 * rows + 40;
  return run_gnuplot_script(dir, stem, body.str(), width, height, why);
}

bool plot_bars(const std::string& dir, const std::string& stem, const BarChart& chart, std::string* why) {
  check(!chart.categories.empty() && chart.values.size() == chart.categories.size(), "plot_bars ", stem,
        ": needs one row of values per category");
  for (const auto& row : chart.values)
    check(row.size() == chart.series.size(), "plot_bars ", stem, ": needs one value per series in each category");
  {
    std::ofstream dat(dir + "/" + stem + ".dat");
    if (!dat) {
      if (why) *why = "cannot write " + dir + "/" + stem + ".dat";
      return false;
    }
    dat << std::setprecision(10) << "# category";
    for (const auto& s : chart.series) dat << " | " << s;
    dat << "\n";
    for (std::size_t c = 0; c < chart.categories.size(); ++c) {
      dat << gp_quote(chart.categories[c]);
      for (double v : chart.values[c]) dat << " " << v;
      dat << "\n";
    }
  }
  std::ostringstream body;
  body << "set title " << gp_quote(chart.title) << " noenhanced\n"
       << "set ylabel " << gp_quote(chart.ylabel) << " noenhanced\n"
       << "set style data histograms\nset style histogram clustered gap 1\n"
       << "set style fill solid 0.85 border -1\nset boxwidth 0.9\n"
       << "set key outside right top noenhanced\nset grid ytics\nset yrange [" << (chart.logy ? "*" : "0") << ":*]\n"
       << "set offsets 0, 0, graph 0.08, 0\n"
       << "set xtics noenhanced\n";
  if (chart.logy) body << "set logscale y\n";
  body << "plot ";
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    if (s) body << ", \\\n     ";
    body << gp_quote(stem + ".dat") << " using " << s + 2 << (s == 0 ? ":xtic(1)" : "") << " title "
         << gp_quote(chart.series[s]) << " lt " << s + 1;
    body << ", '' using ($0 + " << (static_cast<double>(s) + 0.5 - chart.series.size() / 2.0) / (chart.series.size() + 1.0) << "):"
         << s + 2 << ":(sprintf(\"%.3g\", $" << s + 2 << ")) with labels offset 0,0.6 font \",8\" notitle";
  }
  body << "\n";
  return run_gnuplot_script(dir, stem, body.str(), 900, 560, why);
}

}  // namespace xg::experiments

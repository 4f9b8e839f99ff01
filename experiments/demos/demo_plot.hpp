// Heatmap grids and bar charts through gnuplot, beside the line plots of experiments/plot.hpp:
// DIR/STEM.dat + DIR/STEM.gp are written, then gnuplot makes DIR/STEM.png and DIR/STEM.svg.
#pragma once

#include <string>
#include <vector>

namespace xg::experiments {

// One panel: a rows x cols matrix drawn `with image` (row 0 at the top, as imshow draws it).
struct Heatmap {
  std::string title;
  std::vector<std::vector<double>> values;  // [rows][cols]
  bool diverging = false;  // blue-white-red around 0 (scores); otherwise white-yellow-red (weights)
};

struct HeatmapGrid {
  std::string title, xlabel, ylabel;
  int columns = 3;  // panels per row
  std::vector<Heatmap> panels;
};

// Bars grouped by category: one bar per series in each category.
struct BarChart {
  std::string title, ylabel;
  bool logy = false;
  std::vector<std::string> categories;
  std::vector<std::string> series;          // legend entries
  std::vector<std::vector<double>> values;  // [category][series]
};

// As plot(): true when gnuplot ran, otherwise false with a one-line reason in *why.
bool plot_heatmaps(const std::string& dir, const std::string& stem, const HeatmapGrid& grid,
                   std::string* why = nullptr);
bool plot_bars(const std::string& dir, const std::string& stem, const BarChart& chart, std::string* why = nullptr);

}  // namespace xg::experiments

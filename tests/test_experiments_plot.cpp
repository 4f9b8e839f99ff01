// experiments/plot.cpp: the gnuplot driver writes its data and script, and (with gnuplot
// installed, as scripts/setup.sh does) PNG and SVG images.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "cli_run.hpp"
#include "experiments/plot.hpp"
#include "torch_fixture.hpp"

namespace ex = xg::experiments;

namespace {

using xg::test::slurp;

bool nonempty_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
}

ex::PlotSpec two_series() {
  ex::PlotSpec spec;
  spec.title = "it's \"quoted\"";
  spec.xlabel = "layer";
  spec.ylabel = "norm";
  spec.logy = true;
  spec.series.push_back({"Post", {1, 2, 3}, {0.5, 0.25, 0.125}, {}, {}, false, 1});
  spec.series.push_back({"Pre", {1, 2, 3}, {4, 4, 4}, {3, 3, 3}, {5, 5, 5}, true, 2});
  spec.series.push_back({"curve", {1, 2, 3}, {1, 1, 1}, {}, {}, false, 3, false});  // no markers
  ex::Series band{"band", {1, 2, 3}, {2, 2, 2}, {1.5, 1.5, 1.5}, {2.5, 2.5, 2.5}, false, 4};
  band.band = true;  // the interval as a translucent band under the line
  spec.series.push_back(band);
  return spec;
}

}  // namespace

TEST(ExperimentsPlot, WritesDataScriptAndImages) {
  const std::string dir = XGRAD_BINARY_DIR;
  std::string why;
  bool ok = ex::plot(dir, "test_experiments_plot", two_series(), &why);
  const std::string dat = slurp(dir + "/test_experiments_plot.dat");
  EXPECT_NE(dat.find("# Post\n1 0.5\n2 0.25\n3 0.125\n\n\n# Pre\n1 4 3 5\n"), std::string::npos) << dat;
  const std::string gp = slurp(dir + "/test_experiments_plot.gp");
  EXPECT_NE(gp.find("set logscale y"), std::string::npos) << gp;
  EXPECT_NE(gp.find("index 0 using 1:2 with linespoints lt 1"), std::string::npos) << gp;
  EXPECT_NE(gp.find("index 1 using 1:2:3:4 with yerrorlines lt 2"), std::string::npos) << gp;
  EXPECT_NE(gp.find("index 2 using 1:2 with lines lt 3"), std::string::npos) << gp;
  EXPECT_NE(gp.find("index 3 using 1:3:4 with filledcurves lt 4 fs transparent solid 0.2 noborder notitle"),
            std::string::npos)
      << gp;
  EXPECT_NE(gp.find("index 3 using 1:2 with linespoints lt 4"), std::string::npos) << gp;
  EXPECT_NE(gp.find("set title \"it's \\\"quoted\\\"\""), std::string::npos) << gp;
  EXPECT_NE(gp.find("set terminal svg"), std::string::npos) << gp;
  EXPECT_EQ(ok, ex::gnuplot_available()) << why;
  if (ex::gnuplot_available()) {
    EXPECT_TRUE(nonempty_file(dir + "/test_experiments_plot.png"));
    EXPECT_TRUE(nonempty_file(dir + "/test_experiments_plot.svg"));
  } else {
    EXPECT_NE(why.find("gnuplot not found"), std::string::npos) << why;
  }
}

TEST(ExperimentsPlot, Errors) {
  ex::PlotSpec spec = two_series();
  spec.series[0].y.pop_back();
  EXPECT_XG_ERROR(ex::plot(XGRAD_BINARY_DIR, "test_experiments_plot_bad", spec),
                  "series 'Post' has 3 x values and 2 y values");
  spec = two_series();
  spec.series[1].yhi.pop_back();
  EXPECT_XG_ERROR(ex::plot(XGRAD_BINARY_DIR, "test_experiments_plot_bad", spec), "one error bar per point");
  std::string why;
  EXPECT_FALSE(ex::plot("/nonexistent/folder", "x", two_series(), &why));
  EXPECT_NE(why.find("cannot write /nonexistent/folder/x.dat"), std::string::npos) << why;
}

TEST(ExperimentsPlot, Quoting) {
  EXPECT_EQ(ex::shell_quote("a b"), "'a b'");
  EXPECT_EQ(ex::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(ex::gp_quote("plain"), "\"plain\"");
  EXPECT_EQ(ex::gp_quote("a \"b\" c\\d"), "\"a \\\"b\\\" c\\\\d\"");
  EXPECT_EQ(ex::gp_quote("two\nlines"), "\"two\\nlines\"");
}

TEST(ExperimentsPlot, RunGnuplotScriptDrawsTheBodyIntoPngThenSvg) {
  const std::string dir = XGRAD_BINARY_DIR;
  const std::string stem = "test_experiments_plot_script";
  const std::string body = "set multiplot layout 1,2\nplot x\nplot x*x\n";
  std::string why;
  bool ok = ex::run_gnuplot_script(dir, stem, body, 640, 320, &why);
  const std::string gp = slurp(dir + "/" + stem + ".gp");
  EXPECT_EQ(gp, "# Regenerate with: gnuplot " + stem + ".gp  (in this folder)\n"
                "set terminal pngcairo size 640,320 font \",10\"\n"
                "set output \"" + stem + ".png\"\n" + body + "unset multiplot\n"
                "set terminal svg size 640,320 dynamic font \"sans,10\"\n"
                "set output \"" + stem + ".svg\"\n" + body + "unset multiplot\n"
                "unset output\n");
  EXPECT_EQ(ok, ex::gnuplot_available()) << why;
  if (ex::gnuplot_available()) {
    EXPECT_TRUE(nonempty_file(dir + "/" + stem + ".png"));
    EXPECT_TRUE(nonempty_file(dir + "/" + stem + ".svg"));
    // A script gnuplot rejects: false, with the log kept beside it.
    EXPECT_FALSE(ex::run_gnuplot_script(dir, stem + "_bad", "plot with nonsense\n", 640, 320, &why));
    EXPECT_EQ(why, "gnuplot failed on " + dir + "/" + stem + "_bad.gp (see " + stem + "_bad.gnuplot.log)");
    EXPECT_TRUE(nonempty_file(dir + "/" + stem + "_bad.gnuplot.log"));
  }
  EXPECT_FALSE(ex::run_gnuplot_script("/nonexistent/folder", "x", body, 640, 320, &why));
  EXPECT_EQ(why, "cannot write /nonexistent/folder/x.gp");
}

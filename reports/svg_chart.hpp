#pragma once
// Static SVG line and scatter charts for reports: no script, no external resources, readable without a browser's
// help (title, axis labels, ticks, legend). Every drawn series is one <path class="series" data-series="..."> so
// tests can find the data in the DOM.
#include <string>
#include <string_view>
#include <vector>

namespace qtune::reports {

enum class AxisScale { Linear, Log2, Log10 };

struct ChartPoint {
  double x = 0;
  double y = 0;
};

struct ChartSeries {
  std::string name;
  std::vector<ChartPoint> points;  // points that a log axis cannot show (<= 0, not finite) are left out
  bool connect = true;             // false: markers only (scatter)
  bool markers = true;
  bool dashed = false;
  std::string color;  // empty: the palette colour of the series' index
};

struct Chart {
  std::string id;  // unique in a page: letters, digits and '-'
  std::string title;
  std::string x_label;
  std::string y_label;
  AxisScale x_scale = AxisScale::Log2;
  AxisScale y_scale = AxisScale::Linear;
  std::vector<ChartSeries> series;
  int width = 650;
  int plot_height = 300;

  bool has_data() const;  // at least one point some series can draw
};

// The chart as an <svg> element (with the SVG namespace, so the same text is a valid standalone .svg file).
std::string render_svg(const Chart& chart);

// A colour of the fixed palette (cycles).
std::string_view palette_color(std::size_t index);
// Short axis numbers: 1, 2.5, 0.01, 1k, 16k, 1.5M; on a log2 axis powers of two from 1024 up read 1K, 2K, 16K.
std::string short_number(double value, AxisScale scale = AxisScale::Linear);

}  // namespace qtune::reports

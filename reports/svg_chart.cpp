#include "reports/svg_chart.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "kernels/text_escape.hpp"

namespace qtune::reports {

namespace {

constexpr int kMarginLeft = 78;
constexpr int kMarginRight = 24;
constexpr int kMarginTop = 40;
constexpr int kMarginBottom = 52;
constexpr int kLegendRowHeight = 18;
constexpr int kLegendSwatch = 30;         // the line sample and the gap before the name
constexpr double kLegendCharWidth = 7.0;  // a generous average width of a 12 px sans-serif character

// The legend name as drawn: cut with "…" when it is wider than `width` pixels (data-series keeps the whole name).
std::string legend_text(const std::string& name, double width) {
  const auto fits = static_cast<std::size_t>(std::max(4.0, width / kLegendCharWidth));
  if (name.size() <= fits) return name;
  std::size_t cut = fits - 1;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 sequence
  return name.substr(0, cut) + "\xE2\x80\xA6";
}

std::string coordinate(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

bool drawable(double value, AxisScale scale) { return std::isfinite(value) && (scale == AxisScale::Linear || value > 0); }

double transform(double value, AxisScale scale) {
  switch (scale) {
    case AxisScale::Linear: return value;
    case AxisScale::Log2: return std::log2(value);
    case AxisScale::Log10: return std::log10(value);
  }
  return value;
}

struct Axis {
  AxisScale scale = AxisScale::Linear;
  double low = 0;   // in transformed units
  double high = 1;
  std::vector<double> ticks;  // data values
};

// The axis range and ticks for data values in [low, high] (both drawable).
Axis make_axis(double low, double high, AxisScale scale) {
  Axis axis;
  axis.scale = scale;
  if (scale == AxisScale::Linear) {
    if (low > 0) low = 0;  // throughput and time axes start at zero
    if (high <= low) high = low + 1;
    const double raw_step = (high - low) / 6.0;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
    double step = magnitude;
    for (const double factor : {1.0, 2.0, 2.5, 5.0, 10.0}) {
      step = factor * magnitude;
      if (step >= raw_step) break;
    }
    axis.low = std::floor(low / step) * step;
    axis.high = std::ceil(high / step) * step;
    for (double tick = axis.low; tick <= axis.high + step * 1e-9; tick += step) axis.ticks.push_back(std::abs(tick) < step * 1e-9 ? 0.0 : tick);
    return axis;
  }
  const double base = scale == AxisScale::Log2 ? 2.0 : 10.0;
  double low_exponent = std::floor(transform(low, scale) + 1e-9);
  double high_exponent = std::ceil(transform(high, scale) - 1e-9);
  if (high_exponent <= low_exponent) high_exponent = low_exponent + 1;
  axis.low = low_exponent;
  axis.high = high_exponent;
  const double decades = high_exponent - low_exponent;
  const int stride = scale == AxisScale::Log2 ? std::max(1, static_cast<int>(std::ceil(decades / 14.0))) : 1;
  for (double exponent = low_exponent; exponent <= high_exponent + 1e-9; exponent += stride) {
    const double value = std::pow(base, exponent);
    axis.ticks.push_back(value);
    if (scale == AxisScale::Log10 && decades <= 2 && exponent < high_exponent) {
      axis.ticks.push_back(2 * value);
      axis.ticks.push_back(5 * value);
    }
  }
  std::sort(axis.ticks.begin(), axis.ticks.end());
  return axis;
}

double position(const Axis& axis, double value, double from, double to) {
  const double t = (transform(value, axis.scale) - axis.low) / (axis.high - axis.low);
  return from + t * (to - from);
}

}  // namespace

std::string_view palette_color(std::size_t index) {
  static constexpr std::array<std::string_view, 10> colors = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                                              "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  return colors[index % colors.size()];
}

std::string short_number(double value, AxisScale scale) {
  char text[32];
  const double magnitude = std::abs(value);
  if (scale == AxisScale::Log2 && magnitude >= 1024 && std::fmod(magnitude, 1024) == 0) {
    std::snprintf(text, sizeof(text), "%gK", value / 1024);
    return text;
  }
  if (magnitude >= 1e6) {
    std::snprintf(text, sizeof(text), "%gM", value / 1e6);
  } else if (magnitude >= 1e3) {
    std::snprintf(text, sizeof(text), "%gk", value / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%g", value);
  }
  return text;
}

bool Chart::has_data() const {
  for (const ChartSeries& one : series)
    for (const ChartPoint& point : one.points)
      if (drawable(point.x, x_scale) && drawable(point.y, y_scale)) return true;
  return false;
}

std::string render_svg(const Chart& chart) {
  double x_low = std::numeric_limits<double>::infinity(), x_high = -x_low;
  double y_low = x_low, y_high = -x_low;
  std::vector<std::vector<ChartPoint>> visible(chart.series.size());
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    for (const ChartPoint& point : chart.series[s].points) {
      if (!drawable(point.x, chart.x_scale) || !drawable(point.y, chart.y_scale)) continue;
      visible[s].push_back(point);
      x_low = std::min(x_low, point.x), x_high = std::max(x_high, point.x);
      y_low = std::min(y_low, point.y), y_high = std::max(y_high, point.y);
    }
  }
  const bool empty = !std::isfinite(x_low);
  if (empty) {
    x_low = 1, x_high = 2, y_low = 1, y_high = 2;
  }
  const Axis x_axis = make_axis(x_low, x_high, chart.x_scale);
  const Axis y_axis = make_axis(y_low, y_high, chart.y_scale);

  std::size_t legend_entries = 0;
  std::size_t longest_name = 0;
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    if (visible[s].empty()) continue;
    ++legend_entries;
    longest_name = std::max(longest_name, chart.series[s].name.size());
  }
  const int width = chart.width;
  const double legend_width = width - kMarginRight - kMarginLeft;
  // Two columns only when every name fits in half the width: a longer name would run into its neighbour.
  const int legend_columns = static_cast<double>(longest_name) * kLegendCharWidth + kLegendSwatch <= legend_width / 2 - 8 ? 2 : 1;
  const double column_width = legend_width / legend_columns;
  const int legend_rows = static_cast<int>((legend_entries + legend_columns - 1) / legend_columns);
  const int height = kMarginTop + chart.plot_height + kMarginBottom + legend_rows * kLegendRowHeight + 8;
  const double left = kMarginLeft, right = width - kMarginRight;
  const double top = kMarginTop, bottom = kMarginTop + chart.plot_height;

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" id=\"" << xml_escape(chart.id) << "\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height << "\" role=\"img\" font-family=\"sans-serif\" font-size=\"12\""
      << " data-series-count=\"" << legend_entries << "\">\n";
  svg << "<title>" << xml_escape(chart.title) << "</title>\n";
  svg << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height << "\" fill=\"#ffffff\"/>\n";
  svg << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(chart.title) << "</text>\n";

  // Grid and ticks.
  svg << "<g class=\"axes\" stroke=\"#dddddd\" stroke-width=\"1\">\n";
  for (const double tick : x_axis.ticks) {
    const double x = position(x_axis, tick, left, right);
    svg << "<line x1=\"" << coordinate(x) << "\" y1=\"" << top << "\" x2=\"" << coordinate(x) << "\" y2=\"" << bottom << "\"/>\n";
  }
  for (const double tick : y_axis.ticks) {
    const double y = position(y_axis, tick, bottom, top);
    svg << "<line x1=\"" << left << "\" y1=\"" << coordinate(y) << "\" x2=\"" << right << "\" y2=\"" << coordinate(y) << "\"/>\n";
  }
  svg << "</g>\n<g class=\"ticks\" fill=\"#333333\">\n";
  for (const double tick : x_axis.ticks) {
    svg << "<text x=\"" << coordinate(position(x_axis, tick, left, right)) << "\" y=\"" << bottom + 16 << "\" text-anchor=\"middle\">"
        << short_number(tick, chart.x_scale) << "</text>\n";
  }
  for (const double tick : y_axis.ticks) {
    svg << "<text x=\"" << left - 6 << "\" y=\"" << coordinate(position(y_axis, tick, bottom, top) + 4) << "\" text-anchor=\"end\">"
        << short_number(tick, chart.y_scale) << "</text>\n";
  }
  svg << "</g>\n";
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << right - left << "\" height=\"" << bottom - top
      << "\" fill=\"none\" stroke=\"#333333\"/>\n";
  svg << "<text class=\"x-label\" x=\"" << coordinate((left + right) / 2) << "\" y=\"" << bottom + 36 << "\" text-anchor=\"middle\">"
      << xml_escape(chart.x_label) << "</text>\n";
  svg << "<text class=\"y-label\" transform=\"translate(18," << coordinate((top + bottom) / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
      << xml_escape(chart.y_label) << "</text>\n";
  if (empty) {
    svg << "<text x=\"" << coordinate((left + right) / 2) << "\" y=\"" << coordinate((top + bottom) / 2)
        << "\" text-anchor=\"middle\" fill=\"#999999\">no data</text>\n";
  }

  // Series (the first drawn last, so the tuned line stays on top of those it ties with), then the legend in order.
  std::vector<std::string> drawn;
  std::ostringstream legend;
  std::size_t legend_index = 0;
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const ChartSeries& series = chart.series[s];
    const std::vector<ChartPoint>& points = visible[s];
    if (points.empty()) continue;
    const std::string color = series.color.empty() ? std::string(palette_color(s)) : series.color;
    std::string line_path;
    std::string marker_path;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const std::string x = coordinate(position(x_axis, points[i].x, left, right));
      const std::string y = coordinate(position(y_axis, points[i].y, bottom, top));
      line_path += (i == 0 ? "M" : " L") + x + " " + y;
      marker_path += (marker_path.empty() ? "M" : " M") + x + " " + y + " m -3 0 a 3 3 0 1 0 6 0 a 3 3 0 1 0 -6 0";
    }
    const std::string name = xml_escape(series.name);
    std::ostringstream paths;
    if (series.connect) {
      paths << "<path class=\"series\" data-series=\"" << name << "\" d=\"" << line_path << "\" fill=\"none\" stroke=\"" << color
            << "\" stroke-width=\"2\"" << (series.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n";
      if (series.markers) paths << "<path class=\"markers\" d=\"" << marker_path << "\" fill=\"" << color << "\"/>\n";
    } else {
      paths << "<path class=\"series\" data-series=\"" << name << "\" d=\"" << marker_path << "\" fill=\"" << color << "\" fill-opacity=\"0.75\"/>\n";
    }
    drawn.push_back(paths.str());
    const auto column = legend_index % static_cast<std::size_t>(legend_columns);
    const double legend_x = left + static_cast<double>(column) * column_width;
    const double legend_y = bottom + kMarginBottom + static_cast<double>(legend_index / static_cast<std::size_t>(legend_columns)) * kLegendRowHeight + 4;
    legend << "<g class=\"legend-entry\"><line x1=\"" << coordinate(legend_x) << "\" y1=\"" << coordinate(legend_y) << "\" x2=\""
        << coordinate(legend_x + 24) << "\" y2=\"" << coordinate(legend_y) << "\" stroke=\"" << color << "\" stroke-width=\"3\""
        << (series.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/><text x=\"" << coordinate(legend_x + 30) << "\" y=\""
        << coordinate(legend_y + 4) << "\">" << xml_escape(legend_text(series.name, column_width - kLegendSwatch - 8)) << "</text></g>\n";
    ++legend_index;
  }
  for (auto paths = drawn.rbegin(); paths != drawn.rend(); ++paths) svg << *paths;
  svg << legend.str() << "</svg>\n";
  return svg.str();
}

}  // namespace qtune::reports

#include "reports/report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>

#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "kernels/text_escape.hpp"
#include "reports/external_import.hpp"
#include "reports/selection_table.hpp"
#include "reports/svg_chart.hpp"
#include "reports/table.hpp"
#include "reports/tuning_data.hpp"
#include "search/gpu_profile.hpp"

namespace qtune::reports {

namespace fs = std::filesystem;

namespace {

// A tuned cell counts as a win against the heuristic when at least this much faster; any slowdown is a loss.
constexpr double kWinThreshold = 1.01;
constexpr double kLossReportedThreshold = 0.99;  // losses beyond 1% break the table's promise and are marked

// ---------------------------------------------------------------------------------------------------- document model

struct Block {
  enum class Kind { Heading, Paragraph, TableBlock, ChartBlock, Bullets };
  Kind kind = Kind::Paragraph;
  int level = 2;
  std::string text;
  std::string anchor;
  std::optional<Table> table;
  std::optional<Chart> chart;
  std::vector<std::string> items;
};

class Document {
 public:
  void heading(int level, std::string text, std::string anchor = "") {
    Block block;
    block.kind = Block::Kind::Heading;
    block.level = level;
    block.text = std::move(text);
    block.anchor = std::move(anchor);
    blocks_.push_back(std::move(block));
  }
  void paragraph(std::string text) {
    Block block;
    block.kind = Block::Kind::Paragraph;
    block.text = std::move(text);
    blocks_.push_back(std::move(block));
  }
  void table(Table table, std::string caption = "") {
    Block block;
    block.kind = Block::Kind::TableBlock;
    block.text = std::move(caption);
    block.table = std::move(table);
    blocks_.push_back(std::move(block));
  }
  void chart(Chart chart) {
    chart_ids_.push_back(chart.id);
    Block block;
    block.kind = Block::Kind::ChartBlock;
    block.chart = std::move(chart);
    blocks_.push_back(std::move(block));
  }
  void bullets(std::vector<std::string> items) {
    Block block;
    block.kind = Block::Kind::Bullets;
    block.items = std::move(items);
    blocks_.push_back(std::move(block));
  }
  const std::vector<Block>& blocks() const { return blocks_; }
  const std::vector<std::string>& chart_ids() const { return chart_ids_; }

 private:
  std::vector<Block> blocks_;
  std::vector<std::string> chart_ids_;
};

constexpr std::string_view kCss = R"(body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1340px;color:#222;line-height:1.4}
h1{font-size:26px;border-bottom:2px solid #333;padding-bottom:6px}h2{font-size:21px;margin-top:36px;border-bottom:1px solid #999}
h3{font-size:17px;margin-top:28px}h4{font-size:15px;margin-top:22px}
table{border-collapse:collapse;margin:8px 0 16px 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}caption{caption-side:top;text-align:left;font-weight:bold;padding:4px 0}
.charts{display:flex;flex-wrap:wrap;gap:12px}.table-wrap{overflow-x:auto;max-width:100%}.charts svg{border:1px solid #e0e0e0}p.note{color:#555;font-size:13px}
p.empty{font-size:18px;color:#a00;border:1px solid #a00;padding:12px}
td.long{overflow-wrap:anywhere;min-width:12em;text-align:left;font-size:12px})";

constexpr std::size_t kLongCell = 24;

std::string html_of(const Document& document, const std::string& title) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << xml_escape(title) << "</title>\n<style>\n"
       << kCss << "\n</style>\n</head>\n<body>\n";
  bool in_charts = false;
  for (const Block& block : document.blocks()) {
    const bool is_chart = block.kind == Block::Kind::ChartBlock;
    if (in_charts && !is_chart) html << "</div>\n";
    if (!in_charts && is_chart) html << "<div class=\"charts\">\n";
    in_charts = is_chart;
    switch (block.kind) {
      case Block::Kind::Heading:
        html << "<h" << block.level << (block.anchor.empty() ? "" : " id=\"" + xml_escape(block.anchor) + "\"") << ">"
             << xml_escape(block.text) << "</h" << block.level << ">\n";
        break;
      case Block::Kind::Paragraph: html << "<p" << (block.text.rfind("No ", 0) == 0 ? " class=\"empty\"" : "") << ">" << xml_escape(block.text) << "</p>\n"; break;
      case Block::Kind::TableBlock: {
        html << "<div class=\"table-wrap\"><table>\n";
        if (!block.text.empty()) html << "<caption>" << xml_escape(block.text) << "</caption>\n";
        html << "<thead><tr>";
        for (const std::string& column : block.table->columns()) html << "<th>" << xml_escape(column) << "</th>";
        html << "</tr></thead>\n<tbody>\n";
        for (const auto& row : block.table->rows()) {
          html << "<tr>";
          // Long text (configs, labels) wraps, so that the numbers beside it stay on a laptop screen.
          for (const std::string& cell : row) html << (cell.size() > kLongCell ? "<td class=\"long\">" : "<td>") << xml_escape(cell) << "</td>";
          html << "</tr>\n";
        }
        html << "</tbody>\n</table></div>\n";
        break;
      }
      case Block::Kind::ChartBlock: html << render_svg(*block.chart); break;
      case Block::Kind::Bullets:
        html << "<ul>\n";
        for (const std::string& item : block.items) html << "<li>" << xml_escape(item) << "</li>\n";
        html << "</ul>\n";
        break;
    }
  }
  if (in_charts) html << "</div>\n";
  html << "</body>\n</html>\n";
  return html.str();
}

std::string markdown_of(const Document& document) {
  std::ostringstream md;
  for (const Block& block : document.blocks()) {
    switch (block.kind) {
      case Block::Kind::Heading: md << std::string(static_cast<std::size_t>(block.level), '#') << " " << markdown_escape(block.text) << "\n\n"; break;
      case Block::Kind::Paragraph: md << markdown_escape(block.text) << "\n\n"; break;
      case Block::Kind::TableBlock: {
        if (!block.text.empty()) md << "**" << markdown_escape(block.text) << "**\n\n";
        const auto& columns = block.table->columns();
        md << "|";
        for (const auto& column : columns) md << " " << markdown_escape(column) << " |";
        md << "\n|";
        for (std::size_t c = 0; c < columns.size(); ++c) md << (c == 0 ? "---|" : "---:|");
        md << "\n";
        for (const auto& row : block.table->rows()) {
          md << "|";
          for (const auto& cell : row) md << " " << markdown_escape(cell) << " |";
          md << "\n";
        }
        md << "\n";
        break;
      }
      case Block::Kind::ChartBlock: md << "![" << markdown_escape(block.chart->title) << "](charts/" << block.chart->id << ".svg)\n\n"; break;
      case Block::Kind::Bullets:
        for (const std::string& item : block.items) md << "- " << markdown_escape(item) << "\n";
        md << "\n";
        break;
    }
  }
  return md.str();
}

// ---------------------------------------------------------------------------------------------------- numbers

std::string microseconds(double value) { return fixed(value, value < 10 ? 3 : value < 1000 ? 2 : 1); }
std::string ratio_text(double value) { return fixed(value, 3) + "x"; }
std::string percent(double fraction) { return (fraction >= 0 ? "+" : "") + fixed(100 * fraction, 1) + "%"; }

std::string slug(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

// ---------------------------------------------------------------------------------------------------- series

enum class SeriesKind { Tuned, Heuristic, Baseline, External };
std::string_view kind_name(SeriesKind kind) {
  switch (kind) {
    case SeriesKind::Tuned: return "tuned";
    case SeriesKind::Heuristic: return "heuristic";
    case SeriesKind::Baseline: return "baseline";
    case SeriesKind::External: return "external";
  }
  return "?";
}

struct Series {
  std::string name;
  SeriesKind kind = SeriesKind::Tuned;
  std::string timing;  // how its times were taken
  std::map<std::int64_t, double> time_us;
  std::map<std::int64_t, ProblemCost> cost;
  std::map<std::int64_t, std::string> config;
  std::map<std::int64_t, std::string> family;  // the kernel family of each tuned winner
};

constexpr std::string_view kQtuneTiming = "CUPTI kernel time, median, cold L2 (qtune)";

struct Section {
  ShapeKey key;
  std::vector<Series> series;  // tuned, heuristic, baselines, external, in that order
  const Series* find(SeriesKind kind) const {
    for (const Series& one : series)
      if (one.kind == kind) return &one;
    return nullptr;
  }
  // Per M, the fastest of the cuBLASLt baselines measured (on this format or the dense GEMM of the same shape).
  std::map<std::int64_t, double> fastest_cublaslt() const {
    std::map<std::int64_t, double> fastest;
    for (const Series& one : series) {
      if (one.kind != SeriesKind::Baseline || one.name.rfind("cublaslt", 0) != 0) continue;
      for (const auto& [m, time] : one.time_us) {
        const auto [position, inserted] = fastest.try_emplace(m, time);
        if (!inserted) position->second = std::min(position->second, time);
      }
    }
    return fastest;
  }
};

std::string config_text(const TuningData& data, std::int64_t config) {
  const db::KernelConfigRecord& record = data.config(config);
  try {
    return to_kernel_config(record).to_string();
  } catch (const InputError&) {
    return record.family + ":" + record.params_json;
  }
}

// The series of one section while its cells are added, found by name in log time (a store may hold many labels).
class SeriesSet {
 public:
  Series& named(const std::string& name, SeriesKind kind, const std::string& timing) {
    const auto [found, inserted] = index_.emplace(name, series_.size());
    if (inserted) series_.push_back(Series{name, kind, timing, {}, {}, {}, {}});
    return series_[found->second];
  }
  // Tuned, heuristic, baselines, external; by name within each kind.
  std::vector<Series> ordered() && {
    std::stable_sort(series_.begin(), series_.end(), [](const Series& a, const Series& b) {
      if (a.kind != b.kind) return static_cast<int>(a.kind) < static_cast<int>(b.kind);
      return a.name < b.name;
    });
    return std::move(series_);
  }

 private:
  std::vector<Series> series_;
  std::map<std::string, std::size_t> index_;
};

// Adds one cell's results; `suffix` names the problem when it is a dense GEMM shown beside a quantized format.
void add_cell(SeriesSet& series, const Cell& cell, const TuningData& data, const std::string& suffix) {
  const std::int64_t m = cell.problem.m;
  const ProblemCost cost = problem_cost(cell.problem);
  auto put = [&](Series& one, double time) {
    one.time_us[m] = time;
    one.cost[m] = cost;
  };
  if (cell.winner) {
    Series& tuned = series.named("tuned table" + suffix, SeriesKind::Tuned, std::string(kQtuneTiming));
    put(tuned, cell.winner->median_us);
    tuned.config[m] = config_text(data, db::id_value(cell.winner->config));
    tuned.family[m] = data.config(db::id_value(cell.winner->config)).family;
  }
  if (const auto time = cell.heuristic_us()) {
    Series& heuristic = series.named("heuristic" + suffix, SeriesKind::Heuristic, std::string(kQtuneTiming));
    put(heuristic, *time);
    heuristic.config[m] = config_text(data, *cell.heuristic_config);
  }
  for (const auto& [family, time] : cell.baseline_us) {
    // A peer measured live by qtune (bench --baseline humming-..., docs/peers.md) is told apart from the same peer's
    // imported file, which is labelled with its own timing.
    const bool live_peer = family.rfind("cublaslt-", 0) != 0;
    put(series.named(family + suffix + (live_peer ? " (live)" : ""), SeriesKind::Baseline, std::string(kQtuneTiming)), time);
  }
  for (const db::ExternalResultRecord& result : cell.external) {
    const std::string legend = timing_legend(timing_of(result));
    // The label alone where it already names its source (Humming's files name the kernel: marlin, torch, ...).
    const bool label_names_source = result.source == "humming" || result.label.find(result.source) != std::string::npos;
    const std::string label = label_names_source ? result.label : result.source + " " + result.label;
    put(series.named(label + suffix + " (" + legend + ")", SeriesKind::External, legend), result.time_us);
  }
}

// ---------------------------------------------------------------------------------------------------- GPU limits

struct Roof {
  std::optional<double> bandwidth_gbps;
  std::string bandwidth_source;
  std::optional<search::GpuProfile> profile;
};

// A bandwidth a run measured and wrote in its notes ("... measured: ... = 4123 GB/s"), e.g. `qtune bench`'s copy test.
std::optional<double> measured_bandwidth(const std::string& notes) {
  const auto measured = notes.find("measured");
  const auto unit = notes.find(" GB/s", measured == std::string::npos ? 0 : measured);
  if (measured == std::string::npos || unit == std::string::npos || notes.find("failed") != std::string::npos) return std::nullopt;
  std::size_t start = unit;
  while (start > 0 && (std::isdigit(static_cast<unsigned char>(notes[start - 1])) || notes[start - 1] == '.')) --start;
  if (start == unit) return std::nullopt;
  const double value = std::strtod(notes.substr(start, unit - start).c_str(), nullptr);
  return value > 0 ? std::optional<double>(value) : std::nullopt;
}

Roof roof_for(const GpuData& gpu) {
  Roof roof;
  try {
    roof.profile = search::gpu_profile_by_name(gpu.gpu);
  } catch (const InputError&) {
    roof.profile.reset();  // a GPU without a profile: no datasheet roof
  }
  for (const db::RunRecord& run : gpu.runs) {
    if (const auto bandwidth = measured_bandwidth(run.notes)) {
      if (!roof.bandwidth_gbps || *bandwidth > *roof.bandwidth_gbps) {
        roof.bandwidth_gbps = bandwidth;
        roof.bandwidth_source = "measured " + fixed(*bandwidth, 0) + " GB/s (run " + run.uuid.substr(0, 8) + ")";
      }
    }
  }
  if (!roof.bandwidth_gbps && roof.profile && roof.profile->memory_bandwidth_gbps > 0) {
    roof.bandwidth_gbps = roof.profile->memory_bandwidth_gbps;
    roof.bandwidth_source = "datasheet " + fixed(*roof.bandwidth_gbps, 0) + " GB/s";
  }
  return roof;
}

std::optional<double> peak_tflops(const Roof& roof, const std::string& format) {
  if (!roof.profile) return std::nullopt;
  if (format == "f16") return roof.profile->peak_tflops(search::TensorType::F16);
  if (format == "bf16") return roof.profile->peak_tflops(search::TensorType::BF16);
  return roof.profile->peak_tflops(search::tensor_type_for(FormatSpec::parse(format).activation));
}

// ---------------------------------------------------------------------------------------------------- the report

struct Comparison {
  std::vector<double> ratios;  // reference time / tuned time, per cell
};

struct VerdictRow {
  ShapeKey key;
  std::int64_t m = 0;
  std::string tuned_config;
  std::string heuristic_config;
  double tuned_us = 0;
  double heuristic_us = 0;
  double speedup = 0;
  std::string verdict;
};

class ReportBuilder {
 public:
  ReportBuilder(const TuningData& data, const ReportOptions& options)
      : data_(data),
        options_(options),
        cells_csv_({"gpu", "format", "n", "k", "m", "series", "kind", "timing", "time_us", "gbps", "tflops", "config"}),
        speedups_csv_({"gpu", "format", "n", "k", "m", "reference", "reference_us", "tuned_us", "speedup"}),
        verdicts_csv_({"gpu", "format", "n", "k", "m", "tuned_config", "heuristic_config", "tuned_us", "heuristic_us", "speedup", "verdict"}),
        summary_csv_({"gpu", "format", "reference", "cells", "geomean_speedup"}) {}

  void build() {
    const std::string name = options_.database_label.empty() ? std::string("the database") : options_.database_label;
    document_.heading(1, "qtune report: " + name);
    bool any = false;
    for (const auto& [gpu_key, gpu] : data_.gpus) any = any || !gpu.cells.empty();
    if (!any) {
      empty_ = true;
      message_ = "No measurements, winners or external results in " + name + filter_text() +
                 ": run `qtune tune` (or `qtune bench`, `qtune import`) with this database first.";
      document_.paragraph(message_);
      return;
    }
    std::map<std::string, std::vector<Section>> sections;
    for (const auto& [gpu_key, gpu] : data_.gpus) sections.emplace(gpu_key, sections_of(gpu));
    headline(sections);
    document_.paragraph(
        "qtune's own times (tuned table, heuristic, baselines) are CUPTI kernel durations: the median of adaptive repetitions "
        "with a cold L2, measured side by side. External results keep the timing method they were measured with, named in every "
        "legend: Humming's published files are means of CUDA-event times that include launch overhead, so at small M they read "
        "slower than the kernel alone. GB/s counts the least memory each GEMM moves (A, W and their scales, C once); TFLOP/s is "
        "2 M N K / time. Speedups are the other series' time / the tuned table's time (> 1: the tuned table is faster).");
    for (const auto& [gpu_key, gpu] : data_.gpus) build_gpu(gpu, sections.at(gpu_key));
    std::size_t charts = document_.chart_ids().size();
    message_ = "report of " + std::to_string(data_.gpus.size()) + " GPU(s), " + std::to_string(sections_) + " shape(s), " +
               std::to_string(charts) + " chart(s)";
  }

  const Document& document() const { return document_; }
  const Table& cells_csv() const { return cells_csv_; }
  const Table& speedups_csv() const { return speedups_csv_; }
  const Table& verdicts_csv() const { return verdicts_csv_; }
  const Table& summary_csv() const { return summary_csv_; }
  bool empty() const { return empty_; }
  const std::string& message() const { return message_; }

 private:
  std::string filter_text() const {
    std::string text;
    if (options_.gpu) text += " for GPU " + *options_.gpu;
    if (!options_.formats.empty()) {
      text += " for format(s) ";
      for (std::size_t i = 0; i < options_.formats.size(); ++i) text += (i ? ", " : "") + options_.formats[i];
    }
    return text;
  }

  std::vector<Section> sections_of(const GpuData& gpu) const {
    const auto groups = gpu.shapes();
    std::vector<Section> sections;
    std::set<std::pair<std::int64_t, std::int64_t>> quantized_shapes;
    for (const auto& [key, cells] : groups) {
      if (!is_dense_format(key.format)) quantized_shapes.emplace(key.n, key.k);
    }
    for (const auto& [key, cells] : groups) {
      const bool dense = is_dense_format(key.format);
      if (dense && quantized_shapes.count({key.n, key.k}) > 0) continue;  // shown beside the quantized formats
      SeriesSet series;
      for (const Cell* cell : cells) add_cell(series, *cell, data_, "");
      if (!dense) {
        for (const auto& [other_key, other_cells] : groups) {
          if (!is_dense_format(other_key.format) || other_key.n != key.n || other_key.k != key.k) continue;
          for (const Cell* cell : other_cells) add_cell(series, *cell, data_, " [" + other_key.format + " dense]");
        }
      }
      sections.push_back(Section{key, std::move(series).ordered()});
    }
    return sections;
  }

  // What a user asks first: per GPU and shape, how much faster the tuned table is than the heuristic and cuBLASLt.
  void headline(const std::map<std::string, std::vector<Section>>& sections) {
    document_.heading(2, "Headline: the tuned table against the heuristic and cuBLASLt", unique_id({"headline"}));
    Table table({"GPU", "format", "shape N x K", "M", "winner families", "vs heuristic", "vs cuBLASLt", "won vs heuristic", "won vs cuBLASLt"});
    bool cublaslt_missing = false;
    for (const auto& [gpu, gpu_sections] : sections) {
      for (const Section& section : gpu_sections) {
        const Series* tuned = section.find(SeriesKind::Tuned);
        if (tuned == nullptr || tuned->time_us.empty()) continue;
        const Series* heuristic = section.find(SeriesKind::Heuristic);
        const std::map<std::int64_t, double> cublaslt = section.fastest_cublaslt();
        cublaslt_missing = cublaslt_missing || cublaslt.empty();
        std::set<std::string> families;
        for (const auto& [m, family] : tuned->family) families.insert(family);
        std::string family_text;
        for (const std::string& family : families) family_text += (family_text.empty() ? "" : ", ") + family;
        const std::string ms = std::to_string(tuned->time_us.begin()->first) + "-" + std::to_string(tuned->time_us.rbegin()->first);
        const auto [heuristic_mean, heuristic_won] = compare(*tuned, heuristic ? heuristic->time_us : std::map<std::int64_t, double>{});
        const auto [cublaslt_mean, cublaslt_won] = compare(*tuned, cublaslt);
        table.add_row({gpu, section.key.format, std::to_string(section.key.n) + " x " + std::to_string(section.key.k), ms, family_text,
                       heuristic_mean, cublaslt_mean, heuristic_won, cublaslt_won});
      }
    }
    if (table.rows().empty()) {
      document_.paragraph("No tuned winners yet: run `qtune tune` to compare a tuned table with the heuristic and cuBLASLt.");
      return;
    }
    document_.table(std::move(table), "Geometric-mean speedup over the tuned M buckets (> 1: the tuned table is faster) and the cells it wins");
    document_.paragraph("A cell is won at " + percent(kWinThreshold - 1) + " or more. cuBLASLt: the fastest cuBLASLt baseline measured per cell" +
                        std::string(cublaslt_missing ? "; where none was measured, run `qtune bench --baseline cublaslt-f16 --format F "
                                                       "--shape N,K --m ...` into the database (scripts/run.sh does)." : "."));
  }

  // The geometric-mean speedup of `tuned` over `reference` where both were measured, and "won of compared".
  static std::pair<std::string, std::string> compare(const Series& tuned, const std::map<std::int64_t, double>& reference) {
    std::vector<double> ratios;
    int won = 0;
    for (const auto& [m, time] : reference) {
      const auto tuned_time = tuned.time_us.find(m);
      if (tuned_time == tuned.time_us.end()) continue;
      ratios.push_back(time / tuned_time->second);
      won += ratios.back() >= kWinThreshold ? 1 : 0;
    }
    const auto mean = geometric_mean(ratios);
    if (!mean) return {"-", "-"};
    return {ratio_text(*mean), std::to_string(won) + " of " + std::to_string(ratios.size())};
  }

  void build_gpu(const GpuData& gpu, const std::vector<Section>& sections) {
    const Roof roof = roof_for(gpu);
    const std::string gpu_title = roof.profile ? gpu.gpu + " (" + roof.profile->display_name + ")" : gpu.gpu;
    document_.heading(2, "GPU " + gpu_title, unique_id({"gpu", gpu.gpu}));
    runs_table(gpu);
    sections_ += static_cast<int>(sections.size());

    std::map<std::string, std::vector<const Section*>> by_format;
    for (const Section& section : sections) by_format[section.key.format].push_back(&section);

    summary(gpu, by_format);
    std::vector<VerdictRow> verdicts;
    for (const auto& [format, format_sections] : by_format) {
      document_.heading(3, "Format " + format, unique_id({"format", gpu.gpu, format}));
      roofline(gpu, roof, format, format_sections);
      for (const Section* section : format_sections) shape_section(gpu, *section, verdicts);
    }
    verdict_section(gpu, verdicts);
    external_section(gpu);
  }

  void runs_table(const GpuData& gpu) {
    if (gpu.runs.empty()) {
      document_.paragraph("No qtune runs measured on this GPU; only imported external results are shown.");
      return;
    }
    Table runs({"run", "kind", "status", "started", "finished", "qtune", "git", "GPU", "driver", "CUDA", "host", "shard"});
    for (const db::RunRecord& run : gpu.runs) {
      runs.add_row({run.uuid.substr(0, 8), run.kind, std::string(db::to_string(run.status)), run.started_at, run.finished_at.value_or("-"),
                    run.tool_version, run.git_sha, run.gpu_name, run.driver_version, run.cuda_version, run.host, run.shard.empty() ? "-" : run.shard});
    }
    document_.table(std::move(runs), "Runs");
  }

  void summary(const GpuData& gpu, const std::map<std::string, std::vector<const Section*>>& by_format) {
    document_.heading(3, "Summary", unique_id({"summary", gpu.gpu}));
    std::set<std::string> references;
    for (const auto& [format, sections] : by_format)
      for (const Section* section : sections)
        for (const Series& series : section->series)
          if (series.kind != SeriesKind::Tuned) references.insert(series.name);
    std::vector<std::string> columns = {"format", "shapes", "tuned cells", "wins", "ties", "losses"};
    for (const std::string& reference : references) columns.push_back("vs " + reference);
    Table table(columns);
    for (const auto& [format, sections] : by_format) {
      int cells = 0, wins = 0, ties = 0, losses = 0;
      std::map<std::string, std::vector<double>> ratios;
      for (const Section* section : sections) {
        const Series* tuned = section->find(SeriesKind::Tuned);
        if (tuned == nullptr) continue;
        cells += static_cast<int>(tuned->time_us.size());
        for (const Series& series : section->series) {
          if (series.kind == SeriesKind::Tuned) continue;
          for (const auto& [m, time] : series.time_us) {
            const auto tuned_time = tuned->time_us.find(m);
            if (tuned_time == tuned->time_us.end()) continue;
            const double ratio = time / tuned_time->second;
            ratios[series.name].push_back(ratio);
            if (series.kind == SeriesKind::Heuristic) {
              (ratio >= kWinThreshold ? wins : ratio < 1.0 ? losses : ties) += 1;
            }
          }
        }
      }
      std::vector<std::string> row = {format, std::to_string(sections.size()), std::to_string(cells), std::to_string(wins),
                                      std::to_string(ties), std::to_string(losses)};
      for (const std::string& reference : references) {
        const auto mean = geometric_mean(ratios[reference]);
        row.push_back(mean ? ratio_text(*mean) + " (" + std::to_string(ratios[reference].size()) + ")" : "-");
        if (mean) summary_csv_.add_row({gpu.gpu, format, reference, std::to_string(ratios[reference].size()), fixed(*mean, 4)});
      }
      table.add_row(std::move(row));
    }
    document_.table(std::move(table), "Geometric-mean speedup of the tuned table over each series (cells compared)");
    document_.paragraph("Wins: the tuned table is at least " + percent(kWinThreshold - 1) +
                        " faster than the heuristic; ties: within that; losses: slower at all.");
  }

  void roofline(const GpuData& gpu, const Roof& roof, const std::string& format, const std::vector<const Section*>& sections) {
    Chart chart;
    chart.id = unique_id({"roofline", gpu.gpu, format});
    chart.title = "Roofline " + format + " on " + gpu.gpu;
    chart.x_label = "arithmetic intensity (FLOP/byte, log)";
    chart.y_label = "achieved TFLOP/s (log)";
    chart.x_scale = AxisScale::Log10;
    chart.y_scale = AxisScale::Log10;
    std::map<std::string, ChartSeries> points;
    std::vector<std::string> order;
    double x_low = std::numeric_limits<double>::infinity(), x_high = 0;
    for (const Section* section : sections) {
      for (const Series& series : section->series) {
        if (points.count(series.name) == 0) {
          order.push_back(series.name);
          points[series.name] = ChartSeries{series.name, {}, false, true, false, ""};
        }
        for (const auto& [m, time] : series.time_us) {
          const ProblemCost& cost = series.cost.at(m);
          const double intensity = cost.arithmetic_intensity();
          points[series.name].points.push_back({intensity, cost.flops / (time * 1e-6) / 1e12});
          x_low = std::min(x_low, intensity);
          x_high = std::max(x_high, intensity);
        }
      }
    }
    for (std::size_t i = 0; i < order.size(); ++i) {
      ChartSeries series = points[order[i]];
      series.color = std::string(palette_color(i));
      chart.series.push_back(std::move(series));
    }
    const std::optional<double> peak = peak_tflops(roof, format);
    std::vector<std::string> notes;
    if (roof.bandwidth_gbps && std::isfinite(x_low)) {
      const double bandwidth = *roof.bandwidth_gbps;
      const double low = x_low / 2, high = x_high * 2;
      ChartSeries memory{"memory roof: " + roof.bandwidth_source, {}, true, false, true, "#555555"};
      const double ridge = peak ? *peak * 1000 / bandwidth : high;
      memory.points.push_back({low, low * bandwidth / 1000});
      memory.points.push_back({std::min(ridge, high * 4), std::min(ridge, high * 4) * bandwidth / 1000});
      chart.series.push_back(memory);
      if (peak) {
        ChartSeries compute{"compute roof: " + fixed(*peak, 0) + " TFLOP/s dense (datasheet)", {}, true, false, true, "#000000"};
        compute.points.push_back({std::max(ridge, low), *peak});
        compute.points.push_back({std::max(ridge * 2, high), *peak});
        chart.series.push_back(compute);
      } else {
        notes.push_back("no datasheet peak for this format's tensor-core type on " + gpu.gpu + ": compute roof not drawn");
      }
    } else {
      notes.push_back("no GPU profile or measured bandwidth for " + gpu.gpu + ": roofs not drawn");
    }
    document_.chart(std::move(chart));
    for (const std::string& note : notes) document_.paragraph(note);
  }

  Chart shape_chart(const GpuData& gpu, const Section& section, const std::string& what) {
    Chart chart;
    const ShapeKey& key = section.key;
    chart.id = unique_id({what, gpu.gpu, key.format, "n" + std::to_string(key.n), "k" + std::to_string(key.k)});
    chart.x_label = "M (tokens, log2)";
    chart.x_scale = AxisScale::Log2;
    const std::string shape = key.format + " N=" + std::to_string(key.n) + " K=" + std::to_string(key.k);
    if (what == "time") {
      chart.title = "Time " + shape;
      chart.y_label = "time (us, log)";
      chart.y_scale = AxisScale::Log10;
    } else if (what == "bandwidth") {
      chart.title = "Bandwidth " + shape;
      chart.y_label = "achieved GB/s";
    } else {
      chart.title = "Throughput " + shape;
      chart.y_label = "achieved TFLOP/s";
    }
    for (std::size_t i = 0; i < section.series.size(); ++i) {
      const Series& series = section.series[i];
      ChartSeries line{series.name, {}, true, true, series.kind == SeriesKind::External, std::string(palette_color(i))};
      for (const auto& [m, time] : series.time_us) {
        const ProblemCost& cost = series.cost.at(m);
        double y = time;
        if (what == "bandwidth") y = cost.bytes / (time * 1e-6) / 1e9;
        if (what == "tflops") y = cost.flops / (time * 1e-6) / 1e12;
        line.points.push_back({static_cast<double>(m), y});
      }
      chart.series.push_back(std::move(line));
    }
    return chart;
  }

  void shape_section(const GpuData& gpu, const Section& section, std::vector<VerdictRow>& verdicts) {
    const ShapeKey& key = section.key;
    document_.heading(4, key.format + " N=" + std::to_string(key.n) + " K=" + std::to_string(key.k),
                      unique_id({"shape", gpu.gpu, key.format, "n" + std::to_string(key.n), "k" + std::to_string(key.k)}));
    for (const std::string what : {"time", "bandwidth", "tflops"}) document_.chart(shape_chart(gpu, section, what));

    for (const Series& series : section.series) {
      for (const auto& [m, time] : series.time_us) {
        const ProblemCost& cost = series.cost.at(m);
        const auto config = series.config.find(m);
        cells_csv_.add_row({gpu.gpu, key.format, std::to_string(key.n), std::to_string(key.k), std::to_string(m), series.name,
                            std::string(kind_name(series.kind)), series.timing, fixed(time, 4),
                            fixed(cost.bytes / (time * 1e-6) / 1e9, 2), fixed(cost.flops / (time * 1e-6) / 1e12, 3),
                            config == series.config.end() ? "" : config->second});
      }
    }

    const Series* tuned = section.find(SeriesKind::Tuned);
    const Series* heuristic = section.find(SeriesKind::Heuristic);
    std::set<std::int64_t> ms;
    for (const Series& series : section.series)
      for (const auto& [m, time] : series.time_us) ms.insert(m);

    std::vector<std::string> columns = {"M"};
    if (tuned != nullptr) columns.push_back("tuned family");
    for (const Series& series : section.series) columns.push_back(series.name + " (us)");
    std::vector<const Series*> references;
    if (tuned != nullptr) {
      for (const Series& series : section.series) {
        if (series.kind == SeriesKind::Tuned) continue;
        references.push_back(&series);
        columns.push_back("speedup vs " + series.name);
      }
      columns.push_back("tuned config");
      if (heuristic != nullptr) columns.push_back("heuristic config");
    }
    Table table(columns);
    std::map<const Series*, std::vector<double>> ratios;
    for (const std::int64_t m : ms) {
      std::vector<std::string> row = {std::to_string(m)};
      if (tuned != nullptr) {
        const auto family = tuned->family.find(m);
        row.push_back(family == tuned->family.end() ? "-" : family->second);
      }
      for (const Series& series : section.series) {
        const auto time = series.time_us.find(m);
        row.push_back(time == series.time_us.end() ? "-" : microseconds(time->second));
      }
      if (tuned != nullptr) {
        const auto tuned_time = tuned->time_us.find(m);
        for (const Series* reference : references) {
          const auto time = reference->time_us.find(m);
          if (tuned_time == tuned->time_us.end() || time == reference->time_us.end()) {
            row.push_back("-");
            continue;
          }
          const double ratio = time->second / tuned_time->second;
          ratios[reference].push_back(ratio);
          row.push_back(ratio_text(ratio));
          speedups_csv_.add_row({gpu.gpu, key.format, std::to_string(key.n), std::to_string(key.k), std::to_string(m), reference->name,
                                 fixed(time->second, 4), fixed(tuned_time->second, 4), fixed(ratio, 4)});
          if (reference == heuristic) {
            VerdictRow verdict{key, m, tuned->config.at(m), heuristic->config.at(m), tuned_time->second, time->second, ratio, ""};
            verdict.verdict = ratio >= kWinThreshold ? "win" : ratio >= 1.0 ? "tie" : ratio >= kLossReportedThreshold ? "loss" : "loss > 1%";
            verdicts_csv_.add_row({gpu.gpu, key.format, std::to_string(key.n), std::to_string(key.k), std::to_string(m), verdict.tuned_config,
                                   verdict.heuristic_config, fixed(verdict.tuned_us, 4), fixed(verdict.heuristic_us, 4),
                                   fixed(ratio, 4), verdict.verdict});
            verdicts.push_back(std::move(verdict));
          }
        }
        const auto config = tuned->config.find(m);
        row.push_back(config == tuned->config.end() ? "-" : config->second);
        if (heuristic != nullptr) {
          const auto heuristic_config = heuristic->config.find(m);
          row.push_back(heuristic_config == heuristic->config.end() ? "-" : heuristic_config->second);
        }
      }
      table.add_row(std::move(row));
    }
    if (tuned != nullptr && !references.empty()) {
      std::vector<std::string> row = {"geomean", ""};
      for (std::size_t i = 0; i < section.series.size(); ++i) row.push_back("");
      for (const Series* reference : references) {
        const auto mean = geometric_mean(ratios[reference]);
        row.push_back(mean ? ratio_text(*mean) : "-");
      }
      row.push_back("");
      if (heuristic != nullptr) row.push_back("");
      table.add_row(std::move(row));
    }
    document_.table(std::move(table), "Times and speedups of the tuned table");
  }

  void verdict_section(const GpuData& gpu, const std::vector<VerdictRow>& verdicts) {
    document_.heading(3, "Tuned table against the heuristic", unique_id({"verdicts", gpu.gpu}));
    if (verdicts.empty()) {
      document_.paragraph("No cell has both a tuned winner and a measured heuristic on this GPU.");
      return;
    }
    int ties = 0;
    Table wins({"format", "N", "K", "M", "tuned config", "heuristic config", "tuned (us)", "heuristic (us)", "speedup"});
    Table losses({"format", "N", "K", "M", "tuned config", "heuristic config", "tuned (us)", "heuristic (us)", "speedup", "note"});
    for (const VerdictRow& row : verdicts) {
      std::vector<std::string> cells = {row.key.format, std::to_string(row.key.n), std::to_string(row.key.k), std::to_string(row.m),
                                        row.tuned_config, row.heuristic_config, microseconds(row.tuned_us), microseconds(row.heuristic_us),
                                        ratio_text(row.speedup)};
      if (row.verdict == "win") {
        wins.add_row(std::move(cells));
      } else if (row.verdict == "tie") {
        ++ties;
      } else {
        cells.push_back(row.verdict == "loss > 1%" ? "slower by more than 1%" : "within 1%");
        losses.add_row(std::move(cells));
      }
    }
    document_.paragraph(std::to_string(wins.rows().size()) + " win(s), " + std::to_string(ties) + " tie(s) (within " +
                        percent(kWinThreshold - 1) + "), " + std::to_string(losses.rows().size()) + " loss(es) of " +
                        std::to_string(verdicts.size()) + " cells.");
    if (!wins.rows().empty()) document_.table(std::move(wins), "Cells where the tuned table wins");
    if (!losses.rows().empty()) {
      document_.table(std::move(losses), "Cells where the tuned table loses");
    } else {
      document_.paragraph("The tuned table is nowhere slower than the heuristic.");
    }
  }

  void external_section(const GpuData& gpu) {
    Table table({"source", "label", "timing", "file", "formats", "results"});
    std::map<std::tuple<std::string, std::string, std::string, std::string>, std::pair<std::set<std::string>, int>> groups;
    for (const Cell& cell : gpu.cells) {
      for (const db::ExternalResultRecord& result : cell.external) {
        std::string file;
        const nlohmann::json notes = nlohmann::json::parse(result.notes, nullptr, false);
        if (notes.is_object() && notes.contains("file") && notes["file"].is_string()) file = notes["file"].get<std::string>();
        auto& group = groups[{result.source, result.label, timing_legend(timing_of(result)), file}];
        group.first.insert(cell.problem.format);
        ++group.second;
      }
    }
    if (groups.empty()) return;
    document_.heading(3, "Imported external results", unique_id({"external", gpu.gpu}));
    for (const auto& [key, group] : groups) {
      std::string formats;
      for (const std::string& format : group.first) formats += (formats.empty() ? "" : ", ") + format;
      table.add_row({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key).empty() ? "-" : std::get<3>(key), formats,
                     std::to_string(group.second)});
    }
    document_.table(std::move(table), "Imported with `qtune import`; not measured by qtune");
  }

  // An HTML id (and chart file name) from free text such as a GPU name: each part slugged and cut short, and a
  // counter appended when another element already has it ("Foo GPU" and "foo-gpu" both slug to "foo-gpu").
  std::string unique_id(std::initializer_list<std::string> parts) {
    constexpr std::size_t kPartLength = 40;
    std::string id;
    for (const std::string& part : parts) {
      std::string piece = slug(part).substr(0, kPartLength);
      while (!piece.empty() && piece.back() == '-') piece.pop_back();
      if (!piece.empty()) id += (id.empty() ? "" : "-") + piece;
    }
    if (id.empty()) id = "id";
    std::string candidate = id;
    for (int suffix = 2; !ids_.insert(candidate).second; ++suffix) candidate = id + "-" + std::to_string(suffix);
    return candidate;
  }

  const TuningData& data_;
  const ReportOptions& options_;
  std::set<std::string> ids_;
  Document document_;
  Table cells_csv_;
  Table speedups_csv_;
  Table verdicts_csv_;
  Table summary_csv_;
  int sections_ = 0;
  bool empty_ = false;
  std::string message_;
};

std::string csv_text(const Table& table) {
  std::ostringstream out;
  table.print_csv(out);
  return out.str();
}

}  // namespace

ReportResult write_report(db::Store& store, const fs::path& directory, const ReportOptions& options) {
  DataFilter filter;
  filter.gpu = options.gpu;
  filter.formats = options.formats;
  const TuningData data = load_tuning_data(store, filter);
  ReportBuilder builder(data, options);
  builder.build();

  ReportResult result;
  result.empty = builder.empty();
  result.message = builder.message();
  result.chart_ids = builder.document().chart_ids();
  std::vector<FileText> files;
  auto add = [&](const fs::path& relative, std::string text) {
    files.push_back({directory / relative, std::move(text)});
    result.files.push_back(relative);
  };
  const std::string title = "qtune report" + (options.database_label.empty() ? std::string() : ": " + options.database_label);
  add("index.html", html_of(builder.document(), title));
  add("report.md", markdown_of(builder.document()));
  for (const Block& block : builder.document().blocks()) {
    if (block.kind == Block::Kind::ChartBlock) {
      add(fs::path("charts") / (block.chart->id + ".svg"), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + render_svg(*block.chart));
    }
  }
  add("cells.csv", csv_text(builder.cells_csv()));
  add("speedups.csv", csv_text(builder.speedups_csv()));
  add("tuned_vs_heuristic.csv", csv_text(builder.verdicts_csv()));
  add("summary.csv", csv_text(builder.summary_csv()));

  // The whole report or nothing: folders this call created are removed again when a file cannot be written.
  std::vector<fs::path> created;
  for (const fs::path& folder : {directory, directory / "charts"}) {
    std::error_code error;
    if (fs::is_directory(folder, error)) continue;
    fs::create_directories(folder, error);
    if (error) QTUNE_LIBRARY_ERROR("system", "cannot create " + folder.string() + ": " + error.message());
    created.push_back(folder);
  }
  try {
    write_files_atomically(files);
  } catch (...) {
    std::error_code ignored;
    for (auto folder = created.rbegin(); folder != created.rend(); ++folder) fs::remove(*folder, ignored);
    throw;
  }
  return result;
}

}  // namespace qtune::reports

#pragma once
// `qtune report`: a store's results as a self-contained HTML page (inline SVG charts and CSS, no script, no network),
// the same content as Markdown (charts as SVG files beside it) and CSV files for spreadsheets.
//
// For each GPU, format and shape: time, bandwidth and TFLOP/s against M for the tuned winners, the heuristic, each
// baseline and each imported external result; a roofline per format; speedup tables with geometric means; and the
// cells where the tuned table wins or loses against the heuristic.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"

namespace qtune::reports {

struct ReportOptions {
  std::optional<std::string> gpu;    // a GPU key or name; empty: every GPU with results
  std::vector<std::string> formats;  // canonical format texts; empty: every format
  std::string database_label;        // how the page names the store ("qtune.db")
};

struct ReportResult {
  std::vector<std::filesystem::path> files;  // every file written, relative to the report directory
  std::vector<std::string> chart_ids;        // every chart of the page, in page order
  bool empty = false;                        // the store had nothing to report; the page says so
  std::string message;                       // one line for people
};

// Writes index.html, report.md, charts/*.svg and *.csv into `directory` (created if missing; files replaced).
ReportResult write_report(db::Store& store, const std::filesystem::path& directory, const ReportOptions& options = {});

}  // namespace qtune::reports

// `qtune report`: the database as a self-contained HTML page with inline SVG charts, the same as Markdown, and CSV.
#include <iostream>
#include <string>

#include "db/store.hpp"
#include "reports/report.hpp"
#include "reports/tuning_data.hpp"
#include "tuner/cli/commands.hpp"

namespace qtune::cli {

namespace {

struct ReportCommandOptions {
  std::string db_path = "qtune.db";
  std::string directory = "report";
  std::string gpu;
  std::string formats;
};

void run_report(const ReportCommandOptions& options) {
  db::Store store = db::Store::open_read_only(options.db_path);
  reports::ReportOptions report_options;
  if (!options.gpu.empty()) report_options.gpu = options.gpu;
  if (!options.formats.empty()) report_options.formats = reports::parse_format_list(options.formats);
  report_options.database_label = std::filesystem::path(options.db_path).filename().string();
  const reports::ReportResult result = reports::write_report(store, options.directory, report_options);
  std::cout << result.message << "\n"
            << "wrote " << (std::filesystem::path(options.directory) / "index.html").string() << ", report.md, "
            << result.chart_ids.size() << " chart SVG(s) and 4 CSV files in " << options.directory << "\n";
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto options = std::make_shared<ReportCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "report", "Write a report: self-contained HTML (inline SVG charts), Markdown and CSV comparing tuned, heuristic, baselines and imports");
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
  command->add_option("-o", options->directory, "report directory (created; its files are replaced)")->capture_default_str();
  command->add_option("--gpu", options->gpu, "only this GPU (profile or name; default: every GPU with results)");
  command->add_option("--format", options->formats, "comma-separated format specs (default: every format)");
  command->callback([options] { run_report(*options); });
}

}  // namespace qtune::cli

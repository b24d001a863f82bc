// `qtune report`: the database as a self-contained HTML page with inline SVG charts, the same as Markdown, and CSV.
#include <iostream>
#include <set>
#include <string>

#include "db/store.hpp"
#include "kernels/error.hpp"
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

// --gpu and --format must name something the store has results for: a blank report would pass for a real one.
void check_filters_match(db::Store& store, const ReportCommandOptions& options, const reports::ReportOptions& report_options) {
  if (report_options.gpu) {
    std::set<std::string> gpus;
    for (const db::RunRecord& run : store.list_runs()) {
      if (!run.gpu_key().empty()) gpus.insert(run.gpu_key());
    }
    for (const db::ExternalResultRecord& result : store.list_external_results()) gpus.insert(result.gpu);
    if (gpus.count(reports::gpu_key_for(*report_options.gpu)) == 0) {
      QTUNE_INPUT_ERROR("--gpu: no results for GPU '" + *report_options.gpu + "' in " + options.db_path +
                        " (GPUs with results: " + joined_or_none(gpus) + ")");
    }
  }
  std::set<std::string> formats;
  for (const db::ProblemRecord& problem : store.list_problems()) formats.insert(problem.format);
  for (const std::string& format : report_options.formats) {
    if (formats.count(format) == 0) {
      QTUNE_INPUT_ERROR("--format: no results for " + format + " in " + options.db_path + " (formats with results: " +
                        joined_or_none(formats) + ")");
    }
  }
}

void run_report(const ReportCommandOptions& options) {
  db::Store store = db::Store::open_read_only(options.db_path);
  reports::ReportOptions report_options;
  if (!options.gpu.empty()) report_options.gpu = options.gpu;
  if (!options.formats.empty()) report_options.formats = reports::parse_format_list(options.formats);
  check_filters_match(store, options, report_options);
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

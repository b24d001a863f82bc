// `qtune import`: external GEMM results (Humming benchmark files, generic JSON or CSV) into the database, one
// transaction per file, so that reports can compare with them.
#include <nlohmann/json.hpp>

#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "reports/external_import.hpp"
#include "reports/table.hpp"
#include "tuner/cli/commands.hpp"

namespace qtune::cli {

namespace {

struct ImportCommandOptions {
  std::vector<std::string> files;
  std::string db_path = "qtune.db";
  std::string label;
  std::string gpu;
  std::string format;
  std::string timing;
  std::string output = "table";
};

void run_import(const ImportCommandOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  reports::ImportOptions import_options;
  if (!options.label.empty()) import_options.label = options.label;
  if (!options.gpu.empty()) import_options.gpu = options.gpu;
  if (!options.format.empty()) import_options.format = options.format;
  if (!options.timing.empty()) import_options.timing = options.timing;

  // Every file is read and checked before anything is stored, so a bad file in the list stores nothing.
  std::vector<reports::ExternalFile> files;
  for (const auto& file : options.files) files.push_back(reports::read_external_file(file, import_options));

  db::Store store = db::Store::open(options.db_path);
  reports::Table table({"file", "kind", "source", "label", "gpu", "formats", "shapes", "results"});
  for (const auto& file : files) {
    const std::size_t stored = reports::store_external_file(store, file);
    std::set<std::string> sources, labels, gpus, formats, shapes;
    for (const auto& row : file.rows) {
      sources.insert(row.source);
      labels.insert(row.label);
      gpus.insert(row.gpu);
      formats.insert(row.problem.format);
      shapes.insert("n=" + std::to_string(row.problem.n) + " k=" + std::to_string(row.problem.k));
    }
    // A few values and a count: a file may hold thousands of labels.
    auto joined = [](const std::set<std::string>& values) {
      constexpr std::size_t kShown = 3;
      std::string text;
      std::size_t count = 0;
      for (auto value = values.begin(); value != values.end() && count < kShown; ++value, ++count) {
        text += (text.empty() ? "" : "; ") + (value->size() > 40 ? quote_input(*value, 40) : *value);
      }
      if (values.size() > kShown) text += "; \u2026 and " + std::to_string(values.size() - kShown) + " more";
      return text;
    };
    table.add_row({file.path.string(), std::string(reports::to_string(file.kind)), joined(sources), joined(labels), joined(gpus),
                   joined(formats), joined(shapes), std::to_string(stored)});
  }
  table.print(std::cout, style);
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto options = std::make_shared<ImportCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "import",
      "Import GEMM times measured elsewhere (Humming benchmark JSON, a JSON list or CSV of format,m,n,k,time_us,label,gpu,source) "
      "as external results");
  command->add_option("files", options->files, "result files (.json or .csv)")->required()->check(CLI::ExistingFile);
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
  command->add_option("--label", options->label, "label of every imported result (default: the file's own)");
  command->add_option("--gpu", options->gpu, "GPU of every imported result (default: the file's own)");
  command->add_option("--format", options->format, "format spec for a Humming file (default: derived from its problem)");
  command->add_option("--timing", options->timing,
                      "how rows without a 'timing' column were timed, e.g. cupti-median or cuda-event-mean (Humming files: cuda-event-mean)");
  command->add_option("--output", options->output, "output style: table, json or csv")->capture_default_str();
  command->callback([options] { run_import(*options); });
}

}  // namespace qtune::cli

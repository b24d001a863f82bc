// `qtune db init|info|check|merge`: create, inspect, verify and combine qtune databases.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "reports/table.hpp"
#include "tuner/cli/commands.hpp"

namespace qtune::cli {

namespace {

namespace fs = std::filesystem;

struct DbOptions {
  std::string db_path = "qtune.db";
  std::string output = "table";
  std::string merge_output;
  std::vector<std::string> merge_inputs;
};

void add_db_path_option(CLI::App& command, DbOptions& options) {
  command.add_option("--db", options.db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
}

void add_output_option(CLI::App& command, DbOptions& options) {
  command.add_option("--output", options.output, "output style: table, json or csv")->capture_default_str();
}

std::string schema_note(int version) {
  if (version == db::kSchemaVersion) return "current";
  if (version == 0) return "empty";
  return "older than this qtune's " + std::to_string(db::kSchemaVersion) + "; `qtune db init` migrates it";
}

std::string file_size_text(const fs::path& path) {
  std::error_code error;
  const auto bytes = fs::file_size(path, error);
  if (error) return "?";
  if (bytes < 10 * 1024) return std::to_string(bytes) + " B";
  if (bytes < 10 * 1024 * 1024) return std::to_string(bytes / 1024) + " KiB";
  return std::to_string(bytes / (1024 * 1024)) + " MiB";
}

void run_init(const DbOptions& options) {
  const db::Store store = db::Store::open(options.db_path);
  const int before = store.version_at_open();
  if (before == 0) {
    std::cout << "initialized " << options.db_path << " (schema version " << store.schema_version() << ")\n";
  } else if (before < store.schema_version()) {
    std::cout << "migrated " << options.db_path << " from schema version " << before << " to " << store.schema_version() << "\n";
  } else {
    std::cout << options.db_path << " is up to date (schema version " << store.schema_version() << ")\n";
  }
}

void run_info(const DbOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  db::Store store = db::Store::open_read_only(options.db_path);
  const auto counts = store.table_counts();
  std::vector<db::RunSummary> runs;
  if (store.schema_version() >= db::kOldestReadableVersion) runs = store.run_summaries();

  if (style == reports::OutputStyle::Json) {
    nlohmann::json out;
    out["path"] = options.db_path;
    out["schema_version"] = store.schema_version();
    out["current_schema_version"] = db::kSchemaVersion;
    out["tables"] = nlohmann::json::object();
    for (const auto& count : counts) out["tables"][count.table] = count.rows;
    out["runs"] = nlohmann::json::array();
    for (const auto& summary : runs) {
      const auto& run = summary.run;
      out["runs"].push_back({{"id", db::id_value(run.id)},
                             {"uuid", run.uuid},
                             {"kind", run.kind},
                             {"status", db::to_string(run.status)},
                             {"started_at", run.started_at},
                             {"finished_at", run.finished_at ? nlohmann::json(*run.finished_at) : nlohmann::json(nullptr)},
                             {"tool_version", run.tool_version},
                             {"git_sha", run.git_sha},
                             {"host", run.host},
                             {"gpu", run.gpu_key()},
                             {"gpu_name", run.gpu_name},
                             {"shard", run.shard},
                             {"compiles", summary.compiles},
                             {"verifications", summary.verifications},
                             {"measurements", summary.measurements},
                             {"winners", summary.winners}});
    }
    std::cout << json_text(out, 2) << "\n";  // run strings are whatever the database holds
    return;
  }

  reports::Table tables({"table", "rows"});
  for (const auto& count : counts) tables.add_row({count.table, std::to_string(count.rows)});
  if (style == reports::OutputStyle::Csv) {
    tables.print_csv(std::cout);
    return;
  }
  std::cout << "database        " << options.db_path << " (" << file_size_text(options.db_path) << ")\n"
            << "schema version  " << store.schema_version() << " (" << schema_note(store.schema_version()) << ")\n\n";
  tables.print_text(std::cout);
  std::cout << "\n";
  if (runs.empty()) {
    std::cout << "no runs\n";
    return;
  }
  reports::Table run_table({"run", "uuid", "kind", "status", "started", "gpu", "shard", "compiles", "verified", "measured", "winners"});
  for (const auto& summary : runs) {
    const auto& run = summary.run;
    run_table.add_row({std::to_string(db::id_value(run.id)), run.uuid.substr(0, 8), run.kind, std::string(db::to_string(run.status)),
                       run.started_at, run.gpu_key(), run.shard, std::to_string(summary.compiles),
                       std::to_string(summary.verifications), std::to_string(summary.measurements), std::to_string(summary.winners)});
  }
  run_table.print_text(std::cout);
}

void run_check(const DbOptions& options) {
  const auto problems = db::Store::check_file(options.db_path);
  if (problems.empty()) {
    std::cout << options.db_path << ": ok\n";
    return;
  }
  for (const auto& problem : problems) std::cout << options.db_path << ": " << problem << "\n";
  QTUNE_THROW(Error, options.db_path + ": check found " + std::to_string(problems.size()) + " problem(s)");
}

void run_merge(const DbOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  const std::string& output = options.merge_output;
  // Every input is checked before OUT is opened, so a bad input leaves no OUT behind (nor a changed one).
  for (const auto& input : options.merge_inputs) db::Store::require_merge_source(input);
  std::error_code error;
  const bool output_existed = fs::exists(output, error);
  std::optional<db::Store> store(db::Store::open(output));
  // A merge that fails part-way keeps the inputs merged before it; a new OUT is then removed as a whole.
  struct RemoveIfNew {
    std::optional<db::Store>& opened;
    const std::string& file;
    bool armed;
    ~RemoveIfNew() {
      if (!armed) return;
      opened.reset();
      std::error_code ignored;
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(file + suffix, ignored);
    }
  } remove_new_output{store, output, !output_existed};
  reports::Table table({"input", "runs added", "runs present", "problems", "configs", "compiles", "verifications", "measurements",
                        "winners", "pruning", "external"});
  for (const auto& input : options.merge_inputs) {
    const db::MergeSummary s = store->merge(input);
    table.add_row({input, std::to_string(s.runs_added), std::to_string(s.runs_already_present),
                   std::to_string(s.problems_added), std::to_string(s.configs_added), std::to_string(s.compiles_added),
                   std::to_string(s.verifications_added), std::to_string(s.measurements_added), std::to_string(s.winners_changed),
                   std::to_string(s.pruning_counts_changed), std::to_string(s.external_results_added)});
  }
  remove_new_output.armed = false;
  if (style == reports::OutputStyle::Text) std::cout << "merged into " << output << " (rows added per input)\n";
  table.print(std::cout, style);
}

}  // namespace

void add_db_command(CLI::App& app) {
  auto options = std::make_shared<DbOptions>();
  CLI::App* db = app.add_subcommand("db", "create, inspect, check and merge qtune databases");
  db->require_subcommand(1);

  CLI::App* init = db->add_subcommand("init", "create a database, or migrate an older one to this qtune's schema");
  add_db_path_option(*init, *options);
  init->callback([options] { run_init(*options); });

  CLI::App* info = db->add_subcommand("info", "schema version, rows per table and a summary of each run (read-only)");
  add_db_path_option(*info, *options);
  add_output_option(*info, *options);
  info->callback([options] { run_info(*options); });

  CLI::App* check = db->add_subcommand("check", "integrity, foreign keys, schema version and qtune's rules; exit 1 if a problem is found");
  add_db_path_option(*check, *options);
  check->callback([options] { run_check(*options); });

  CLI::App* merge = db->add_subcommand("merge", "merge shard databases IN... into OUT (created if missing); merging twice adds nothing");
  merge->add_option("OUT", options->merge_output, "the database to merge into")->required();
  merge->add_option("IN", options->merge_inputs, "the databases to merge from")->required()->expected(1, -1);
  add_output_option(*merge, *options);
  merge->callback([options] { run_merge(*options); });
}

}  // namespace qtune::cli

// Store::merge: copies another store's rows into this one through an ATTACHed read-only connection, with id remapping.
#include <string>
#include <system_error>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"

namespace qtune::db {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSource = "merge_source";

// A table whose rows belong to a run. `mapped` columns hold ids of runs, problems or configs and are translated
// through the temp maps; `columns` are copied as they are. A source row is copied unless this store already has a
// row equal in every column (after translation), which makes merging idempotent.
struct RunTable {
  std::string_view table;
  std::vector<std::string_view> mapped;  // among run_id, problem_id, config_id
  std::vector<std::string_view> columns;
};

std::string map_table_for(std::string_view column) {
  if (column == "run_id") return "temp.merge_run_map";
  if (column == "problem_id") return "temp.merge_problem_map";
  return "temp.merge_config_map";
}

// The pieces of the copy of one run table: the target columns, the values selected for them, and the source rows
// still missing here ("FROM ... WHERE NOT EXISTS (an equal row here)").
struct CopySql {
  std::string insert_columns;
  std::string select_values;
  std::string missing_source_rows;
};

CopySql copy_sql(const RunTable& spec) {
  CopySql sql;
  std::string joins;
  std::string same_row;
  for (std::size_t i = 0; i < spec.mapped.size(); ++i) {
    const std::string column(spec.mapped[i]);
    const std::string alias = "map" + std::to_string(i);
    sql.insert_columns += (sql.insert_columns.empty() ? "" : ", ") + column;
    sql.select_values += (sql.select_values.empty() ? "" : ", ") + alias + ".dst_id";
    joins += " JOIN " + map_table_for(column) + " " + alias + " ON " + alias + ".src_id = s." + column;
    same_row += (same_row.empty() ? "" : " AND ") + ("d." + column + " = " + alias + ".dst_id");
  }
  for (const auto column_view : spec.columns) {
    const std::string column(column_view);
    sql.insert_columns += ", " + column;
    sql.select_values += ", s." + column;
    same_row += " AND d." + column + " IS s." + column;
  }
  const std::string table(spec.table);
  sql.missing_source_rows = "FROM " + std::string(kSource) + "." + table + " s" + joins + " WHERE NOT EXISTS (SELECT 1 FROM main." +
                            table + " d WHERE " + same_row + ")";
  return sql;
}

std::string copy_rows_sql(const RunTable& spec) {
  const CopySql sql = copy_sql(spec);
  return "INSERT INTO main." + std::string(spec.table) + " (" + sql.insert_columns + ") SELECT " + sql.select_values + " " +
         sql.missing_source_rows + " ORDER BY s.rowid";
}

// Counts the source rows of `spec` that have no equal row here (0 after a complete copy).
std::string missing_rows_sql(const RunTable& spec) { return "SELECT count(*) " + copy_sql(spec).missing_source_rows; }

// Detaches the source on every path out of merge (DETACH cannot run inside a transaction, so it runs last).
class AttachedSource {
 public:
  AttachedSource(Connection& connection, const fs::path& path) : connection_(connection) {
    Statement attach = connection.prepare("ATTACH DATABASE ? AS " + std::string(kSource));
    attach.bind(1, file_uri(path, OpenMode::ReadOnly));
    attach.run();
  }
  ~AttachedSource() {
    try {
      connection_.execute("DROP TABLE IF EXISTS temp.merge_run_map; DROP TABLE IF EXISTS temp.merge_problem_map; "
                          "DROP TABLE IF EXISTS temp.merge_config_map; DROP TABLE IF EXISTS temp.merge_moe_problem_map");
      connection_.execute("DETACH DATABASE " + std::string(kSource));
    } catch (...) {
      // Nothing to do in a destructor; the attachment ends with the connection anyway.
    }
  }
  AttachedSource(const AttachedSource&) = delete;
  AttachedSource& operator=(const AttachedSource&) = delete;

 private:
  Connection& connection_;
};

}  // namespace

void Store::require_merge_source(const fs::path& other) {
  std::error_code error;
  if (!fs::exists(other, error)) QTUNE_INPUT_ERROR(other.string() + ": no such database to merge");
  Store source = open_read_only(other);
  if (source.schema_version() != kSchemaVersion) {
    QTUNE_INPUT_ERROR(other.string() + ": schema version " + std::to_string(source.schema_version()) + " differs from " +
                      std::to_string(kSchemaVersion) + "; migrate it first with `qtune db init --db " + other.string() + "`");
  }
  // A row whose reference is broken could not be mapped and would be lost without a word: refuse such a source.
  Statement broken = source.connection().prepare("PRAGMA foreign_key_check");
  if (broken.step()) {
    QTUNE_INPUT_ERROR(other.string() + ": has rows with broken references (table " + broken.column_text(0) +
                      "); see `qtune db check --db " + other.string() + "`; nothing was merged");
  }
}

namespace {

// The MoE tables (schema version 4, db/moe_store.hpp): problems by their key, results unless an equal one is here,
// and one winner per (MoE problem, gpu), the faster one staying. Runs and configs go through the merge's temp maps.
void merge_moe_rows(Connection& connection, const fs::path& other) {
  const std::string src(kSource);
  const std::string key = "format, experts, top_k, tokens, n, k, projection, layout, routing, seed";
  connection.execute("INSERT OR IGNORE INTO main.moe_problems (" + key + ") SELECT " + key + " FROM " + src +
                     ".moe_problems ORDER BY id");
  connection.execute("CREATE TEMP TABLE merge_moe_problem_map (src_id INTEGER PRIMARY KEY, dst_id INTEGER NOT NULL); "
                     "INSERT INTO temp.merge_moe_problem_map SELECT s.id, d.id FROM " + src + ".moe_problems s JOIN "
                     "main.moe_problems d ON d.format = s.format AND d.experts = s.experts AND d.top_k = s.top_k AND "
                     "d.tokens = s.tokens AND d.n = s.n AND d.k = s.k AND d.projection = s.projection AND d.layout = s.layout "
                     "AND d.routing = s.routing AND d.seed = s.seed");
  const std::vector<std::string> columns = {"outcome", "verified", "max_rel_error", "tolerance", "rows_checked", "median_us",
                                            "ci_low_us", "ci_high_us", "sample_count", "phase", "message", "created_at"};
  std::string insert_columns = "run_id, problem_id, config_id";
  std::string select_values = "mr.dst_id, mp.dst_id, mc.dst_id";
  std::string same_row = "d.run_id = mr.dst_id AND d.problem_id = mp.dst_id AND d.config_id = mc.dst_id";
  for (const std::string& column : columns) {
    insert_columns += ", " + column;
    select_values += ", s." + column;
    same_row += " AND d." + column + " IS s." + column;
  }
  const std::string missing = "FROM " + src + ".moe_results s JOIN temp.merge_run_map mr ON mr.src_id = s.run_id "
                              "JOIN temp.merge_moe_problem_map mp ON mp.src_id = s.problem_id "
                              "JOIN temp.merge_config_map mc ON mc.src_id = s.config_id "
                              "WHERE NOT EXISTS (SELECT 1 FROM main.moe_results d WHERE " + same_row + ")";
  connection.execute("INSERT INTO main.moe_results (" + insert_columns + ") SELECT " + select_values + " " + missing +
                     " ORDER BY s.id");
  const std::int64_t left = connection.query_int("SELECT count(*) " + missing);
  const std::int64_t unmapped = connection.query_int(
      "SELECT count(*) FROM " + src + ".moe_results s WHERE s.run_id NOT IN (SELECT src_id FROM temp.merge_run_map) OR "
      "s.problem_id NOT IN (SELECT src_id FROM temp.merge_moe_problem_map) OR "
      "s.config_id NOT IN (SELECT src_id FROM temp.merge_config_map)");
  if (left != 0 || unmapped != 0) {
    QTUNE_THROW(Error, "merge of " + other.string() + ": " + std::to_string(left + unmapped) +
                           " moe_results rows could not be copied; nothing was merged");
  }
  connection.execute(
      "INSERT INTO main.moe_winners (run_id, problem_id, gpu, config_id, median_us, reason, decided_at) "
      "SELECT mr.dst_id, mp.dst_id, s.gpu, mc.dst_id, s.median_us, s.reason, s.decided_at FROM " + src + ".moe_winners s "
      "JOIN temp.merge_run_map mr ON mr.src_id = s.run_id JOIN temp.merge_moe_problem_map mp ON mp.src_id = s.problem_id "
      "JOIN temp.merge_config_map mc ON mc.src_id = s.config_id WHERE 1 ORDER BY s.id "
      "ON CONFLICT (problem_id, gpu) DO UPDATE SET run_id = excluded.run_id, config_id = excluded.config_id, "
      "median_us = excluded.median_us, reason = excluded.reason, decided_at = excluded.decided_at "
      "WHERE excluded.median_us < moe_winners.median_us");
  connection.execute("DROP TABLE temp.merge_moe_problem_map");
}

}  // namespace

MergeSummary Store::merge(const fs::path& other) {
  if (read_only()) QTUNE_INPUT_ERROR(path().string() + ": opened read-only; cannot merge into it");
  std::error_code error;
  if (fs::exists(other, error) && fs::equivalent(other, path(), error)) QTUNE_INPUT_ERROR(other.string() + ": cannot merge a database into itself");
  require_merge_source(other);

  Connection& connection = *connection_;
  const std::string src(kSource);
  AttachedSource attached(connection, other);
  MergeSummary summary;
  Transaction transaction(connection);

  connection.execute("INSERT OR IGNORE INTO main.problems (format, m, n, k) SELECT format, m, n, k FROM " + src +
                     ".problems ORDER BY id");
  summary.problems_added = connection.changes();
  connection.execute("INSERT OR IGNORE INTO main.kernel_configs (kind, family, params, source_hash) "
                     "SELECT kind, family, params, source_hash FROM " + src + ".kernel_configs ORDER BY id");
  summary.configs_added = connection.changes();

  const std::string run_columns =
      "uuid, kind, status, started_at, finished_at, tool_version, git_sha, cuda_version, driver_version, host, gpu_name, "
      "gpu_uuid, gpu_profile, sm, sm_count, sm_clock_mhz, mem_clock_mhz, command_line, shard, notes";
  const std::int64_t source_runs = connection.query_int("SELECT count(*) FROM " + src + ".runs");
  connection.execute("INSERT INTO main.runs (" + run_columns + ") SELECT " + run_columns + " FROM " + src +
                     ".runs s WHERE NOT EXISTS (SELECT 1 FROM main.runs d WHERE d.uuid = s.uuid) ORDER BY s.id");
  summary.runs_added = connection.changes();
  summary.runs_already_present = source_runs - summary.runs_added;
  // A run merged while it was still going has finished since: take its final status.
  connection.execute("UPDATE main.runs SET status = (SELECT s.status FROM " + src + ".runs s WHERE s.uuid = runs.uuid), "
                     "finished_at = (SELECT s.finished_at FROM " + src + ".runs s WHERE s.uuid = runs.uuid) "
                     "WHERE status = 'running' AND EXISTS (SELECT 1 FROM " + src + ".runs s WHERE s.uuid = runs.uuid AND s.status <> 'running')");

  connection.execute("CREATE TEMP TABLE merge_run_map (src_id INTEGER PRIMARY KEY, dst_id INTEGER NOT NULL); "
                     "INSERT INTO temp.merge_run_map SELECT s.id, d.id FROM " + src + ".runs s JOIN main.runs d ON d.uuid = s.uuid; "
                     "CREATE TEMP TABLE merge_problem_map (src_id INTEGER PRIMARY KEY, dst_id INTEGER NOT NULL); "
                     "INSERT INTO temp.merge_problem_map SELECT s.id, d.id FROM " + src + ".problems s JOIN main.problems d "
                     "ON d.format = s.format AND d.m = s.m AND d.n = s.n AND d.k = s.k; "
                     "CREATE TEMP TABLE merge_config_map (src_id INTEGER PRIMARY KEY, dst_id INTEGER NOT NULL); "
                     "INSERT INTO temp.merge_config_map SELECT s.id, d.id FROM " + src + ".kernel_configs s JOIN main.kernel_configs d "
                     "ON d.kind = s.kind AND d.family = s.family AND d.params = s.params AND d.source_hash = s.source_hash");
  connection.execute("INSERT OR IGNORE INTO main.run_processes (run_id, host, pid, process_start) "
                     "SELECT m.dst_id, s.host, s.pid, s.process_start FROM " + src + ".run_processes s "
                     "JOIN temp.merge_run_map m ON m.src_id = s.run_id ORDER BY s.run_id");

  const RunTable compiles{"compiles",
                          {"run_id", "config_id"},
                          {"format", "arch", "cache_key", "cache_hit", "compile_seconds", "registers", "spill_store_bytes",
                           "spill_load_bytes", "shared_bytes", "stack_bytes", "status", "message", "created_at"}};
  const RunTable verifications{"verifications",
                               {"run_id", "problem_id", "config_id"},
                               {"status", "max_rel_error", "max_abs_error", "tolerance", "message", "created_at"}};
  const RunTable measurements{"measurements",
                              {"run_id", "problem_id", "config_id"},
                              {"status", "median_us", "p10_us", "p90_us", "min_us", "max_us", "mean_us", "stddev_us", "ci_low_us",
                               "ci_high_us", "sample_count", "samples", "l2_mode", "sm_clock_mhz", "mem_clock_mhz", "temperature_c",
                               "power_w", "throttled", "phase", "message", "created_at"}};
  connection.execute(copy_rows_sql(compiles));
  summary.compiles_added = connection.changes();
  connection.execute(copy_rows_sql(verifications));
  summary.verifications_added = connection.changes();
  connection.execute(copy_rows_sql(measurements));
  summary.measurements_added = connection.changes();
  // Every source row must now have its equal here; anything else is a bug to stop at, not data to lose.
  for (const RunTable* table : {&compiles, &verifications, &measurements}) {
    const std::int64_t missing = connection.query_int(missing_rows_sql(*table));
    if (missing != 0) {
      QTUNE_THROW(Error, "merge of " + other.string() + ": " + std::to_string(missing) + " " + std::string(table->table) +
                             " rows could not be copied; nothing was merged");
    }
  }

  // One winner per (problem, gpu): the faster one stays.
  connection.execute(
      "INSERT INTO main.winners (run_id, problem_id, gpu, config_id, median_us, reason, decided_at) "
      "SELECT mr.dst_id, mp.dst_id, s.gpu, mc.dst_id, s.median_us, s.reason, s.decided_at FROM " + src + ".winners s "
      "JOIN temp.merge_run_map mr ON mr.src_id = s.run_id JOIN temp.merge_problem_map mp ON mp.src_id = s.problem_id "
      "JOIN temp.merge_config_map mc ON mc.src_id = s.config_id WHERE 1 ORDER BY s.id "
      "ON CONFLICT (problem_id, gpu) DO UPDATE SET run_id = excluded.run_id, config_id = excluded.config_id, "
      "median_us = excluded.median_us, reason = excluded.reason, decided_at = excluded.decided_at "
      "WHERE excluded.median_us < winners.median_us");
  summary.winners_changed = connection.changes();

  connection.execute(
      "INSERT INTO main.pruning_counts (run_id, problem_id, stage, rule, count) "
      "SELECT mr.dst_id, mp.dst_id, s.stage, s.rule, s.count FROM " + src + ".pruning_counts s "
      "JOIN temp.merge_run_map mr ON mr.src_id = s.run_id JOIN temp.merge_problem_map mp ON mp.src_id = s.problem_id WHERE 1 "
      "ON CONFLICT (run_id, problem_id, stage, rule) DO UPDATE SET count = excluded.count WHERE count <> excluded.count");
  summary.pruning_counts_changed = connection.changes();

  connection.execute(
      "INSERT OR IGNORE INTO main.external_results (source, label, problem_id, gpu, time_us, notes, imported_at) "
      "SELECT s.source, s.label, mp.dst_id, s.gpu, s.time_us, s.notes, s.imported_at FROM " + src + ".external_results s "
      "JOIN temp.merge_problem_map mp ON mp.src_id = s.problem_id ORDER BY s.id");
  summary.external_results_added = connection.changes();

  merge_moe_rows(connection, other);

  connection.execute("DROP TABLE temp.merge_run_map; DROP TABLE temp.merge_problem_map; DROP TABLE temp.merge_config_map");
  transaction.commit();
  return summary;
}

}  // namespace qtune::db

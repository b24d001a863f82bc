#include "db/schema.hpp"

#include <map>
#include <set>
#include <string>

#include "db/sqlite.hpp"
#include "kernels/error.hpp"

namespace qtune::db {

namespace {

// Version 1: the core store. Every row but problems and kernel_configs belongs to a run, so a run and everything it
// produced can be copied between files (db merge). Times are ISO-8601 UTC text.
constexpr std::string_view kVersion1 = R"sql(
CREATE TABLE runs (
  id             INTEGER PRIMARY KEY,
  uuid           TEXT NOT NULL UNIQUE,
  kind           TEXT NOT NULL DEFAULT '',
  status         TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'interrupted', 'failed')),
  started_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  finished_at    TEXT,
  tool_version   TEXT NOT NULL,
  git_sha        TEXT NOT NULL,
  cuda_version   TEXT NOT NULL DEFAULT '',
  driver_version TEXT NOT NULL DEFAULT '',
  host           TEXT NOT NULL DEFAULT '',
  gpu_name       TEXT NOT NULL DEFAULT '',
  gpu_uuid       TEXT NOT NULL DEFAULT '',
  gpu_profile    TEXT NOT NULL DEFAULT '',
  sm             INTEGER NOT NULL DEFAULT 0 CHECK (sm >= 0),
  sm_count       INTEGER NOT NULL DEFAULT 0 CHECK (sm_count >= 0),
  sm_clock_mhz   INTEGER,
  mem_clock_mhz  INTEGER,
  command_line   TEXT NOT NULL DEFAULT '',
  notes          TEXT NOT NULL DEFAULT ''
);

CREATE TABLE problems (
  id     INTEGER PRIMARY KEY,
  format TEXT NOT NULL CHECK (format <> ''),
  m      INTEGER NOT NULL CHECK (m > 0),
  n      INTEGER NOT NULL CHECK (n > 0),
  k      INTEGER NOT NULL CHECK (k > 0),
  UNIQUE (format, m, n, k)
);

CREATE TABLE kernel_configs (
  id          INTEGER PRIMARY KEY,
  kind        TEXT NOT NULL DEFAULT 'kernel' CHECK (kind IN ('kernel', 'baseline')),
  family      TEXT NOT NULL CHECK (family <> ''),
  params      TEXT NOT NULL,
  source_hash TEXT NOT NULL DEFAULT '',
  UNIQUE (kind, family, params, source_hash)
);

CREATE TABLE compiles (
  id                INTEGER PRIMARY KEY,
  run_id            INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  config_id         INTEGER NOT NULL REFERENCES kernel_configs (id),
  format            TEXT NOT NULL DEFAULT '',
  arch              TEXT NOT NULL CHECK (arch <> ''),
  cache_key         TEXT NOT NULL DEFAULT '',
  cache_hit         INTEGER NOT NULL DEFAULT 0 CHECK (cache_hit IN (0, 1)),
  compile_seconds   REAL CHECK (compile_seconds >= 0),
  registers         INTEGER,
  spill_store_bytes INTEGER,
  spill_load_bytes  INTEGER,
  shared_bytes      INTEGER,
  stack_bytes       INTEGER,
  status            TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'invalid')),
  message           TEXT NOT NULL DEFAULT '',
  created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX compiles_by_run ON compiles (run_id, config_id);
CREATE INDEX compiles_by_config ON compiles (config_id, arch);

CREATE TABLE verifications (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  problem_id    INTEGER NOT NULL REFERENCES problems (id),
  config_id     INTEGER NOT NULL REFERENCES kernel_configs (id),
  status        TEXT NOT NULL CHECK (status IN ('passed', 'failed', 'invalid', 'crashed')),
  max_rel_error REAL,
  max_abs_error REAL,
  tolerance     REAL,
  message       TEXT NOT NULL DEFAULT '',
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX verifications_by_run ON verifications (run_id, problem_id, config_id);
CREATE INDEX verifications_by_problem ON verifications (problem_id, config_id);

CREATE TABLE measurements (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  problem_id    INTEGER NOT NULL REFERENCES problems (id),
  config_id     INTEGER NOT NULL REFERENCES kernel_configs (id),
  status        TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'crashed', 'timeout')),
  median_us     REAL,
  p10_us        REAL,
  p90_us        REAL,
  min_us        REAL,
  max_us        REAL,
  mean_us       REAL,
  stddev_us     REAL,
  ci_low_us     REAL,
  ci_high_us    REAL,
  sample_count  INTEGER NOT NULL DEFAULT 0 CHECK (sample_count >= 0),
  samples       BLOB,
  l2_mode       TEXT NOT NULL DEFAULT 'cold' CHECK (l2_mode IN ('cold', 'warm')),
  sm_clock_mhz  REAL,
  mem_clock_mhz REAL,
  temperature_c REAL,
  power_w       REAL,
  throttled     INTEGER NOT NULL DEFAULT 0 CHECK (throttled IN (0, 1)),
  message       TEXT NOT NULL DEFAULT '',
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  CHECK (status <> 'ok' OR (median_us IS NOT NULL AND median_us > 0))
);
CREATE INDEX measurements_by_run ON measurements (run_id, problem_id, config_id);
CREATE INDEX measurements_by_problem ON measurements (problem_id, config_id);

CREATE TABLE winners (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  problem_id INTEGER NOT NULL REFERENCES problems (id),
  gpu        TEXT NOT NULL CHECK (gpu <> ''),
  config_id  INTEGER NOT NULL REFERENCES kernel_configs (id),
  median_us  REAL NOT NULL CHECK (median_us > 0),
  reason     TEXT NOT NULL DEFAULT '',
  decided_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (problem_id, gpu)
);
CREATE INDEX winners_by_run ON winners (run_id);
CREATE INDEX winners_by_config ON winners (config_id);
)sql";

// Version 2: search bookkeeping (shards, measurement phases, pruning counts) and results imported from elsewhere.
constexpr std::string_view kVersion2 = R"sql(
ALTER TABLE runs ADD COLUMN shard TEXT NOT NULL DEFAULT '';
ALTER TABLE measurements ADD COLUMN phase TEXT NOT NULL DEFAULT '';

CREATE TABLE pruning_counts (
  run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  problem_id INTEGER NOT NULL REFERENCES problems (id),
  stage      TEXT NOT NULL CHECK (stage IN ('pre_compile', 'post_compile')),
  rule       TEXT NOT NULL CHECK (rule <> ''),
  count      INTEGER NOT NULL CHECK (count >= 0),
  PRIMARY KEY (run_id, problem_id, stage, rule)
);
CREATE INDEX pruning_counts_by_problem ON pruning_counts (problem_id);

CREATE TABLE external_results (
  id          INTEGER PRIMARY KEY,
  source      TEXT NOT NULL CHECK (source <> ''),
  label       TEXT NOT NULL DEFAULT '',
  problem_id  INTEGER NOT NULL REFERENCES problems (id),
  gpu         TEXT NOT NULL CHECK (gpu <> ''),
  time_us     REAL NOT NULL CHECK (time_us > 0),
  notes       TEXT NOT NULL DEFAULT '',
  imported_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (source, label, problem_id, gpu)
);
CREATE INDEX external_results_by_problem ON external_results (problem_id);
)sql";

// Version 3: which process runs a run, so that a later run can tell a run whose process was killed. `process_start`
// is "<boot id> <start time in clock ticks since boot>", so a pid reused after the process died, or after a reboot,
// does not pass for it.
constexpr std::string_view kVersion3 = R"sql(
CREATE TABLE run_processes (
  run_id        INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
  host          TEXT NOT NULL,
  pid           INTEGER NOT NULL CHECK (pid > 0),
  process_start TEXT NOT NULL
);
)sql";

// Version 4: mixture-of-experts GEMMs (kernels/moe.hpp), tuned over token buckets: a MoE problem is its own key
// (format, experts, top-k, tokens, N, K per expert, projection, layout, routing with its seed), so it never meets a
// dense problem of the same N x K. Each candidate leaves one result row (verification and timing together); a
// winner is kept per (MoE problem, GPU) as for dense problems.
constexpr std::string_view kVersion4 = R"sql(
CREATE TABLE moe_problems (
  id         INTEGER PRIMARY KEY,
  format     TEXT NOT NULL CHECK (format <> ''),
  experts    INTEGER NOT NULL CHECK (experts > 0),
  top_k      INTEGER NOT NULL CHECK (top_k > 0 AND top_k <= experts),
  tokens     INTEGER NOT NULL CHECK (tokens > 0),
  n          INTEGER NOT NULL CHECK (n > 0),
  k          INTEGER NOT NULL CHECK (k > 0),
  projection TEXT NOT NULL CHECK (projection IN ('gate-up', 'down')),
  layout     TEXT NOT NULL CHECK (layout IN ('token-indexed', 'grouped-contiguous', 'grouped-masked')),
  routing    TEXT NOT NULL CHECK (routing <> ''),
  seed       INTEGER NOT NULL DEFAULT 1,
  UNIQUE (format, experts, top_k, tokens, n, k, projection, layout, routing, seed)
);

CREATE TABLE moe_results (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  problem_id    INTEGER NOT NULL REFERENCES moe_problems (id),
  config_id     INTEGER NOT NULL REFERENCES kernel_configs (id),
  outcome       TEXT NOT NULL CHECK (outcome IN ('measured', 'verification-failed', 'error', 'crashed', 'timeout')),
  verified      INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),
  max_rel_error REAL,
  tolerance     REAL,
  rows_checked  INTEGER NOT NULL DEFAULT 0,
  median_us     REAL,
  ci_low_us     REAL,
  ci_high_us    REAL,
  sample_count  INTEGER NOT NULL DEFAULT 0,
  phase         TEXT NOT NULL DEFAULT '',
  message       TEXT NOT NULL DEFAULT '',
  created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  CHECK (outcome <> 'measured' OR (median_us IS NOT NULL AND median_us > 0))
);
CREATE INDEX moe_results_by_problem ON moe_results (problem_id, config_id);
CREATE INDEX moe_results_by_run ON moe_results (run_id);

CREATE TABLE moe_winners (
  id         INTEGER PRIMARY KEY,
  run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  problem_id INTEGER NOT NULL REFERENCES moe_problems (id),
  gpu        TEXT NOT NULL CHECK (gpu <> ''),
  config_id  INTEGER NOT NULL REFERENCES kernel_configs (id),
  median_us  REAL NOT NULL CHECK (median_us > 0),
  reason     TEXT NOT NULL DEFAULT '',
  decided_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
  UNIQUE (problem_id, gpu)
);
CREATE INDEX moe_winners_by_run ON moe_winners (run_id);
)sql";

}  // namespace

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> all = {
      {1, "runs, problems, kernel configs, compiles, verifications, measurements, winners", kVersion1},
      {2, "shards, measurement phases, pruning counts, external results", kVersion2},
      {3, "the host, pid and start time of each run's process", kVersion3},
      {4, "mixture-of-experts problems, results and winners", kVersion4},
  };
  return all;
}

SchemaState read_schema_state(Connection& connection) {
  // One statement, so the three values come from one snapshot even while another process is migrating the file.
  Statement statement = connection.prepare(
      "SELECT (SELECT user_version FROM pragma_user_version), (SELECT application_id FROM pragma_application_id), "
      "(SELECT count(*) FROM sqlite_master)");
  if (!statement.step()) QTUNE_LIBRARY_ERROR("SQLite", "reading the schema version returned no row [" + connection.path().string() + "]");
  SchemaState state;
  state.user_version = statement.column_int(0);
  state.application_id = statement.column_int(1);
  state.object_count = statement.column_int(2);
  return state;
}

void require_usable(const SchemaState& state, const std::filesystem::path& path) {
  const std::string file = path.string();
  if (!state.empty() && !state.is_qtune()) {
    QTUNE_INPUT_ERROR(file + ": not a qtune database (application_id " + std::to_string(state.application_id) +
                      ", user_version " + std::to_string(state.user_version) + "); it was left unchanged");
  }
  if (state.user_version > kSchemaVersion) {
    QTUNE_INPUT_ERROR(file + ": schema version " + std::to_string(state.user_version) +
                      " is newer than this qtune's schema version " + std::to_string(kSchemaVersion) +
                      "; use a newer qtune (the file was left unchanged)");
  }
}

namespace {

using TableColumns = std::map<std::string, std::set<std::string>>;

TableColumns table_columns(Connection& connection) {
  Statement statement = connection.prepare(
      "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p "
      "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'");
  TableColumns columns;
  while (statement.step()) columns[statement.column_text(0)].insert(statement.column_text(1));
  return columns;
}

// The tables and columns of every schema version, from running the migrations in memory once.
const std::vector<TableColumns>& expected_columns() {
  static const std::vector<TableColumns> by_version = [] {
    std::vector<TableColumns> versions(1);  // version 0: nothing
    Connection memory("expected schema", OpenMode::Memory);
    for (const Migration& migration : migrations()) {
      memory.execute(migration.sql);
      versions.push_back(table_columns(memory));
    }
    return versions;
  }();
  return by_version;
}

}  // namespace

void require_schema_tables(Connection& connection, int version, const std::filesystem::path& file) {
  if (version < 1 || version > kSchemaVersion) return;  // require_usable speaks about these
  const TableColumns found = table_columns(connection);
  for (const auto& [table, columns] : expected_columns()[static_cast<std::size_t>(version)]) {
    const auto present = found.find(table);
    const std::string what = file.string() + ": marked as a qtune database of schema version " + std::to_string(version) + " but ";
    if (present == found.end()) QTUNE_INPUT_ERROR(what + "it has no table '" + table + "'; it was left unchanged");
    for (const std::string& column : columns) {
      if (present->second.count(column) == 0) QTUNE_INPUT_ERROR(what + "table '" + table + "' has no column '" + column + "'; it was left unchanged");
    }
  }
}

int migrate(Connection& connection, int target_version) {
  if (target_version < 1 || target_version > kSchemaVersion) {
    QTUNE_THROW(Error, "migrate: target version " + std::to_string(target_version) + " is outside 1.." + std::to_string(kSchemaVersion));
  }
  // Look before taking the write lock, so that a file we must refuse is never written to (not even a journal).
  const SchemaState before = read_schema_state(connection);
  require_usable(before, connection.path());
  require_schema_tables(connection, static_cast<int>(before.user_version), connection.path());
  if (before.user_version >= target_version) return static_cast<int>(before.user_version);

  Transaction transaction(connection);
  // Another process may have migrated between the look and the lock: read again under the lock.
  const SchemaState state = read_schema_state(connection);
  require_usable(state, connection.path());
  for (const Migration& migration : migrations()) {
    if (migration.version <= state.user_version || migration.version > target_version) continue;
    connection.execute(migration.sql);
    connection.execute("PRAGMA user_version = " + std::to_string(migration.version));
  }
  if (state.application_id != kApplicationId) connection.execute("PRAGMA application_id = " + std::to_string(kApplicationId));
  transaction.commit();
  return static_cast<int>(state.user_version);
}

}  // namespace qtune::db

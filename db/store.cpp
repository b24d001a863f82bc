#include "db/store.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <bit>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <system_error>
#include <thread>
#include <utility>

#include "db/process_identity.hpp"
#include "kernels/error.hpp"

namespace qtune::db {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------- enum texts

namespace {

// An enum's texts as the file stores them, and the column that holds them: to_string and the row readers use the one
// table, so the two directions cannot disagree.
template <typename Enum, std::size_t Count>
struct EnumTexts {
  std::string_view column;
  std::array<std::pair<Enum, std::string_view>, Count> entries;

  std::string_view text(Enum value) const {
    for (const auto& [entry, entry_text] : entries) {
      if (entry == value) return entry_text;
    }
    return "?";
  }
  // An unknown text means a damaged or foreign row.
  Enum value(const std::string& text) const {
    for (const auto& [entry, entry_text] : entries) {
      if (entry_text == text) return entry;
    }
    QTUNE_LIBRARY_ERROR("SQLite", "unexpected value '" + text + "' in column " + std::string(column));
  }
};

constexpr EnumTexts<RunStatus, 4> kRunStatusTexts{
    "runs.status",
    {{{RunStatus::Running, "running"}, {RunStatus::Completed, "completed"}, {RunStatus::Interrupted, "interrupted"},
      {RunStatus::Failed, "failed"}}}};
constexpr EnumTexts<ConfigKind, 2> kConfigKindTexts{
    "kernel_configs.kind", {{{ConfigKind::Kernel, "kernel"}, {ConfigKind::Baseline, "baseline"}}}};
constexpr EnumTexts<CompileStatus, 3> kCompileStatusTexts{
    "compiles.status",
    {{{CompileStatus::Ok, "ok"}, {CompileStatus::Failed, "failed"}, {CompileStatus::Invalid, "invalid"}}}};
constexpr EnumTexts<VerificationStatus, 4> kVerificationStatusTexts{
    "verifications.status",
    {{{VerificationStatus::Passed, "passed"}, {VerificationStatus::Failed, "failed"},
      {VerificationStatus::Invalid, "invalid"}, {VerificationStatus::Crashed, "crashed"}}}};
constexpr EnumTexts<MeasurementStatus, 4> kMeasurementStatusTexts{
    "measurements.status",
    {{{MeasurementStatus::Ok, "ok"}, {MeasurementStatus::Failed, "failed"}, {MeasurementStatus::Crashed, "crashed"},
      {MeasurementStatus::Timeout, "timeout"}}}};
constexpr EnumTexts<L2Mode, 2> kL2ModeTexts{"measurements.l2_mode", {{{L2Mode::Cold, "cold"}, {L2Mode::Warm, "warm"}}}};
constexpr EnumTexts<PruningStage, 2> kPruningStageTexts{
    "pruning_counts.stage", {{{PruningStage::PreCompile, "pre_compile"}, {PruningStage::PostCompile, "post_compile"}}}};

}  // namespace

std::string_view to_string(RunStatus value) { return kRunStatusTexts.text(value); }
std::string_view to_string(ConfigKind value) { return kConfigKindTexts.text(value); }
std::string_view to_string(CompileStatus value) { return kCompileStatusTexts.text(value); }
std::string_view to_string(VerificationStatus value) { return kVerificationStatusTexts.text(value); }
std::string_view to_string(MeasurementStatus value) { return kMeasurementStatusTexts.text(value); }
std::string_view to_string(L2Mode value) { return kL2ModeTexts.text(value); }
std::string_view to_string(PruningStage value) { return kPruningStageTexts.text(value); }

namespace {

// The key of a run's GPU, as SQL over a runs row aliased `r`.
constexpr std::string_view kGpuKeyOfRun = "(CASE WHEN r.gpu_profile <> '' THEN r.gpu_profile ELSE r.gpu_name END)";

std::string new_uuid() {
  std::random_device device;
  std::mt19937_64 generator((static_cast<std::uint64_t>(device()) << 32) ^ device());
  std::array<std::uint8_t, 16> bytes{};
  for (auto& byte : bytes) byte = static_cast<std::uint8_t>(generator() & 0xff);
  bytes[6] = static_cast<std::uint8_t>((bytes[6] & 0x0f) | 0x40);  // version 4 (random)
  bytes[8] = static_cast<std::uint8_t>((bytes[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[bytes[i] >> 4];
    text += kHex[bytes[i] & 0x0f];
  }
  return text;
}

Blob encode_samples(const std::vector<double>& samples) {
  Blob blob(samples.size() * 8);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto bits = std::bit_cast<std::uint64_t>(samples[i]);
    for (int b = 0; b < 8; ++b) blob[i * 8 + static_cast<std::size_t>(b)] = static_cast<std::byte>((bits >> (8 * b)) & 0xff);
  }
  return blob;
}

std::vector<double> decode_samples(const Blob& blob) {
  if (blob.size() % 8 != 0) QTUNE_LIBRARY_ERROR("SQLite", "measurements.samples holds " + std::to_string(blob.size()) + " bytes, not a multiple of 8");
  std::vector<double> samples(blob.size() / 8);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    std::uint64_t bits = 0;
    for (int b = 0; b < 8; ++b) bits |= static_cast<std::uint64_t>(blob[i * 8 + static_cast<std::size_t>(b)]) << (8 * b);
    samples[i] = std::bit_cast<double>(bits);
  }
  return samples;
}

void require(bool condition, const std::string& message) {
  if (!condition) QTUNE_THROW(Error, message);
}

bool finite_non_negative(double value) { return std::isfinite(value) && value >= 0; }

void validate(const Measurement& measurement) {
  const std::int64_t samples = static_cast<std::int64_t>(measurement.samples_us.size());
  require(measurement.sample_count == 0 || measurement.sample_count >= samples,
          "measurement: sample_count " + std::to_string(measurement.sample_count) + " is less than the " + std::to_string(samples) +
              " samples given");
  for (const double sample : measurement.samples_us) require(finite_non_negative(sample), "measurement: a sample is negative or not finite");
  if (measurement.status == MeasurementStatus::Ok) {
    require(measurement.stats.has_value(), "measurement: an ok measurement needs its statistics");
  }
  if (measurement.stats) {
    const TimingStats& s = *measurement.stats;
    for (const double value : {s.median_us, s.p10_us, s.p90_us, s.min_us, s.max_us, s.mean_us, s.stddev_us, s.ci_low_us, s.ci_high_us}) {
      require(finite_non_negative(value), "measurement: statistics must be finite and non-negative");
    }
    require(s.median_us > 0, "measurement: median_us must be positive");
    require(s.min_us <= s.p10_us && s.p10_us <= s.median_us && s.median_us <= s.p90_us && s.p90_us <= s.max_us,
            "measurement: expected min <= p10 <= median <= p90 <= max");
    require(s.ci_low_us <= s.median_us && s.median_us <= s.ci_high_us, "measurement: the median must lie in its confidence interval");
  }
}

// Column lists, shared by the SELECTs and the row readers below so the two never drift apart.
constexpr std::string_view kRunColumns =
    "r.id, r.uuid, r.kind, r.status, r.started_at, r.finished_at, r.tool_version, r.git_sha, r.cuda_version, "
    "r.driver_version, r.host, r.gpu_name, r.gpu_uuid, r.gpu_profile, r.sm, r.sm_count, r.sm_clock_mhz, r.mem_clock_mhz, "
    "r.command_line, r.shard, r.notes";

RunRecord read_run(const Statement& row) {
  RunRecord run;
  run.id = RunId{row.column_int(0)};
  run.uuid = row.column_text(1);
  run.kind = row.column_text(2);
  run.status = kRunStatusTexts.value(row.column_text(3));
  run.started_at = row.column_text(4);
  run.finished_at = row.column_optional_text(5);
  run.tool_version = row.column_text(6);
  run.git_sha = row.column_text(7);
  run.cuda_version = row.column_text(8);
  run.driver_version = row.column_text(9);
  run.host = row.column_text(10);
  run.gpu_name = row.column_text(11);
  run.gpu_uuid = row.column_text(12);
  run.gpu_profile = row.column_text(13);
  run.sm = static_cast<int>(row.column_int(14));
  run.sm_count = static_cast<int>(row.column_int(15));
  if (const auto clock = row.column_optional_int(16)) run.sm_clock_mhz = static_cast<int>(*clock);
  if (const auto clock = row.column_optional_int(17)) run.mem_clock_mhz = static_cast<int>(*clock);
  run.command_line = row.column_text(18);
  run.shard = row.column_text(19);
  run.notes = row.column_text(20);
  return run;
}

constexpr std::string_view kProblemColumns = "id, format, m, n, k";

ProblemRecord read_problem(const Statement& row) {
  ProblemRecord problem;
  problem.id = ProblemId{row.column_int(0)};
  problem.format = row.column_text(1);
  problem.m = row.column_int(2);
  problem.n = row.column_int(3);
  problem.k = row.column_int(4);
  return problem;
}

constexpr std::string_view kConfigColumns = "c.id, c.kind, c.family, c.params, c.source_hash";

KernelConfigRecord read_config(const Statement& row) {
  KernelConfigRecord config;
  config.id = ConfigId{row.column_int(0)};
  config.kind = kConfigKindTexts.value(row.column_text(1));
  config.family = row.column_text(2);
  config.params_json = row.column_text(3);
  config.source_hash = row.column_text(4);
  return config;
}

constexpr std::string_view kCompileColumns =
    "x.id, x.run_id, x.config_id, x.format, x.arch, x.cache_key, x.cache_hit, x.compile_seconds, x.registers, "
    "x.spill_store_bytes, x.spill_load_bytes, x.shared_bytes, x.stack_bytes, x.status, x.message, x.created_at";

std::optional<int> optional_int_column(const Statement& row, int column) {
  const auto value = row.column_optional_int(column);
  if (!value) return std::nullopt;
  return static_cast<int>(*value);
}

CompileRecord read_compile(const Statement& row) {
  CompileRecord compile;
  compile.id = CompileId{row.column_int(0)};
  compile.run = RunId{row.column_int(1)};
  compile.config = ConfigId{row.column_int(2)};
  compile.format = row.column_text(3);
  compile.arch = row.column_text(4);
  compile.cache_key = row.column_text(5);
  compile.cache_hit = row.column_int(6) != 0;
  compile.compile_seconds = row.column_optional_double(7);
  compile.registers = optional_int_column(row, 8);
  compile.spill_store_bytes = optional_int_column(row, 9);
  compile.spill_load_bytes = optional_int_column(row, 10);
  compile.shared_bytes = optional_int_column(row, 11);
  compile.stack_bytes = optional_int_column(row, 12);
  compile.status = kCompileStatusTexts.value(row.column_text(13));
  compile.message = row.column_text(14);
  compile.created_at = row.column_text(15);
  return compile;
}

constexpr std::string_view kVerificationColumns =
    "x.id, x.run_id, x.problem_id, x.config_id, x.status, x.max_rel_error, x.max_abs_error, x.tolerance, x.message, x.created_at";

VerificationRecord read_verification(const Statement& row) {
  VerificationRecord verification;
  verification.id = VerificationId{row.column_int(0)};
  verification.run = RunId{row.column_int(1)};
  verification.problem = ProblemId{row.column_int(2)};
  verification.config = ConfigId{row.column_int(3)};
  verification.status = kVerificationStatusTexts.value(row.column_text(4));
  verification.max_rel_error = row.column_optional_double(5);
  verification.max_abs_error = row.column_optional_double(6);
  verification.tolerance = row.column_optional_double(7);
  verification.message = row.column_text(8);
  verification.created_at = row.column_text(9);
  return verification;
}

constexpr std::string_view kMeasurementColumns =
    "x.id, x.run_id, x.problem_id, x.config_id, x.status, x.median_us, x.p10_us, x.p90_us, x.min_us, x.max_us, x.mean_us, "
    "x.stddev_us, x.ci_low_us, x.ci_high_us, x.sample_count, x.samples, x.l2_mode, x.sm_clock_mhz, x.mem_clock_mhz, "
    "x.temperature_c, x.power_w, x.throttled, x.phase, x.message, x.created_at";

MeasurementRecord read_measurement(const Statement& row) {
  MeasurementRecord measurement;
  measurement.id = MeasurementId{row.column_int(0)};
  measurement.run = RunId{row.column_int(1)};
  measurement.problem = ProblemId{row.column_int(2)};
  measurement.config = ConfigId{row.column_int(3)};
  measurement.status = kMeasurementStatusTexts.value(row.column_text(4));
  if (!row.is_null(5)) {
    TimingStats stats;
    stats.median_us = row.column_double(5);
    stats.p10_us = row.column_double(6);
    stats.p90_us = row.column_double(7);
    stats.min_us = row.column_double(8);
    stats.max_us = row.column_double(9);
    stats.mean_us = row.column_double(10);
    stats.stddev_us = row.column_double(11);
    stats.ci_low_us = row.column_double(12);
    stats.ci_high_us = row.column_double(13);
    measurement.stats = stats;
  }
  measurement.sample_count = row.column_int(14);
  if (!row.is_null(15)) measurement.samples_us = decode_samples(row.column_blob(15));
  measurement.l2_mode = kL2ModeTexts.value(row.column_text(16));
  measurement.sm_clock_mhz = row.column_optional_double(17);
  measurement.mem_clock_mhz = row.column_optional_double(18);
  measurement.temperature_c = row.column_optional_double(19);
  measurement.power_w = row.column_optional_double(20);
  measurement.throttled = row.column_int(21) != 0;
  measurement.phase = row.column_text(22);
  measurement.message = row.column_text(23);
  measurement.created_at = row.column_text(24);
  return measurement;
}

constexpr std::string_view kWinnerColumns = "w.run_id, w.problem_id, w.config_id, w.median_us, w.reason, w.gpu, w.decided_at";

WinnerRecord read_winner(const Statement& row) {
  WinnerRecord winner;
  winner.run = RunId{row.column_int(0)};
  winner.problem = ProblemId{row.column_int(1)};
  winner.config = ConfigId{row.column_int(2)};
  winner.median_us = row.column_double(3);
  winner.reason = row.column_text(4);
  winner.gpu = row.column_text(5);
  winner.decided_at = row.column_text(6);
  return winner;
}

// "AND x.run_id = ?" etc. for the set fields of a filter; the run alias `r` must be joined for the gpu condition.
struct FilterSql {
  std::string where;
  std::vector<std::string> text_values;  // bound after the integer ones, in order
  std::vector<std::int64_t> int_values;
};

FilterSql filter_sql(const RowFilter& filter, bool has_problem_column) {
  FilterSql sql;
  if (filter.run) {
    sql.where += " AND x.run_id = ?";
    sql.int_values.push_back(id_value(*filter.run));
  }
  if (filter.problem && has_problem_column) {
    sql.where += " AND x.problem_id = ?";
    sql.int_values.push_back(id_value(*filter.problem));
  }
  if (filter.config) {
    sql.where += " AND x.config_id = ?";
    sql.int_values.push_back(id_value(*filter.config));
  }
  if (filter.gpu) {
    sql.where += " AND " + std::string(kGpuKeyOfRun) + " = ?";
    sql.text_values.push_back(*filter.gpu);
  }
  return sql;
}

void bind_filter(Statement& statement, const FilterSql& sql) {
  int index = 0;
  for (const auto value : sql.int_values) statement.bind(++index, value);
  for (const auto& value : sql.text_values) statement.bind(++index, value);
}

// The rows of a per-run table (alias x, joined to its run r) that match `filter`, in insertion order.
template <typename Record>
std::vector<Record> list_filtered(Connection& connection, std::string_view columns, std::string_view table,
                                  const RowFilter& filter, bool has_problem_column, Record (*read)(const Statement&)) {
  const FilterSql where = filter_sql(filter, has_problem_column);
  Statement statement = connection.prepare("SELECT " + std::string(columns) + " FROM " + std::string(table) +
                                           " x JOIN runs r ON r.id = x.run_id WHERE 1" + where.where + " ORDER BY x.id");
  bind_filter(statement, where);
  std::vector<Record> rows;
  while (statement.step()) rows.push_back(read(statement));
  return rows;
}

}  // namespace

::qtune::KernelConfig to_kernel_config(const KernelConfigRecord& config) {
  nlohmann::json params;
  try {
    params = nlohmann::json::parse(config.params_json);
  } catch (const nlohmann::json::parse_error& error) {
    QTUNE_INPUT_ERROR("kernel config " + std::to_string(id_value(config.id)) + ": params: " + error.what());
  }
  return ::qtune::KernelConfig::from_json(nlohmann::json{{"family", config.family}, {"params", params}});
}

std::string canonical_params(std::string_view params_json) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(params_json);
  } catch (const nlohmann::json::parse_error& error) {
    QTUNE_INPUT_ERROR("kernel config params: invalid JSON: " + std::string(error.what()));
  }
  if (!parsed.is_object()) QTUNE_INPUT_ERROR("kernel config params: expected a JSON object, got " + std::string(parsed.type_name()));
  return parsed.dump();  // nlohmann objects keep their keys sorted, and dump() writes no spaces
}

// ---------------------------------------------------------------------------------------------------- open

Store::Store(std::unique_ptr<Connection> connection, int version_at_open, int schema_version)
    : connection_(std::move(connection)), version_at_open_(version_at_open), schema_version_(schema_version) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

const fs::path& Store::path() const { return connection_->path(); }
bool Store::read_only() const { return connection_->read_only(); }

namespace {

std::uint32_t big_endian_u32(const unsigned char* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

// Says in one line what is wrong with a non-empty file that SQLite would only call "not a database" or "malformed":
// not SQLite's header, or shorter than the pages its header counts (a truncated copy).
void require_sqlite_file(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) QTUNE_INPUT_ERROR(path.string() + ": cannot be read (" + std::strerror(errno) + ")");
  std::array<unsigned char, 100> header{};
  stream.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header.size()));
  static constexpr char kMagic[] = "SQLite format 3";  // and its terminating NUL: 16 bytes
  if (stream.gcount() < static_cast<std::streamsize>(header.size()) || std::memcmp(header.data(), kMagic, sizeof(kMagic)) != 0) {
    QTUNE_INPUT_ERROR(path.string() + ": not a SQLite database (it does not begin with SQLite's file header)");
  }
  std::error_code error;
  if (fs::exists(path.string() + "-wal", error)) return;  // the WAL may hold pages the main file does not have yet
  const std::uint64_t page_size = header[16] == 0 && header[17] == 1 ? 65536 : (std::uint64_t{header[16]} << 8) | header[17];
  // The header's page count is valid only when its two change counters agree (SQLite's file format, section 1.3.7).
  const bool count_valid = std::memcmp(header.data() + 24, header.data() + 92, 4) == 0;
  const std::uint64_t pages = big_endian_u32(header.data() + 28);
  const std::uint64_t size = fs::file_size(path, error);
  if (!error && count_valid && pages > 0 && size < pages * page_size) {
    QTUNE_INPUT_ERROR(path.string() + ": truncated: " + std::to_string(size) + " bytes, but its header counts " + std::to_string(pages) +
                      " pages of " + std::to_string(page_size) + " bytes (an incomplete copy?); it was left unchanged");
  }
}

// A file SQLite cannot read at all is the user's input, not a failure of qtune: one line, no SQL.
template <typename Body>
auto reading_file(const fs::path& path, const Body& body) {
  try {
    return body();
  } catch (const SqliteError& error) {
    QTUNE_INPUT_ERROR(path.string() + ": SQLite cannot read it as a database (" + error.reason() + "); it was left unchanged");
  }
}

struct CheckedConnection {
  std::unique_ptr<Connection> connection;
  int version = 0;
};

// A read-only connection to an existing, non-empty file and its schema version, refused with one line unless it is
// SQLite and a qtune database of a version this build reads, with its tables.
CheckedConnection open_checked_read_only(const fs::path& path, int busy_timeout_ms) {
  require_sqlite_file(path);
  return reading_file(path, [&] {
    auto connection = std::make_unique<Connection>(path, OpenMode::ReadOnly, busy_timeout_ms);
    const SchemaState state = read_schema_state(*connection);
    require_usable(state, path);
    const int version = static_cast<int>(state.user_version);
    require_schema_tables(*connection, version, path);
    return CheckedConnection{std::move(connection), version};
  });
}

// SQLite answers a journal-mode switch that races another connection's first writes with SQLITE_BUSY at once, without
// its busy handler (to avoid a deadlock): retry it for as long as the busy timeout would have waited.
void switch_to_wal(Connection& connection, int busy_timeout_ms) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, std::chrono::milliseconds(50))) {
    try {
      Statement journal = connection.prepare("PRAGMA journal_mode = WAL");
      journal.run();
      return;
    } catch (const SqliteError& error) {
      if (!error.busy() || std::chrono::steady_clock::now() + pause > give_up) throw;
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace

Store Store::open(const fs::path& path, const OpenOptions& options) {
  std::error_code error;
  const bool exists = fs::exists(path, error);
  if (exists && fs::is_directory(path, error)) QTUNE_INPUT_ERROR(path.string() + ": is a directory, not a database file");
  const bool has_content = exists && fs::file_size(path, error) > 0;

  if (options.read_only) {
    if (!exists) QTUNE_INPUT_ERROR(path.string() + ": no such database (create one with `qtune db init --db " + path.string() + "`)");
    if (!has_content) QTUNE_INPUT_ERROR(path.string() + ": an empty file, not a qtune database (`qtune db init --db " + path.string() + "` makes it one)");
    CheckedConnection checked = open_checked_read_only(path, options.busy_timeout_ms);
    return Store(std::move(checked.connection), checked.version, checked.version);
  }

  // Look at an existing file through a read-only connection first: a file to refuse must not see a single write.
  if (has_content) open_checked_read_only(path, options.busy_timeout_ms);
  auto connection = std::make_unique<Connection>(path, OpenMode::ReadWriteCreate, options.busy_timeout_ms);
  const int version_at_open = migrate(*connection);
  // WAL lets readers (db info, reports) run while a tuner writes; NORMAL sync is crash-safe in WAL mode.
  switch_to_wal(*connection, options.busy_timeout_ms);
  connection->execute("PRAGMA synchronous = NORMAL");
  return Store(std::move(connection), version_at_open, kSchemaVersion);
}

void Store::require_readable() {
  const std::string file = path().string();
  if (schema_version_ == 0) QTUNE_INPUT_ERROR(file + ": holds no qtune tables yet (`qtune db init --db " + file + "` creates them)");
  if (schema_version_ < kOldestReadableVersion) {
    QTUNE_INPUT_ERROR(file + ": schema version " + std::to_string(schema_version_) + " is too old to read; `qtune db init --db " + file +
                      "` migrates it");
  }
  reading_file(path(), [&] {
    Statement broken = connection_->prepare("PRAGMA foreign_key_check");
    if (broken.step()) {
      QTUNE_INPUT_ERROR(file + ": damaged: row " + broken.column_text(1) + " of table " + broken.column_text(0) +
                        " refers to a missing row of " + broken.column_text(2) + " (`qtune db check --db " + file + "` lists all)");
    }
  });
}

// ---------------------------------------------------------------------------------------------------- writes

RunId Store::insert_run(const RunInfo& run) {
  require(!run.tool_version.empty(), "insert_run: tool_version is empty");
  require(!run.git_sha.empty(), "insert_run: git_sha is empty");
  Transaction transaction(*connection_);
  mark_interrupted_runs();
  Statement statement = connection_->prepare(
      "INSERT INTO runs (uuid, kind, started_at, tool_version, git_sha, cuda_version, driver_version, host, gpu_name, "
      "gpu_uuid, gpu_profile, sm, sm_count, sm_clock_mhz, mem_clock_mhz, command_line, shard, notes) "
      "VALUES (?, ?, COALESCE(NULLIF(?, ''), strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  statement.bind_all(run.uuid.empty() ? new_uuid() : run.uuid, run.kind, run.started_at, run.tool_version, run.git_sha,
                     run.cuda_version, run.driver_version, run.host, run.gpu_name, run.gpu_uuid, run.gpu_profile, run.sm,
                     run.sm_count, run.sm_clock_mhz, run.mem_clock_mhz, run.command_line, run.shard, run.notes);
  statement.run();
  const RunId id{connection_->last_insert_rowid()};
  // The process that inserts a run is the one running it.
  const ProcessIdentity process = current_process();
  Statement owner = connection_->prepare("INSERT INTO run_processes (run_id, host, pid, process_start) VALUES (?, ?, ?, ?)");
  owner.bind_all(id_value(id), process.host, process.pid, process.start);
  owner.run();
  transaction.commit();
  return id;
}

namespace {

struct RunOfProcess {
  RunId run{};
  ProcessIdentity process;
};

// Runs still marked running whose process is known to be gone.
std::vector<RunOfProcess> runs_of_gone_processes(Connection& connection) {
  Statement statement = connection.prepare(
      "SELECT r.id, p.host, p.pid, p.process_start FROM runs r JOIN run_processes p ON p.run_id = r.id "
      "WHERE r.status = 'running' ORDER BY r.id");
  std::vector<RunOfProcess> gone;
  while (statement.step()) {
    RunOfProcess row{RunId{statement.column_int(0)}, ProcessIdentity{statement.column_text(1), statement.column_int(2), statement.column_text(3)}};
    if (process_state(row.process) == ProcessState::Gone) gone.push_back(std::move(row));
  }
  return gone;
}

}  // namespace

std::vector<RunId> Store::mark_interrupted_runs() {
  Transaction transaction(*connection_);
  std::vector<RunId> marked;
  for (const RunOfProcess& row : runs_of_gone_processes(*connection_)) {
    Statement statement = connection_->prepare("UPDATE runs SET status = 'interrupted' WHERE id = ? AND status = 'running'");
    statement.bind(1, id_value(row.run));
    statement.run();
    if (connection_->changes() == 1) marked.push_back(row.run);
  }
  transaction.commit();
  return marked;
}

void Store::finish_run(RunId run, RunStatus status) {
  Statement statement = connection_->prepare(
      "UPDATE runs SET status = ?, finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?");
  statement.bind_all(to_string(status), id_value(run));
  statement.run();
  require(connection_->changes() == 1, "finish_run: no run #" + std::to_string(id_value(run)));
}

ProblemId Store::upsert_problem(const Problem& problem) {
  require(!problem.format.empty(), "upsert_problem: empty format");
  require(problem.m > 0 && problem.n > 0 && problem.k > 0, "upsert_problem: M, N and K must be positive");
  Transaction transaction(*connection_);
  Statement insert = connection_->prepare("INSERT OR IGNORE INTO problems (format, m, n, k) VALUES (?, ?, ?, ?)");
  insert.bind_all(problem.format, problem.m, problem.n, problem.k);
  insert.run();
  const auto id = find_problem(problem);
  if (!id) QTUNE_LIBRARY_ERROR("SQLite", "problem vanished right after its insert");
  transaction.commit();
  return *id;
}

ConfigId Store::upsert_config(const KernelConfig& config) {
  require(!config.family.empty(), "upsert_config: empty family");
  KernelConfig canonical = config;
  canonical.params_json = canonical_params(config.params_json);
  Transaction transaction(*connection_);
  Statement insert = connection_->prepare("INSERT OR IGNORE INTO kernel_configs (kind, family, params, source_hash) VALUES (?, ?, ?, ?)");
  insert.bind_all(to_string(canonical.kind), canonical.family, canonical.params_json, canonical.source_hash);
  insert.run();
  const auto id = find_config(canonical);
  if (!id) QTUNE_LIBRARY_ERROR("SQLite", "kernel config vanished right after its insert");
  transaction.commit();
  return *id;
}

CompileId Store::insert_compile(const CompileResult& compile) {
  require(!compile.arch.empty(), "insert_compile: empty arch");
  Statement statement = connection_->prepare(
      "INSERT INTO compiles (run_id, config_id, format, arch, cache_key, cache_hit, compile_seconds, registers, "
      "spill_store_bytes, spill_load_bytes, shared_bytes, stack_bytes, status, message) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  statement.bind_all(id_value(compile.run), id_value(compile.config), compile.format, compile.arch, compile.cache_key,
                     compile.cache_hit ? 1 : 0, compile.compile_seconds, compile.registers, compile.spill_store_bytes,
                     compile.spill_load_bytes, compile.shared_bytes, compile.stack_bytes, to_string(compile.status), compile.message);
  statement.run();
  return CompileId{connection_->last_insert_rowid()};
}

VerificationId Store::insert_verification(const Verification& verification) {
  Statement statement = connection_->prepare(
      "INSERT INTO verifications (run_id, problem_id, config_id, status, max_rel_error, max_abs_error, tolerance, message) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  statement.bind_all(id_value(verification.run), id_value(verification.problem), id_value(verification.config),
                     to_string(verification.status), verification.max_rel_error, verification.max_abs_error,
                     verification.tolerance, verification.message);
  statement.run();
  return VerificationId{connection_->last_insert_rowid()};
}

MeasurementId Store::insert_measurement(const Measurement& measurement) {
  validate(measurement);
  Statement statement = connection_->prepare(
      "INSERT INTO measurements (run_id, problem_id, config_id, status, median_us, p10_us, p90_us, min_us, max_us, mean_us, "
      "stddev_us, ci_low_us, ci_high_us, sample_count, samples, l2_mode, sm_clock_mhz, mem_clock_mhz, temperature_c, "
      "power_w, throttled, phase, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  statement.bind_all(id_value(measurement.run), id_value(measurement.problem), id_value(measurement.config),
                     to_string(measurement.status));
  int index = 4;
  if (measurement.stats) {
    const TimingStats& s = *measurement.stats;
    for (const double value : {s.median_us, s.p10_us, s.p90_us, s.min_us, s.max_us, s.mean_us, s.stddev_us, s.ci_low_us, s.ci_high_us}) {
      statement.bind(++index, value);
    }
  } else {
    for (int i = 0; i < 9; ++i) statement.bind_null(++index);
  }
  const std::int64_t sample_count =
      measurement.sample_count != 0 ? measurement.sample_count : static_cast<std::int64_t>(measurement.samples_us.size());
  statement.bind(++index, sample_count);
  if (measurement.samples_us.empty()) {
    statement.bind_null(++index);
  } else {
    statement.bind(++index, encode_samples(measurement.samples_us));
  }
  statement.bind(++index, to_string(measurement.l2_mode));
  statement.bind(++index, measurement.sm_clock_mhz);
  statement.bind(++index, measurement.mem_clock_mhz);
  statement.bind(++index, measurement.temperature_c);
  statement.bind(++index, measurement.power_w);
  statement.bind(++index, measurement.throttled ? 1 : 0);
  statement.bind(++index, measurement.phase);
  statement.bind(++index, measurement.message);
  statement.run();
  return MeasurementId{connection_->last_insert_rowid()};
}

void Store::set_winner(const Winner& winner) {
  require(std::isfinite(winner.median_us) && winner.median_us > 0, "set_winner: median_us must be positive");
  Transaction transaction(*connection_);
  const auto run = get_run(winner.run);
  require(run.has_value(), "set_winner: no run #" + std::to_string(id_value(winner.run)));
  const std::string gpu = run->gpu_key();
  require(!gpu.empty(), "set_winner: run #" + std::to_string(id_value(winner.run)) + " has neither a GPU profile nor a GPU name");
  const auto config = get_config(winner.config);
  require(config.has_value(), "set_winner: no kernel config #" + std::to_string(id_value(winner.config)));
  require(config->kind == ConfigKind::Kernel, "set_winner: config #" + std::to_string(id_value(winner.config)) + " is a baseline; baselines never win");

  Statement verdicts = connection_->prepare(
      "SELECT sum(x.status = 'passed'), sum(x.status <> 'passed') FROM verifications x JOIN runs r ON r.id = x.run_id "
      "WHERE x.problem_id = ? AND x.config_id = ? AND " + std::string(kGpuKeyOfRun) + " = ?");
  verdicts.bind_all(id_value(winner.problem), id_value(winner.config), gpu);
  verdicts.step();
  const std::int64_t passed = verdicts.column_int(0);
  const std::int64_t not_passed = verdicts.column_int(1);
  const std::string which = "set_winner: config #" + std::to_string(id_value(winner.config)) + " for problem #" +
                            std::to_string(id_value(winner.problem)) + " on " + gpu;
  require(not_passed == 0, which + " failed verification and can never win");
  require(passed > 0, which + " has not passed verification");

  Statement upsert = connection_->prepare(
      "INSERT INTO winners (run_id, problem_id, gpu, config_id, median_us, reason) VALUES (?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (problem_id, gpu) DO UPDATE SET run_id = excluded.run_id, config_id = excluded.config_id, "
      "median_us = excluded.median_us, reason = excluded.reason, decided_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");
  upsert.bind_all(id_value(winner.run), id_value(winner.problem), gpu, id_value(winner.config), winner.median_us, winner.reason);
  upsert.run();
  transaction.commit();
}

void Store::set_pruning_count(const PruningCount& count) {
  require(!count.rule.empty(), "set_pruning_count: empty rule");
  require(count.count >= 0, "set_pruning_count: negative count");
  Statement statement = connection_->prepare(
      "INSERT INTO pruning_counts (run_id, problem_id, stage, rule, count) VALUES (?, ?, ?, ?, ?) "
      "ON CONFLICT (run_id, problem_id, stage, rule) DO UPDATE SET count = excluded.count");
  statement.bind_all(id_value(count.run), id_value(count.problem), to_string(count.stage), count.rule, count.count);
  statement.run();
}

ExternalResultId Store::upsert_external_result(const ExternalResult& result) {
  require(!result.source.empty(), "upsert_external_result: empty source");
  require(!result.gpu.empty(), "upsert_external_result: empty gpu");
  require(std::isfinite(result.time_us) && result.time_us > 0, "upsert_external_result: time_us must be positive");
  Transaction transaction(*connection_);
  Statement statement = connection_->prepare(
      "INSERT INTO external_results (source, label, problem_id, gpu, time_us, notes) VALUES (?, ?, ?, ?, ?, ?) "
      "ON CONFLICT (source, label, problem_id, gpu) DO UPDATE SET time_us = excluded.time_us, notes = excluded.notes, "
      "imported_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')");
  statement.bind_all(result.source, result.label, id_value(result.problem), result.gpu, result.time_us, result.notes);
  statement.run();
  Statement find = connection_->prepare("SELECT id FROM external_results WHERE source = ? AND label = ? AND problem_id = ? AND gpu = ?");
  find.bind_all(result.source, result.label, id_value(result.problem), result.gpu);
  if (!find.step()) QTUNE_LIBRARY_ERROR("SQLite", "external result vanished right after its insert");
  const ExternalResultId id{find.column_int(0)};
  transaction.commit();
  return id;
}

// ---------------------------------------------------------------------------------------------------- queries

std::optional<RunRecord> Store::get_run(RunId id) {
  Statement statement = connection_->prepare("SELECT " + std::string(kRunColumns) + " FROM runs r WHERE r.id = ?");
  statement.bind(1, id_value(id));
  if (!statement.step()) return std::nullopt;
  return read_run(statement);
}

std::optional<RunRecord> Store::find_run(std::string_view uuid) {
  Statement statement = connection_->prepare("SELECT " + std::string(kRunColumns) + " FROM runs r WHERE r.uuid = ?");
  statement.bind(1, uuid);
  if (!statement.step()) return std::nullopt;
  return read_run(statement);
}

std::vector<RunRecord> Store::list_runs() {
  Statement statement = connection_->prepare("SELECT " + std::string(kRunColumns) + " FROM runs r ORDER BY r.id");
  std::vector<RunRecord> runs;
  while (statement.step()) runs.push_back(read_run(statement));
  return runs;
}

std::vector<RunSummary> Store::run_summaries() {
  Statement statement = connection_->prepare(
      "SELECT " + std::string(kRunColumns) +
      ", (SELECT count(*) FROM compiles x WHERE x.run_id = r.id), (SELECT count(*) FROM verifications x WHERE x.run_id = r.id), "
      "(SELECT count(*) FROM measurements x WHERE x.run_id = r.id), (SELECT count(*) FROM winners x WHERE x.run_id = r.id) "
      "FROM runs r ORDER BY r.id");
  std::vector<RunSummary> summaries;
  while (statement.step()) {
    RunSummary summary;
    summary.run = read_run(statement);
    summary.compiles = statement.column_int(21);
    summary.verifications = statement.column_int(22);
    summary.measurements = statement.column_int(23);
    summary.winners = statement.column_int(24);
    summaries.push_back(std::move(summary));
  }
  return summaries;
}

std::optional<ProblemRecord> Store::get_problem(ProblemId id) {
  Statement statement = connection_->prepare("SELECT " + std::string(kProblemColumns) + " FROM problems WHERE id = ?");
  statement.bind(1, id_value(id));
  if (!statement.step()) return std::nullopt;
  return read_problem(statement);
}

std::optional<ProblemId> Store::find_problem(const Problem& problem) {
  Statement statement = connection_->prepare("SELECT id FROM problems WHERE format = ? AND m = ? AND n = ? AND k = ?");
  statement.bind_all(problem.format, problem.m, problem.n, problem.k);
  if (!statement.step()) return std::nullopt;
  return ProblemId{statement.column_int(0)};
}

std::vector<ProblemRecord> Store::list_problems() {
  Statement statement = connection_->prepare("SELECT " + std::string(kProblemColumns) + " FROM problems ORDER BY id");
  std::vector<ProblemRecord> problems;
  while (statement.step()) problems.push_back(read_problem(statement));
  return problems;
}

std::optional<KernelConfigRecord> Store::get_config(ConfigId id) {
  Statement statement = connection_->prepare("SELECT " + std::string(kConfigColumns) + " FROM kernel_configs c WHERE c.id = ?");
  statement.bind(1, id_value(id));
  if (!statement.step()) return std::nullopt;
  return read_config(statement);
}

std::optional<ConfigId> Store::find_config(const KernelConfig& config) {
  Statement statement = connection_->prepare(
      "SELECT id FROM kernel_configs WHERE kind = ? AND family = ? AND params = ? AND source_hash = ?");
  statement.bind_all(to_string(config.kind), config.family, canonical_params(config.params_json), config.source_hash);
  if (!statement.step()) return std::nullopt;
  return ConfigId{statement.column_int(0)};
}

std::vector<KernelConfigRecord> Store::list_configs() {
  Statement statement = connection_->prepare("SELECT " + std::string(kConfigColumns) + " FROM kernel_configs c ORDER BY c.id");
  std::vector<KernelConfigRecord> configs;
  while (statement.step()) configs.push_back(read_config(statement));
  return configs;
}

std::vector<CompileRecord> Store::list_compiles(const RowFilter& filter) {
  return list_filtered(*connection_, kCompileColumns, "compiles", filter, false, read_compile);
}

std::vector<VerificationRecord> Store::list_verifications(const RowFilter& filter) {
  return list_filtered(*connection_, kVerificationColumns, "verifications", filter, true, read_verification);
}

std::vector<MeasurementRecord> Store::list_measurements(const RowFilter& filter) {
  return list_filtered(*connection_, kMeasurementColumns, "measurements", filter, true, read_measurement);
}

std::optional<MeasurementRecord> Store::best_measurement(ProblemId problem, std::string_view gpu, L2Mode l2_mode) {
  const std::string gpu_of_run = std::string(kGpuKeyOfRun);
  Statement statement = connection_->prepare(
      "SELECT " + std::string(kMeasurementColumns) +
      " FROM measurements x JOIN runs r ON r.id = x.run_id JOIN kernel_configs c ON c.id = x.config_id "
      "WHERE x.problem_id = ?1 AND " + gpu_of_run + " = ?2 AND x.status = 'ok' AND x.l2_mode = ?3 AND c.kind = 'kernel' "
      "AND NOT EXISTS (SELECT 1 FROM verifications v JOIN runs r ON r.id = v.run_id WHERE v.problem_id = x.problem_id "
      "AND v.config_id = x.config_id AND v.status <> 'passed' AND " + gpu_of_run + " = ?2) "
      "ORDER BY x.median_us, x.id LIMIT 1");
  statement.bind_all(id_value(problem), gpu, to_string(l2_mode));
  if (!statement.step()) return std::nullopt;
  return read_measurement(statement);
}

std::optional<WinnerRecord> Store::get_winner(ProblemId problem, std::string_view gpu) {
  Statement statement = connection_->prepare("SELECT " + std::string(kWinnerColumns) + " FROM winners w WHERE w.problem_id = ? AND w.gpu = ?");
  statement.bind_all(id_value(problem), gpu);
  if (!statement.step()) return std::nullopt;
  return read_winner(statement);
}

std::vector<WinnerRecord> Store::list_winners(std::optional<std::string> gpu) {
  Statement statement = connection_->prepare("SELECT " + std::string(kWinnerColumns) +
                                             " FROM winners w WHERE ?1 IS NULL OR w.gpu = ?1 ORDER BY w.gpu, w.problem_id");
  statement.bind(1, gpu);
  std::vector<WinnerRecord> winners;
  while (statement.step()) winners.push_back(read_winner(statement));
  return winners;
}

std::vector<PruningCount> Store::list_pruning_counts(const RowFilter& filter) {
  RowFilter without_config = filter;
  without_config.config.reset();
  const FilterSql where = filter_sql(without_config, true);
  Statement statement = connection_->prepare(
      "SELECT x.run_id, x.problem_id, x.stage, x.rule, x.count FROM pruning_counts x JOIN runs r ON r.id = x.run_id WHERE 1" +
      where.where + " ORDER BY x.run_id, x.problem_id, x.stage = 'post_compile', x.rule");
  bind_filter(statement, where);
  std::vector<PruningCount> counts;
  while (statement.step()) {
    counts.push_back(PruningCount{RunId{statement.column_int(0)}, ProblemId{statement.column_int(1)},
                                  kPruningStageTexts.value(statement.column_text(2)), statement.column_text(3), statement.column_int(4)});
  }
  return counts;
}

std::vector<ExternalResultRecord> Store::list_external_results(std::optional<ProblemId> problem) {
  Statement statement = connection_->prepare(
      "SELECT id, source, label, problem_id, gpu, time_us, notes, imported_at FROM external_results "
      "WHERE ?1 IS NULL OR problem_id = ?1 ORDER BY id");
  statement.bind(1, problem ? std::optional<std::int64_t>(id_value(*problem)) : std::nullopt);
  std::vector<ExternalResultRecord> results;
  while (statement.step()) {
    ExternalResultRecord result;
    result.id = ExternalResultId{statement.column_int(0)};
    result.source = statement.column_text(1);
    result.label = statement.column_text(2);
    result.problem = ProblemId{statement.column_int(3)};
    result.gpu = statement.column_text(4);
    result.time_us = statement.column_double(5);
    result.notes = statement.column_text(6);
    result.imported_at = statement.column_text(7);
    results.push_back(std::move(result));
  }
  return results;
}

std::vector<TableCount> Store::table_counts() {
  std::vector<std::string> tables;
  {
    Statement statement = connection_->prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    while (statement.step()) tables.push_back(statement.column_text(0));
  }
  std::vector<TableCount> counts;
  for (const auto& table : tables) {
    std::string quoted = "\"";
    for (const char c : table) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    quoted += '"';
    counts.push_back(TableCount{table, connection_->query_int("SELECT count(*) FROM " + quoted)});
  }
  return counts;
}

// ---------------------------------------------------------------------------------------------------- check

std::vector<std::string> Store::check() {
  std::vector<std::string> problems;
  // A step that cannot even run (a damaged page) is itself a finding; the other steps still run.
  const auto attempt = [&](std::string_view step, const auto& body) {
    try {
      body();
    } catch (const Error& error) {
      problems.push_back(std::string(step) + " could not run: " + error.what());
    }
  };

  attempt("schema check", [&] {
    const SchemaState state = read_schema_state(*connection_);
    if (!state.is_qtune()) problems.push_back("not marked as a qtune database (application_id " + std::to_string(state.application_id) + ")");
    if (state.user_version < kSchemaVersion) {
      problems.push_back("schema version " + std::to_string(state.user_version) + " is older than " + std::to_string(kSchemaVersion) +
                         " (`qtune db init` migrates it)");
    }
  });
  attempt("integrity check", [&] {
    Statement statement = connection_->prepare("PRAGMA integrity_check(100)");
    while (statement.step()) {
      const std::string line = statement.column_text(0);
      if (line != "ok") problems.push_back("integrity: " + line);
    }
  });
  attempt("foreign key check", [&] {
    Statement statement = connection_->prepare("PRAGMA foreign_key_check");
    while (statement.step()) {
      problems.push_back("foreign key: " + statement.column_text(0) + " row " + statement.column_text(1) +
                         " refers to a missing row of " + statement.column_text(2));
    }
  });
  if (schema_version_ != kSchemaVersion) return problems;

  attempt("run check", [&] {
    for (const RunOfProcess& row : runs_of_gone_processes(*connection_)) {
      problems.push_back("run #" + std::to_string(id_value(row.run)) + " is marked running, but its process (pid " +
                         std::to_string(row.process.pid) + " on " + row.process.host +
                         ") is gone: it was interrupted (the next run in this database marks it so)");
    }
  });
  attempt("winner check", [&] {
    Statement statement = connection_->prepare(
        "SELECT w.problem_id, w.gpu, w.config_id, c.kind, "
        "(SELECT count(*) FROM verifications v JOIN runs r ON r.id = v.run_id WHERE v.problem_id = w.problem_id "
        " AND v.config_id = w.config_id AND v.status <> 'passed' AND " + std::string(kGpuKeyOfRun) + " = w.gpu) "
        "FROM winners w JOIN kernel_configs c ON c.id = w.config_id ORDER BY w.id");
    while (statement.step()) {
      const std::string which = "winner of problem #" + statement.column_text(0) + " on " + statement.column_text(1) + ": config #" +
                                statement.column_text(2);
      if (statement.column_text(3) != "kernel") problems.push_back(which + " is a baseline");
      if (statement.column_int(4) > 0) problems.push_back(which + " failed verification");
    }
  });
  attempt("measurement check", [&] {
    Statement statement = connection_->prepare(
        "SELECT id FROM measurements WHERE (samples IS NOT NULL AND (length(samples) % 8 <> 0 OR length(samples) / 8 > sample_count)) "
        "OR (median_us IS NOT NULL AND NOT (min_us <= p10_us AND p10_us <= median_us AND median_us <= p90_us AND p90_us <= max_us)) "
        "ORDER BY id");
    while (statement.step()) {
      problems.push_back("measurement #" + statement.column_text(0) + ": inconsistent samples or statistics");
    }
  });
  return problems;
}

std::vector<std::string> Store::check_file(const fs::path& path) {
  try {
    Store store = open_read_only(path);
    return store.check();
  } catch (const InputError&) {
    throw;  // no such file, not a whole SQLite file, a newer schema, not a qtune file: the user's input, not a finding
  } catch (const Error& error) {
    return {std::string("cannot read the database: ") + error.what()};
  }
}

std::map<ConfigId, ::qtune::KernelConfig> kernel_configs_of_family(Store& store, std::string_view family) {
  std::map<ConfigId, ::qtune::KernelConfig> configs;
  for (const KernelConfigRecord& record : store.list_configs()) {
    if (record.kind != ConfigKind::Kernel || record.family != family) continue;
    try {
      configs[record.id] = to_kernel_config(record);
    } catch (const std::exception&) {
    }
  }
  return configs;
}

}  // namespace qtune::db

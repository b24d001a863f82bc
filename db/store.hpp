#pragma once
// The qtune store: one SQLite file holding runs and everything they produced (compiles, verifications, measurements,
// winners, pruning counts), the problems and kernel configurations those refer to, and results imported from elsewhere.
// The schema is versioned (db/schema.hpp); a file from a newer qtune is refused and never modified.
//
// Write a logical unit inside one transaction (`auto tx = store.transaction(); ...; tx.commit();`): if anything throws
// before commit(), none of it stays. A Store is one connection: use one per thread.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "db/schema.hpp"
#include "db/sqlite.hpp"
#include "kernels/family.hpp"

namespace qtune::db {

// Row ids, typed so that a problem id cannot be passed where a config id is expected.
enum class RunId : std::int64_t {};
enum class ProblemId : std::int64_t {};
enum class ConfigId : std::int64_t {};
enum class CompileId : std::int64_t {};
enum class VerificationId : std::int64_t {};
enum class MeasurementId : std::int64_t {};
enum class ExternalResultId : std::int64_t {};
template <typename Id>
constexpr std::int64_t id_value(Id id) {
  return static_cast<std::int64_t>(id);
}

enum class RunStatus { Running, Completed, Interrupted, Failed };
enum class ConfigKind { Kernel, Baseline };  // a baseline (cuBLASLt, ...) is measured like a kernel but never wins
enum class CompileStatus { Ok, Failed, Invalid };
enum class VerificationStatus { Passed, Failed, Invalid, Crashed };
enum class MeasurementStatus { Ok, Failed, Crashed, Timeout };
enum class L2Mode { Cold, Warm };
enum class PruningStage { PreCompile, PostCompile };

// The text each enum is stored as ("running", "baseline", "passed", "cold", "pre_compile", ...).
std::string_view to_string(RunStatus value);
std::string_view to_string(ConfigKind value);
std::string_view to_string(CompileStatus value);
std::string_view to_string(VerificationStatus value);
std::string_view to_string(MeasurementStatus value);
std::string_view to_string(L2Mode value);
std::string_view to_string(PruningStage value);

struct RunInfo {
  std::string uuid;        // identity across files (db merge); empty: a new random one is made
  std::string kind;        // "tune", "bench", "compile", ...
  std::string started_at;  // ISO-8601 UTC; empty: now
  std::string tool_version;
  std::string git_sha;
  std::string cuda_version;
  std::string driver_version;
  std::string host;
  std::string gpu_name;     // as the driver reports it
  std::string gpu_uuid;
  std::string gpu_profile;  // configs/gpus profile name, "" if none matched
  int sm = 0;
  int sm_count = 0;
  std::optional<int> sm_clock_mhz;
  std::optional<int> mem_clock_mhz;
  std::string command_line;
  std::string shard;  // "i/n" for a sharded tune, else ""
  std::string notes;

  // The key this run's winners are stored under: the GPU profile, else the device name.
  std::string gpu_key() const { return gpu_profile.empty() ? gpu_name : gpu_profile; }
};

struct RunRecord : RunInfo {
  RunId id{};
  RunStatus status = RunStatus::Running;
  std::optional<std::string> finished_at;
};

struct RunSummary {
  RunRecord run;
  std::int64_t compiles = 0;
  std::int64_t verifications = 0;
  std::int64_t measurements = 0;
  std::int64_t winners = 0;
};

// One GEMM problem: a format (its canonical spec text, FormatSpec::to_string) at M x N x K.
struct Problem {
  std::string format;
  std::int64_t m = 0;
  std::int64_t n = 0;
  std::int64_t k = 0;
  friend bool operator==(const Problem&, const Problem&) = default;
};
struct ProblemRecord : Problem {
  ProblemId id{};
};

// One kernel configuration of a family. `params_json` is stored canonically (keys sorted, no spaces), so the same
// parameters written in another order are the same configuration.
struct KernelConfig {
  ConfigKind kind = ConfigKind::Kernel;
  std::string family;
  std::string params_json = "{}";
  std::string source_hash;  // hash of the kernel sources it was built from ("" for baselines)
};
struct KernelConfigRecord : KernelConfig {
  ConfigId id{};
};
// A stored kernel config as a kernels/ KernelConfig (family + integer params). Throws InputError for params that are not
// integers (baselines' params may not be: use it for kernel configs).
::qtune::KernelConfig to_kernel_config(const KernelConfigRecord& config);

// Canonical text of a JSON parameter object; throws InputError "kernel config params: ..." if it is not valid JSON.
std::string canonical_params(std::string_view params_json);

struct CompileResult {
  RunId run{};
  ConfigId config{};
  std::string format;  // canonical spec text of the format it was instantiated for ("" if format-independent)
  std::string arch;    // "sm_90a"
  std::string cache_key;
  bool cache_hit = false;
  std::optional<double> compile_seconds;
  std::optional<int> registers;
  std::optional<int> spill_store_bytes;
  std::optional<int> spill_load_bytes;
  std::optional<int> shared_bytes;
  std::optional<int> stack_bytes;
  CompileStatus status = CompileStatus::Ok;
  std::string message;  // the NVRTC log for a failure, the rule for an invalid one
};
struct CompileRecord : CompileResult {
  CompileId id{};
  std::string created_at;
};

struct Verification {
  RunId run{};
  ProblemId problem{};
  ConfigId config{};
  VerificationStatus status = VerificationStatus::Passed;
  std::optional<double> max_rel_error;
  std::optional<double> max_abs_error;
  std::optional<double> tolerance;
  std::string message;
};
struct VerificationRecord : Verification {
  VerificationId id{};
  std::string created_at;
};

struct TimingStats {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  double max_us = 0;
  double mean_us = 0;
  double stddev_us = 0;
  double ci_low_us = 0;   // confidence interval of the median
  double ci_high_us = 0;
};

struct Measurement {
  RunId run{};
  ProblemId problem{};
  ConfigId config{};
  MeasurementStatus status = MeasurementStatus::Ok;
  std::optional<TimingStats> stats;  // required when status is Ok
  std::int64_t sample_count = 0;     // samples taken; 0: samples_us.size()
  std::vector<double> samples_us;    // the raw samples (stored as little-endian float64)
  L2Mode l2_mode = L2Mode::Cold;
  std::optional<double> sm_clock_mhz;
  std::optional<double> mem_clock_mhz;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  bool throttled = false;
  std::string phase;    // the search strategy's phase ("halving-2"), "" for a plain measurement
  std::string message;  // why it failed
};
struct MeasurementRecord : Measurement {
  MeasurementId id{};
  std::string created_at;
};

// The chosen configuration of a problem on a GPU (the run's gpu_key()).
struct Winner {
  RunId run{};
  ProblemId problem{};
  ConfigId config{};
  double median_us = 0;
  std::string reason;  // "fastest", "tie within noise: incumbent kept", ...
};
struct WinnerRecord : Winner {
  std::string gpu;
  std::string decided_at;
};

struct PruningCount {
  RunId run{};
  ProblemId problem{};
  PruningStage stage = PruningStage::PreCompile;
  std::string rule;
  std::int64_t count = 0;
};

// A time measured elsewhere (another library, a paper) for comparison.
struct ExternalResult {
  std::string source;  // "marlin", "humming", ...
  std::string label;   // which kernel or setting of that source
  ProblemId problem{};
  std::string gpu;
  double time_us = 0;
  std::string notes;
};
struct ExternalResultRecord : ExternalResult {
  ExternalResultId id{};
  std::string imported_at;
};

// Rows to list; an empty field matches everything. `gpu` matches the run's gpu_key().
struct RowFilter {
  std::optional<RunId> run{};
  std::optional<ProblemId> problem{};
  std::optional<ConfigId> config{};
  std::optional<std::string> gpu{};
};

struct TableCount {
  std::string table;
  std::int64_t rows = 0;
};

struct MergeSummary {
  std::int64_t runs_added = 0;
  std::int64_t runs_already_present = 0;  // same uuid: only rows missing here are copied
  std::int64_t problems_added = 0;
  std::int64_t configs_added = 0;
  std::int64_t compiles_added = 0;
  std::int64_t verifications_added = 0;
  std::int64_t measurements_added = 0;
  std::int64_t winners_changed = 0;  // added, or replaced by a faster one
  std::int64_t pruning_counts_changed = 0;
  std::int64_t external_results_added = 0;
};

struct OpenOptions {
  bool read_only = false;
  int busy_timeout_ms = 30000;
};

class Store {
 public:
  // Opens (creating and migrating as needed) a store. Read-only mode never writes and never migrates. A file from a
  // newer qtune or that is not a qtune database is refused with an InputError and left byte-for-byte unchanged.
  static Store open(const std::filesystem::path& path, const OpenOptions& options = {});
  static Store open_read_only(const std::filesystem::path& path) { return open(path, OpenOptions{.read_only = true}); }

  // check() of a file opened read-only. A file that is no whole SQLite database (not SQLite, empty, truncated) or no
  // qtune database is an InputError, as for open(); damage SQLite meets while checking is reported as a problem.
  static std::vector<std::string> check_file(const std::filesystem::path& path);

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::filesystem::path& path() const;
  int schema_version() const { return schema_version_; }    // the file's version now
  int version_at_open() const { return version_at_open_; }  // before migrating: 0 for a new file
  // Throws InputError unless the tables that reports, exports and searches read are all there (kOldestReadableVersion
  // on) and no row refers to a missing one.
  void require_readable();
  bool read_only() const;
  Connection& connection() { return *connection_; }

  // A transaction on this store's connection (nested ones are savepoints).
  Transaction transaction() { return Transaction(*connection_); }

  // ---- writes
  // Inserts a run owned by this process (its host, pid and start time are stored with it), after marking the runs
  // whose process is gone as interrupted.
  RunId insert_run(const RunInfo& run);
  // Marks every run still marked running whose process is gone (killed, or its host rebooted) as interrupted; a run
  // of another host is left as it is. Returns the runs it marked.
  std::vector<RunId> mark_interrupted_runs();
  void finish_run(RunId run, RunStatus status);  // sets the status and finished_at = now
  ProblemId upsert_problem(const Problem& problem);      // the existing id if already stored
  ConfigId upsert_config(const KernelConfig& config);    // the existing id if already stored
  CompileId insert_compile(const CompileResult& compile);
  VerificationId insert_verification(const Verification& verification);
  MeasurementId insert_measurement(const Measurement& measurement);
  // Stores or replaces the winner of (problem, the run's GPU). Refused (Error) for a baseline, or for a config that
  // has no passed verification of the problem on that GPU or has any failed, invalid or crashed one.
  void set_winner(const Winner& winner);
  void set_pruning_count(const PruningCount& count);  // replaces the count of (run, problem, stage, rule)
  // Adds an external result; one with the same (source, label, problem, gpu) is replaced.
  ExternalResultId upsert_external_result(const ExternalResult& result);

  // ---- queries
  std::optional<RunRecord> get_run(RunId id);
  std::optional<RunRecord> find_run(std::string_view uuid);
  std::vector<RunRecord> list_runs();
  std::vector<RunSummary> run_summaries();
  std::optional<ProblemRecord> get_problem(ProblemId id);
  std::optional<ProblemId> find_problem(const Problem& problem);
  std::vector<ProblemRecord> list_problems();
  std::optional<KernelConfigRecord> get_config(ConfigId id);
  std::optional<ConfigId> find_config(const KernelConfig& config);
  std::vector<KernelConfigRecord> list_configs();
  std::vector<CompileRecord> list_compiles(const RowFilter& filter = {});  // filter.problem is ignored
  std::vector<VerificationRecord> list_verifications(const RowFilter& filter = {});
  std::vector<MeasurementRecord> list_measurements(const RowFilter& filter = {});
  // The fastest ok measurement of a problem on a GPU among kernels (not baselines) never failing verification there.
  std::optional<MeasurementRecord> best_measurement(ProblemId problem, std::string_view gpu, L2Mode l2_mode = L2Mode::Cold);
  std::optional<WinnerRecord> get_winner(ProblemId problem, std::string_view gpu);
  std::vector<WinnerRecord> list_winners(std::optional<std::string> gpu = std::nullopt);
  std::vector<PruningCount> list_pruning_counts(const RowFilter& filter = {});
  std::vector<ExternalResultRecord> list_external_results(std::optional<ProblemId> problem = std::nullopt);
  std::vector<TableCount> table_counts();  // every table of the file, by name

  // ---- maintenance
  // Integrity, foreign keys, schema version and qtune's own rules (e.g. no winner failed verification).
  // Returns one line per problem found; empty when the store is sound.
  std::vector<std::string> check();
  // Copies everything of another store into this one in one transaction: runs are matched by uuid, problems and
  // configs by their unique keys, and a row already here is not copied again, so merging the same file twice
  // changes nothing. The other file is opened read-only and must have this build's schema version.
  MergeSummary merge(const std::filesystem::path& other);
  // Throws InputError unless `other` exists and could be merged: this build's schema version, no broken references.
  static void require_merge_source(const std::filesystem::path& other);

 private:
  Store(std::unique_ptr<Connection> connection, int version_at_open, int schema_version);

  std::unique_ptr<Connection> connection_;
  int version_at_open_ = 0;
  int schema_version_ = 0;
};

// The kernel configs of one family in the store, by id; a config whose params this build cannot read (another
// version's) is left out, as a prior or a replay has no use for it.
std::map<ConfigId, ::qtune::KernelConfig> kernel_configs_of_family(Store& store, std::string_view family);

}  // namespace qtune::db

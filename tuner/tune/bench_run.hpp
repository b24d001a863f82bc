#pragma once
// `qtune bench` as a library call: measures GEMM targets for N,K and a list of M, each in a worker process (a faulting
// kernel kills only the worker) or in this one, and stores the results through tune/records.hpp. Targets are cuBLASLt
// baselines (a job of qtune's worker answering a TargetResult) and targets that measure themselves: the peers hosted
// in Python (tuner/peers/peer_runs.hpp), which run in a worker of their own.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "kernels/format.hpp"
#include "search/gpu_profile.hpp"
#include "tuner/baselines/baseline.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/providers/pipeline.hpp"

namespace qtune::tune {

// What a target that measures itself returns for one problem.
struct SelfMeasured {
  baselines::TargetResult result;        // one variant: what the bench prints
  providers::CandidateResult candidate;  // what is stored (records.hpp's candidate_records)
  std::string failure;                   // the run failed (crash, timeout, error): why; the candidate is stored still
};

// Something measured for a GEMM problem: the worker job that prepares, verifies and times it (answering with a
// TargetResult), how its memory traffic is counted, which tensor peak it is compared with, and how it is stored.
struct BenchTarget {
  std::string label;
  std::string job;
  // The job's params; `pinned`: re-time this algorithm alone (see baselines::PinnedAlgorithm).
  std::function<nlohmann::json(const baselines::GemmProblem&, const std::optional<baselines::PinnedAlgorithm>& pinned)>
      job_params;
  std::function<baselines::TrafficModel(const baselines::GemmProblem&)> traffic;
  search::TensorType tensor_type = search::TensorType::F16;
  std::string problem_format;  // the database problem's format text
  db::ConfigKind config_kind = db::ConfigKind::Baseline;
  std::string config_family;  // the database config family
  // Set for a target that measures itself instead of sending `job` to qtune's worker (a peer runs in its own).
  std::function<SelfMeasured(const baselines::GemmProblem&)> measure_self;
};

// The phase a self-measured target's one configuration is stored under.
inline constexpr const char* kSelfMeasuredPhase = "peer";

// A validated bench: what the CLI's options become.
struct BenchRequest {
  std::vector<baselines::BaselineKind> kinds;  // with more_targets, at least one target
  std::optional<FormatSpec> format;            // --format: the results are stored under it
  int64_t n = 0;
  int64_t k = 0;
  std::vector<int64_t> m_values;
  int top_k = 8;
  OutputType fp8_output = OutputType::BF16;
  int device = 0;
  uint64_t seed = 1;
  int placements = 1;
  double screen_time_s = 0.05;
  measure::MeasureOptions measure;  // validated (measure::validate)
  bool measure_copy_bandwidth = true;  // false: the GPU profile's datasheet bandwidth
  // Re-time the algorithm the latest earlier bench in db_path chose (see baselines::PinnedAlgorithm).
  bool pin_algorithm = false;
  std::string db_path;  // where --pin-algorithm looks (and what its notes name)
  double timeout_s = 900;  // one target x M
  bool in_process = false;  // run the jobs here instead of in a worker (no containment)
  std::string worker_executable = "/proc/self/exe";
  // Targets the caller built (the peers: tuner/peers/peer_runs.hpp), measured after the baselines of `kinds`.
  std::vector<BenchTarget> more_targets;
};

BenchTarget make_baseline_target(baselines::BaselineKind kind, const BenchRequest& request);

// One target x M: its result, or why the job failed.
struct BenchRow {
  const BenchTarget* target = nullptr;  // into BenchOutcome::targets (a moved vector keeps its elements in place)
  baselines::GemmProblem problem;
  std::optional<baselines::TargetResult> result;
  std::string failure;   // the job failed (crash, timeout, error): why
  std::string pin_note;  // --pin-algorithm found nothing to pin: why (the worker's result notes say the rest)
  std::optional<providers::CandidateResult> candidate;  // a self-measured target's result, stored as it is
};

// What the rows are compared with: the copy bandwidth (measured, else the datasheet's), the GPU and its profile.
struct BenchContext {
  std::optional<double> copy_gbps;
  std::string bandwidth_source;
  std::optional<search::GpuProfile> profile;
  std::string profile_error;  // no GPU profile matched the device: why
  nlohmann::json device;      // runtime::DeviceInfo as JSON; null when no job learned it
};

struct BenchOutcome {
  std::vector<BenchTarget> targets;
  std::vector<BenchRow> rows;  // target-major, then M in the request's order
  BenchContext context;
};

// Runs every target for every M. A job that finds no GPU or bad input ends the bench (NoGpuError / InputError);
// any other failure is one failed row. `on_row` sees each row as it is done (progress).
BenchOutcome run_bench(const BenchRequest& request, const std::function<void(const BenchRow&)>& on_row = {});

// Stores a bench as one run of kind "bench" (stamped with `command_line` and the outcome's device): per supported row
// its problem, and per algorithm its config, verification and measurement (phase top-k, best-of-top-k or pinned); a
// self-measured target's row as its one config with its one result, failures included (phase "peer").
void store_bench(db::Store& store, const BenchRequest& request, const BenchOutcome& outcome,
                 const std::string& command_line);

}  // namespace qtune::tune

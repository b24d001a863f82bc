#pragma once
// Measuring baselines: verify and time every algorithm of cuBLASLt's top-k list through qtune's CUPTI harness,
// keep the fastest verified one, and carry the results across the worker boundary as JSON. Also the arithmetic of
// a benchmark row (GB/s, TFLOP/s, % of copy bandwidth and of tensor peak).
//
// The result types are generic on purpose: a "target" is anything measured for a GEMM problem (a cuBLASLt baseline
// now, a kernel configuration of a qtune family later), and its "variants" are what is tried for it (cuBLASLt's
// algorithms; one configuration).
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "search/gpu_profile.hpp"
#include "tuner/baselines/baseline.hpp"
#include "tuner/baselines/cublaslt_baseline.hpp"
#include "tuner/baselines/verify.hpp"
#include "tuner/measure/measure.hpp"

namespace qtune::baselines {

struct VariantResult {
  std::string label;      // "h0 algo=66 tile=128x256 stages=64xAUTO ..."
  nlohmann::json params;  // what identifies the variant (the database's config params)
  VerifyResult verify;
  std::optional<measure::Measurement> measurement;  // none when verification failed or the launch threw
  std::string error;                                // why there is no measurement
};

// The decision between the two fastest algorithms. After every algorithm is timed once, the two fastest are measured
// again in alternation (A B, B A, A B, ...), so that drift of clocks, power and temperature hits both alike, and the
// winner is decided on the median of the per-round ratios. Within tie_tolerance the one cuBLASLt's heuristic ranks
// first wins, so a near-tie does not flip between runs on noise.
//
// Screening (screen_time_s > 0) makes that cheap: the first pass and the run-off's rounds measure each algorithm for
// about screen_time_s (no minimum measuring time, no stability blocks, no throttle retries), and only the winner is
// then measured with the full options. Its final measurement is what a bench reports; the others keep their
// screening medians, which only rank them.
struct RunoffOptions {
  int rounds = 4;                  // measurements of each of the two; 0: no run-off, the first pass decides
  double tie_tolerance = 0.01;     // relative
  double round_time_budget_s = 0;  // per run-off measurement; 0: a quarter of the first pass's time budget (or the
                                   // screening options when screening)
  double screen_time_s = 0;        // 0: every algorithm gets the full measurement; at most kMaxScreenTimeS
};
inline constexpr double kMaxScreenTimeS = 10;

// The options of a screening measurement of about `screen_time_s` derived from the full ones (same device, L2
// mode and flush, confidence target): measuring for screen_time_s, a warm-up of at most a quarter of it, no
// stability blocks, no clock-dip or throttle retries, within a budget of twice screen_time_s.
measure::MeasureOptions screening_options(const measure::MeasureOptions& full, double screen_time_s);

struct Runoff {
  int first = -1;   // variant indices of the two, first = the one cuBLASLt ranks earlier
  int second = -1;
  std::vector<double> first_us;   // median of each run-off measurement, per round
  std::vector<double> second_us;
  double ratio = 0;  // median over rounds of first_us[r] / second_us[r]; 0 when the run-off failed
  int winner = -1;   // first or second
  std::string decision;  // "first faster by 2.31%", "second faster by ...", "tie within 1%: ...", "run-off failed: ..."
};

// The two fastest verified and measured variants, in variant (heuristic) order; nullopt with fewer than two.
std::optional<std::pair<int, int>> runoff_pair(const std::vector<VariantResult>& variants);
// The run-off between variants `first` < `second`: measure_median_us(index) measures one variant once and returns
// its median; it is called for first and second in the order A B, B A, A B, ... `rounds` times each. Throws
// InputError for bad options; what measure_median_us throws propagates.
Runoff run_off(int first, int second, const RunoffOptions& options, const std::function<double(int)>& measure_median_us);
void validate(const RunoffOptions& options);

// Re-timing the algorithm an earlier run chose instead of deciding again among near-tied ones
// (qtune bench --pin-algorithm): it is looked up in the fresh heuristic list by its identifying fields
// (same_algorithm), verified and timed alone, with no run-off.
struct PinnedAlgorithm {
  AlgoInfo algorithm;           // as stored by the earlier run; its heuristic_index is the position it had then
  std::string origin;           // where it was chosen, for the row's note: "run 12 of 2026-11-30T00:12:03.123Z"
  int search_depth = 32;        // heuristic results listed to find it (at least the top k)
};
inline constexpr int kDefaultPinSearchDepth = 32;

// What became of a pinned algorithm.
enum class PinOutcome {
  NotAsked,     // no pinning
  Pinned,       // found, verified and timed alone: it is `best`
  NotListed,    // not among the listed algorithms: the top k and the run-off decided
  NotVerified,  // found, but it failed verification or timing: the top k and the run-off decided
};
std::string_view to_string(PinOutcome outcome);
PinOutcome parse_pin_outcome(std::string_view text);  // InputError naming "pin"

// The measurement phases `qtune bench` stores: the decided algorithm, the others of the top k, a pinned one.
inline constexpr const char* kBestOfTopKPhase = "best-of-top-k";
inline constexpr const char* kTopKPhase = "top-k";
inline constexpr const char* kPinnedPhase = "pinned";

struct TargetResult {
  std::string target;  // "cublaslt-f16"
  GemmProblem problem;
  int64_t executed_m = 0;
  bool supported = false;
  std::string unsupported_reason;
  std::string notes;
  std::vector<VariantResult> variants;
  int best = -1;          // index into variants of the winner (fastest verified, or the run-off's); -1 when none
  std::optional<Runoff> runoff;  // when two or more algorithms were timed and a run-off was asked for
  nlohmann::json device;  // runtime::DeviceInfo of the GPU it ran on (null when unknown)
  PinOutcome pin = PinOutcome::NotAsked;  // Pinned: variants holds the pinned algorithm alone
  // With placements > 1: the chosen algorithm's median on each set of operands, the first set's first, then again
  // in a second pass (timed in reverse order, stored in set order); the best variant's median is the median of both.
  std::vector<double> placement_medians_us;
  std::vector<double> placement_second_pass_us;

  const VariantResult* best_variant() const {
    return best >= 0 && best < static_cast<int>(variants.size()) ? &variants[static_cast<size_t>(best)] : nullptr;
  }
};

void to_json(nlohmann::json& json, const VerifyResult& result);
void from_json(const nlohmann::json& json, VerifyResult& result);
void to_json(nlohmann::json& json, const VariantResult& result);
void from_json(const nlohmann::json& json, VariantResult& result);
void to_json(nlohmann::json& json, const Runoff& runoff);
void from_json(const nlohmann::json& json, Runoff& runoff);
void to_json(nlohmann::json& json, const TargetResult& result);
void from_json(const nlohmann::json& json, TargetResult& result);

// The verified variant with the lowest median, -1 when none has a measurement.
int best_variant_index(const std::vector<VariantResult>& variants);

// On a prepared baseline: verifies each of the first `top_k` listed algorithms (0: all listed) on a poisoned output,
// times the verified ones (a launch error is recorded, not thrown), decides between the two fastest in a run-off
// (RunoffOptions), records the winner as `best` and leaves it selected.
// With `pinned`: when the pinned algorithm is listed (anywhere in the list) and verifies and times, it is the only
// variant and `best`, with no run-off; otherwise the note says why and the top k decide as above. `pin` tells which.
TargetResult tune_baseline(CublasLtBaseline& baseline, const measure::MeasureOptions& options,
                           const RunoffOptions& runoff_options = {},
                           const std::optional<PinnedAlgorithm>& pinned = std::nullopt, int top_k = 0);

// ---- The worker job (containment: a faulting cuBLASLt kernel kills the worker, not the run) ----
inline constexpr const char* kBenchBaselineJob = "bench-baseline";
inline constexpr int kMaxPlacements = 16;
struct BenchBaselineRequest {
  BaselineKind kind = BaselineKind::F16;
  GemmProblem problem;
  uint64_t seed = 1;
  BaselineOptions baseline;
  measure::MeasureOptions measure;
  RunoffOptions runoff;
  std::optional<PinnedAlgorithm> pinned;  // travels as "pinned": {"algorithm": AlgoInfo JSON, "origin", "search_depth"}
  // Sets of operands the chosen algorithm is timed on (1..16), each allocated beside the others behind a spacer, so
  // that they land elsewhere in memory; each set is timed alone, twice, and the samples of all are pooled.
  int placements = 1;
};
void validate_placements(const BenchBaselineRequest& request);  // InputError naming placements

// prepare + tune_baseline; an unsupported baseline comes back with supported == false and the reason. With `pinned`,
// cuBLASLt lists max(top_k, pinned->search_depth) algorithms to find it; the top k are timed if it is not used.
// With placements > 1 the chosen algorithm is timed again on placements - 1 more sets of operands.
TargetResult bench_baseline(const BenchBaselineRequest& request);
nlohmann::json to_job_params(const BenchBaselineRequest& request);
BenchBaselineRequest request_from_job_params(const nlohmann::json& params);  // InputError naming a bad field
// The job kBenchBaselineJob runs bench_baseline and answers the TargetResult (registered in tuner/tune/worker_jobs.cpp).

// ---- One benchmark row's figures ----
struct RowMetrics {
  double gigabytes_per_second = 0;          // TrafficModel bytes / median, 1e9 bytes per GB
  double tflops = 0;                        // 2 M N K / median
  std::optional<double> bandwidth_percent;  // of the copy bandwidth, when known
  std::optional<double> peak_percent;       // of the tensor peak for the target's type, when known
};
RowMetrics row_metrics(const TrafficModel& traffic, double flops, double median_us,
                       std::optional<double> copy_bandwidth_gbps, std::optional<double> peak_tflops);

// The tensor-core type a baseline runs at (for the GPU profile's peak).
search::TensorType tensor_type(BaselineKind kind);

}  // namespace qtune::baselines

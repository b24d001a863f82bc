#pragma once
// The tuner: for every problem (format, N, K, M bucket) of a shard it runs these steps, each a function of
// tuner.cpp:
//   plan     enumerates the family's space and prunes it with the static rules (counts stored per rule), and picks
//            the reference configurations (the hand-written heuristic, an exported table's pick);
//   compile  every distinct instantiation (config, format, arch) once, in parallel, before measuring anything, each
//            compile stored (records.hpp);
//   prune    again from the ptxas report (counts stored per rule);
//   measure  the heuristic (phase "heuristic"), then the search strategy, whose objective sends each candidate
//            through a MeasuringBackend (the worker: verify against the CPU reference, then measure) and stores it
//            in its own transaction, so a kill loses nothing already measured;
//   finish   the winner (search/winner.hpp tie rule, incumbent = the previous winner) and the run's status.
// A rerun with the same arguments skips (problem, config) pairs already measured on this GPU with the same kernel
// source hash, and problems whose winner is final (decided by the same search, or by a complete exhaustive one).
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "search/gpu_profile.hpp"
#include "search/strategy.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/records.hpp"

namespace qtune::tune {

// The GPU a tune is for.
struct TuneTarget {
  std::string gpu_profile;  // configs/gpus profile name; "" when the device matched none
  std::string gpu_name;     // as the driver reports it (a dry run: the profile's display name)
  std::string gpu_uuid;
  ArchLimits limits;
  std::string arch;  // NVRTC target, "sm_90a"
  // One measuring slot (worker) per entry, each given as CUDA_VISIBLE_DEVICES ("GPU-<uuid>"; "": inherit this
  // process's devices and use device 0); empty for a dry run.
  std::vector<std::string> visible_devices;
  std::string driver_version;
  std::string cuda_version;
  std::optional<int> sm_clock_mhz;
  std::optional<int> mem_clock_mhz;

  std::string gpu_key() const { return gpu_profile.empty() ? gpu_name : gpu_profile; }
};

// A run of `kind` ("tune", "tune-moe") on `target`: this build, the GPU's identity and clocks, the command line and
// shard; callers add notes.
db::RunInfo tune_run_on(const TuneTarget& target, const std::string& command_line, const std::string& shard,
                        const std::string& kind = "tune");

using search::limits_of_profile;  // the limits static rules check against, from a profile (search/gpu_profile.hpp)
// A target from a profile alone (no device): what `--gpu NAME --dry-run` uses.
TuneTarget target_from_profile(const search::GpuProfile& profile);

struct TuneOptions {
  std::vector<Problem> problems;  // this shard's problems (build_problem_set + select_shard)
  std::string family = "mma";
  // "curated": per-M ranges (KernelFamily::curated_ranges: a few hundred candidates per problem); "full": the family's
  // whole parameter space (for mma, tens of thousands of instantiations to compile per format).
  std::string space = "curated";
  std::map<std::string, std::vector<int>> parameter_values;  // replaces a parameter's values (RestrictedFamily)
  std::string strategy = "exhaustive";
  search::Budget budget;  // per problem
  // When set: each problem gets at most ceil(fraction x its searchable candidates) evaluations (and budget's cap).
  std::optional<double> budget_fraction;
  search::StrategyOptions strategy_options;  // seed, batch size, ...; the model's prior is filled in by the tuner
  std::size_t prior_limit = 4000;  // at most this many prior observations for the model strategy
  double timeout_s = 30;           // per candidate (load, verify, measure)
  bool dry_run = false;            // stop before measuring
  bool retune = false;             // search problems again even when their winner is final
  double tie_tolerance = 0.01;     // relative; winners within it (or the CI) of the fastest tie
  Shard shard;
  std::string command_line;
  std::string source_hash;  // of the kernel sources; "" = kernel_source_hash(family)
  // When set: what a production selection (an exported table) picks for a problem, measured beside the heuristic in
  // phase "table" and eligible as a winner, so a table's regret can be measured on shapes it never saw.
  std::function<std::optional<KernelConfig>(const Problem&, const ArchLimits&)> table_selection;
};

// The evaluation budget of a problem with `candidates` searchable candidates.
search::Budget problem_budget(const TuneOptions& options, std::size_t candidates);

// Hash of the family name and every embedded kernel device source: a change means earlier measurements are of
// other kernels, so pairs are measured again.
std::string kernel_source_hash(const KernelFamily& family);

struct ProblemReport {
  Problem problem;
  db::ProblemId problem_id{};
  bool skipped_final = false;  // the stored winner is final; nothing done
  std::size_t space_total = 0;
  std::size_t after_static_rules = 0;
  std::size_t after_compile = 0;  // the candidates the strategy searches
  std::map<std::string, std::size_t> pruned_pre_compile;
  std::map<std::string, std::size_t> pruned_post_compile;
  std::size_t evaluations = 0;  // by the strategy, reused ones included
  std::size_t measured = 0;     // jobs run now (heuristic included)
  std::size_t reused = 0;       // answered from earlier measurements
  std::size_t invalid = 0;      // failed verification, errors, crashes, timeouts (now or before)
  std::optional<KernelConfig> heuristic;
  std::optional<double> heuristic_us;
  std::string heuristic_failure;  // why the heuristic's pick has no time: its outcome and message ("" when timed)
  std::optional<KernelConfig> table;  // TuneOptions::table_selection's pick
  std::optional<double> table_us;
  std::optional<KernelConfig> winner;
  double winner_us = 0;
  std::string winner_reason;
  bool interrupted = false;
  double seconds = 0;  // wall time measuring this problem (heuristic, search, winner)
};

struct TuneReport {
  db::RunId run{};
  std::string gpu;
  std::size_t problems = 0;
  std::size_t skipped_final = 0;
  std::size_t instantiations = 0;
  std::size_t compile_failures = 0;
  std::size_t cache_hits = 0;
  std::size_t measured = 0;
  std::size_t reused = 0;
  std::size_t invalid = 0;
  std::size_t winners = 0;
  bool interrupted = false;
  double compile_seconds = 0;  // wall time of the ahead-of-time compile phase (cache reads included)
  double measure_seconds = 0;  // wall time of the measuring phase, all GPUs together
  std::vector<ProblemReport> reports;  // in problem order
};

// One candidate evaluated (for progress displays).
struct EvaluationEvent {
  const Problem* problem = nullptr;
  KernelConfig config;
  std::string phase;  // "heuristic", the strategy's name, or "<strategy>-short"
  bool reused = false;
  bool valid = false;
  double time_us = 0;
  std::string outcome;  // to_string(CandidateOutcome) or "stored"
};

// Progress callbacks. The tuner serialises calls (one at a time), from whichever thread made progress.
class TuneObserver {
 public:
  virtual ~TuneObserver() = default;
  virtual void compile_progress(std::size_t /*done*/, std::size_t /*total*/) {}
  // The seconds one item of the compile phase is expected to take on one thread, when not qtune's NVRTC's (Humming's
  // nvcc builds), for the ETA; said before the phase's first compile_progress.
  virtual void compile_seconds_each(double /*seconds*/) {}
  // Evaluations the measuring phase expects in all (budget-capped candidates plus heuristics), once, before it starts.
  virtual void measuring_started(std::size_t /*problems*/, std::size_t /*expected_evaluations*/) {}
  virtual void problem_started(const ProblemReport& /*report*/) {}
  virtual void evaluated(const EvaluationEvent& /*event*/) {}
  virtual void problem_finished(const ProblemReport& /*report*/) {}
  virtual void note(const std::string& /*message*/) {}
};

struct TuneServices {
  InstantiationCompiler* compiler = nullptr;  // required
  BackendFactory backends;                     // required unless dry_run
  int slots = 1;                               // measuring slots run in parallel, each with its own backend
};

// Runs the tune into the store at `database`. `stop` (may be null) ends it early: the candidate in flight is
// finished or dropped, nothing measured is lost, and the run is marked interrupted. Throws InputError for bad
// options; backend failures that are not the candidate's (no GPU, a worker that cannot start) propagate.
TuneReport run_tune(const TuneOptions& options, const TuneTarget& target, const std::filesystem::path& database,
                    TuneServices& services, TuneObserver* observer = nullptr, const std::atomic<bool>* stop = nullptr);

}  // namespace qtune::tune

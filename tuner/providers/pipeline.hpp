#pragma once
// The one measuring sequence every command uses, in the worker process, for every provider:
//   prepare operands (once per problem) -> load a configuration -> poison the output -> launch -> verify against the
//   CPU reference -> measure (CUPTI, cold L2, statistics, NVML: measure.hpp) -> one CandidateResult.
// `qtune tune` and `qtune kernel-sweep` send each candidate as a worker job (tuner/tune/worker_jobs.hpp) that runs
// run_candidate; `qtune bench` runs check_candidate and measure_candidate for each cuBLASLt algorithm inside its job,
// between which its screening and run-off decide.
#include <cuda.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tuner/measure/measure.hpp"
#include "tuner/providers/provider.hpp"

namespace qtune::providers {

enum class CandidateOutcome {
  Measured,            // verified, then measured (or measured unverified when verification was not asked for)
  VerificationFailed,  // wrong results (or elements left unwritten)
  Error,               // the job failed cleanly (launch refused, ...)
  Crashed,             // the worker died (fault, signal)
  Timeout,             // the watchdog killed the worker
};
std::string to_string(CandidateOutcome outcome);  // "measured", "verification-failed", "error", "crashed", "timeout"
CandidateOutcome candidate_outcome_from_text(const std::string& text);  // InputError naming "outcome"

// What became of one candidate: the one result type every command stores (tuner/tune/records.hpp maps it into the
// database once).
struct CandidateResult {
  CandidateOutcome outcome = CandidateOutcome::Error;
  bool verified = false;      // a verification ran (false with CandidateOptions::verify off)
  double max_rel_error = 0;   // infinite when the output held NaN/inf
  double tolerance = 0;
  std::int64_t rows_checked = 0;
  std::string verification_summary;
  measure::Measurement measurement;  // when Measured
  std::string message;               // why not, otherwise
};
// The worker sends it, the parent reads it: one serializer for both sides (JSON has no infinity: null).
void to_json(nlohmann::json& json, const CandidateResult& result);
void from_json(const nlohmann::json& json, CandidateResult& result);

struct CandidateOptions {
  bool verify = true;  // false: measured without comparing (kernel-sweep --no-verify)
  measure::MeasureOptions measure;
};

// Poisons the output, launches once on `stream` and verifies. Errors (a refused launch, a fault) propagate: the
// worker must see a lost context.
Check check_candidate(Runnable& runnable, CUstream stream);
// Times the runnable with the harness (warm-up, cold L2, adaptive repetitions, median, NVML throttle retries).
measure::Measurement measure_candidate(Runnable& runnable, const measure::MeasureOptions& options);
// check_candidate, then measure_candidate when the check passed (or was not asked for).
CandidateResult run_candidate(Runnable& runnable, CUstream stream, const CandidateOptions& options);

}  // namespace qtune::providers

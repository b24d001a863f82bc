#pragma once
// The one mapping of qtune's results into database rows (db/store.hpp): `tune`, `compile` and `bench` store their
// runs, configurations, compiles, verifications and measurements through these functions, so that a row means the
// same whichever command wrote it.
#include <optional>
#include <string>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/providers/pipeline.hpp"
#include "tuner/tune/backend.hpp"

namespace qtune::tune {

// A run of `kind` ("tune", "bench", "compile") stamped with this build (version, git sha) and this host; the caller
// fills in the GPU and the command.
db::RunInfo run_info_of_this_build(std::string kind);

// A kernel family's configuration as a config row, tied to the kernel sources it is built from.
db::KernelConfig config_record(const KernelConfig& config, const std::string& source_hash);

// What the compile step knows of a kernel it built (or found in the cache).
InstantiationResult instantiation_result(const jit::CompiledKernel& kernel);
// One compile of an instantiation: its resources, or the compiler's message when it failed. The time of a cache hit
// is not stored (it compiled nothing).
db::CompileResult compile_record(db::RunId run, db::ConfigId config, const Instantiation& instantiation,
                                 const InstantiationResult& result);

// A successful measurement as the store keeps it: status ok, statistics, raw samples, L2 mode, the NVML sample
// taken after it (fields NVML could not read stay unset) and the throttle flag. The caller sets the rest.
void record_measurement(db::Measurement& record, const measure::Measurement& measurement);

// What one candidate leaves in the store: always a verification; a measurement unless the verification failed.
//   measured            passed + ok (message: the measurement's stop reason)
//   verification failed failed, nothing timed
//   error               invalid + failed; passed + failed when the check passed and the measurement failed
//   crashed / timeout   crashed + crashed / timeout
struct CandidateRecords {
  db::Verification verification;
  std::optional<db::Measurement> measurement;
};
CandidateRecords candidate_records(const providers::CandidateResult& result, db::RunId run, db::ProblemId problem,
                                   db::ConfigId config, const std::string& phase);

}  // namespace qtune::tune

#pragma once
// Every job the measuring worker serves (tuner/measure/worker.hpp), registered in this one place, and the one
// serializer of each job's parameters (a to_json/from_json pair that both sides use):
//   selftest-*      the worker's own checks (measure/selftest_jobs.hpp)
//   gemm-prepare    a provider prepares a problem's operands (random data, the CPU reference of the checked rows,
//                   device buffers); kept in the worker for the candidates that follow
//   gemm-candidate  a provider loads one configuration on them and runs the pipeline (providers/pipeline.hpp):
//                   poison, launch, verify, measure; answers a providers::CandidateResult
//   bench-baseline  cuBLASLt's top-k algorithms through the same check and measurement, screened and decided by a
//                   run-off (baselines/baseline_bench.hpp)
// `qtune tune` and `qtune kernel-sweep` send gemm-prepare and gemm-candidate (WorkerBackend), `qtune bench` sends
// bench-baseline. A new provider adds nothing here: it is found by name (find_provider).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuner/providers/pipeline.hpp"
#include "tuner/providers/provider.hpp"

namespace qtune::tune {

inline constexpr const char* kPrepareJob = "gemm-prepare";
inline constexpr const char* kCandidateJob = "gemm-candidate";

// Registers every job above in this process's worker registry (idempotent). `qtune __worker` calls it, and so does
// every test binary that serves as a worker.
void register_worker_jobs();
// The names register_worker_jobs registers, sorted.
std::vector<std::string> worker_job_names();

// The provider of that name: a kernel family ("mma", "wgmma", "tma"), a MoE provider ("mma-moe", "wgmma-moe") or a cuBLASLt
// baseline ("cublaslt-f16", ...).
// InputError naming "provider" otherwise.
providers::Provider& find_provider(const std::string& name);

// The parameters of gemm-prepare and gemm-candidate (prepare uses all but `load` and `candidate`). The problem is
// "kind": "dense" (format, m, n, k, bias; the default) or "moe" (its MoeProblem::to_json under "moe").
struct CandidateJob {
  std::string provider;
  providers::ProviderProblem problem;
  std::string configuration;            // what the provider loads; also sizes its buffers at prepare
  providers::PrepareOptions prepare;
  providers::LoadOptions load;
  providers::CandidateOptions candidate;
  // Operands are kept between jobs while this stays the same.
  std::string operands_key() const;
};
void to_json(nlohmann::json& json, const CandidateJob& job);
void from_json(const nlohmann::json& json, CandidateJob& job);  // InputError naming a bad field

}  // namespace qtune::tune

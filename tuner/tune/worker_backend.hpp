#pragma once
// The GPU measuring backend: every candidate is verified and measured inside the measuring worker process
// (tuner/measure/worker.hpp), so an illegal address, an illegal instruction or a hang kills only the worker and is
// recorded as a crash or a timeout of that candidate. One WorkerBackend drives one worker on one GPU.
//
// Worker jobs (registered by register_tune_jobs, which `qtune __worker` calls):
//   gemm-prepare    makes the problem's random data (never zeros), its CPU reference on the verified rows and the
//                   device buffers; kept in the worker for the candidates that follow.
//   gemm-candidate  loads the candidate's cubin from the kernel cache, poisons the output (NaN), launches once,
//                   checks every element was written and the verified rows against the reference, then measures
//                   (CUPTI, cold L2 unless the options say otherwise).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/quantize.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/tune/backend.hpp"

namespace qtune::tune {

inline constexpr const char* kPrepareJob = "gemm-prepare";
inline constexpr const char* kCandidateJob = "gemm-candidate";

// Registers gemm-prepare and gemm-candidate in this process's worker job registry (idempotent).
void register_tune_jobs();

struct WorkerBackendOptions {
  measure::WorkerOptions worker;  // which executable serves the jobs (default: this one, `__worker`)
  // CUDA_VISIBLE_DEVICES for the worker ("GPU-<uuid>" or an ordinal), so each worker sees exactly its GPU; "": inherit.
  std::string visible_device;
  MeasureSettings measure = default_measure_settings();
  std::optional<std::filesystem::path> cache_directory;  // the kernel cache the compile step filled
  double prepare_timeout_s = 900;  // data and CPU reference of the largest problems take a while
};

class WorkerBackend final : public MeasuringBackend {
 public:
  explicit WorkerBackend(WorkerBackendOptions options);
  CandidateResult evaluate(const CandidateRequest& request) override;
  int workers_started() const { return worker_.workers_started(); }

 private:
  nlohmann::json problem_params(const CandidateRequest& request) const;
  WorkerBackendOptions options_;
  measure::Worker worker_;
  int prepared_pid_ = 0;
  std::string prepared_problem_;
};

// The worker's arguments for a visible device: `env CUDA_VISIBLE_DEVICES=... <executable> <arguments...>`.
measure::WorkerOptions worker_options_for_device(measure::WorkerOptions base, const std::string& visible_device);

// ---- pieces of the jobs, exposed for tests ----

// The rows verified for an M-row output: all of them up to full_verify_max_m, else `count` distinct rows chosen
// at random (seeded), always including the first and the last, ascending.
std::vector<std::int64_t> rows_to_verify(std::int64_t m, std::int64_t full_verify_max_m, std::int64_t count, std::uint64_t seed);
// The activations of the given rows only (scales follow their rows), so the reference can be computed on a sample.
QuantizedActivations select_rows(const QuantizedActivations& activations, const std::vector<std::int64_t>& rows);
// Output elements that are NaN or infinite (the poison left where the kernel wrote nothing shows up here).
std::int64_t count_non_finite(const std::vector<std::uint16_t>& output_bits, OutputType output);

}  // namespace qtune::tune

#pragma once
// The GPU measuring backend: every candidate is verified and measured inside the measuring worker process
// (tuner/measure/worker.hpp), so an illegal address, an illegal instruction or a hang kills only the worker and is
// recorded as a crash or a timeout of that candidate. One WorkerBackend drives one worker on one GPU.
//
// Each candidate goes to the worker as a gemm-candidate job (worker_jobs.hpp) after a gemm-prepare of its problem;
// the worker runs the providers' pipeline (providers/pipeline.hpp) and answers one providers::CandidateResult.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tuner/measure/worker.hpp"
#include "tuner/tune/backend.hpp"
#include "tuner/tune/worker_jobs.hpp"

namespace qtune::tune {

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
  // Any provider's job (a MoE problem's, ...): gemm-prepare when the worker lacks its operands, then gemm-candidate.
  CandidateResult evaluate_job(const CandidateJob& job, double timeout_s);
  int workers_started() const { return worker_.workers_started(); }

 private:
  CandidateJob job_of(const CandidateRequest& request) const;
  WorkerBackendOptions options_;
  measure::Worker worker_;
  int prepared_pid_ = 0;
  std::string prepared_problem_;
};

// The worker's arguments for a visible device: `env CUDA_VISIBLE_DEVICES=... <executable> <arguments...>`.
measure::WorkerOptions worker_options_for_device(measure::WorkerOptions base, const std::string& visible_device);

// One WorkerBackend per measuring slot: slot i's worker sees only visible_devices[i], measures with `measure` and
// loads from the kernel cache at `cache_directory` (std::out_of_range for a slot beyond the devices).
BackendFactory worker_backends(std::vector<std::string> visible_devices, const MeasureSettings& measure,
                               const std::filesystem::path& cache_directory);

}  // namespace qtune::tune

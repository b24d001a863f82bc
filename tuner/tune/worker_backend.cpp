#include "tuner/tune/worker_backend.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "kernels/error.hpp"
#include "tuner/tune/problem_set.hpp"

namespace qtune::tune {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- parent side

measure::WorkerOptions worker_options_for_device(measure::WorkerOptions base, const std::string& visible_device) {
  if (visible_device.empty()) return base;
  std::string executable = base.executable;
  if (executable == "/proc/self/exe") {
    std::error_code error;
    const fs::path resolved = fs::read_symlink("/proc/self/exe", error);
    if (error) QTUNE_LIBRARY_ERROR("system", "cannot resolve /proc/self/exe: " + error.message());
    executable = resolved.string();
  }
  // env sets the variable and execs in place, so the worker's pid (which the watchdog kills) stays the same.
  std::vector<std::string> arguments = {"CUDA_VISIBLE_DEVICES=" + visible_device, executable};
  arguments.insert(arguments.end(), base.arguments.begin(), base.arguments.end());
  base.executable = "/usr/bin/env";
  base.arguments = std::move(arguments);
  return base;
}

WorkerBackend::WorkerBackend(WorkerBackendOptions options)
    : options_(std::move(options)), worker_(worker_options_for_device(options_.worker, options_.visible_device)) {}

CandidateJob WorkerBackend::job_of(const CandidateRequest& request) const {
  CandidateJob job;
  job.provider = request.family->name();
  job.problem.gemm = request.problem;
  job.configuration = request.config.to_string();
  job.prepare.seed = options_.measure.seed;
  job.prepare.full_verify_max_m = options_.measure.full_verify_max_m;
  job.prepare.verify_rows = options_.measure.verify_rows;
  job.prepare.device = 0;  // the worker sees its one GPU (visible_device)
  job.load.arch = request.arch;
  job.load.expected_cache_key = request.cache_key;
  job.load.cache_directory = options_.cache_directory;
  job.candidate.verify = options_.measure.verify;
  job.candidate.measure = request.fidelity == search::Fidelity::Full ? options_.measure.full_fidelity
                                                                    : options_.measure.short_fidelity;
  return job;
}

CandidateResult WorkerBackend::evaluate(const CandidateRequest& request) {
  return evaluate_job(job_of(request), request.timeout_s);
}

CandidateResult WorkerBackend::evaluate_job(const CandidateJob& job, double timeout_s) {
  const nlohmann::json params = job;
  const std::string operands = job.operands_key();
  // A fresh worker (the first, or after a crash) makes the problem's data under a generous watchdog first, so the
  // candidate's own timeout covers only the candidate.
  if (worker_.pid() == 0 || worker_.pid() != prepared_pid_ || prepared_problem_ != operands) {
    const measure::JobOutcome prepared = worker_.run(kPrepareJob, params, options_.prepare_timeout_s);
    const std::string problem = job.problem.kind == providers::ProblemKind::Moe ? job.problem.moe.to_string()
                                                                                : problem_key(job.problem.gemm);
    measure::throw_if_failed(prepared, std::string(kPrepareJob) + " of " + problem);
    prepared_pid_ = prepared.worker_pid;
    prepared_problem_ = operands;
  }
  const measure::JobOutcome outcome = worker_.run(kCandidateJob, params, timeout_s);
  // A worker that faulted, crashed or was killed is gone (or going): the next candidate prepares a fresh one first.
  if (outcome.status == measure::JobStatus::Fault || outcome.status == measure::JobStatus::Crashed ||
      outcome.status == measure::JobStatus::Timeout) {
    prepared_pid_ = 0;
    prepared_problem_.clear();
  }
  CandidateResult result;
  switch (outcome.status) {
    case measure::JobStatus::Ok:
      return outcome.result.get<CandidateResult>();
    case measure::JobStatus::Error:
      // A missing GPU is the environment's fault, not the candidate's.
      if (outcome.error_type == "NoGpuError") measure::throw_if_failed(outcome, kCandidateJob);
      result.outcome = CandidateOutcome::Error;
      result.message = outcome.error_type + ": " + outcome.error;
      return result;
    case measure::JobStatus::Fault:
    case measure::JobStatus::Crashed:
      result.outcome = CandidateOutcome::Crashed;
      result.message = outcome.error;
      return result;
    case measure::JobStatus::Timeout:
      result.outcome = CandidateOutcome::Timeout;
      result.message = outcome.error;
      return result;
  }
  return result;
}

BackendFactory worker_backends(std::vector<std::string> visible_devices, const MeasureSettings& measure,
                               const std::filesystem::path& cache_directory) {
  return [visible_devices = std::move(visible_devices), measure, cache_directory](
             int slot) -> std::unique_ptr<MeasuringBackend> {
    WorkerBackendOptions options;
    options.visible_device = visible_devices.at(static_cast<size_t>(slot));
    options.measure = measure;
    options.cache_directory = cache_directory;
    return std::make_unique<WorkerBackend>(options);
  };
}

}  // namespace qtune::tune

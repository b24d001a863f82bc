#include "tuner/tune/sweep.hpp"

#include <algorithm>
#include <limits>

#include "kernels/error.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/kernel_cache.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/tune/devices.hpp"
#include "tuner/tune/worker_backend.hpp"

namespace qtune::tune {

double sweep_candidate_timeout_s(double time_budget_s) { return 60 + 4 * time_budget_s; }

namespace {

// The configurations of one M: the explicit ones, or the family's curated ranges with the user's replacing theirs;
// the family default first unless excluded.
std::vector<KernelConfig> configs_of(const SweepOptions& options, const KernelFamily& family, const Problem& problem,
                                     const ArchLimits& limits, const KernelConfig& default_config) {
  std::vector<KernelConfig> configs = options.configs;
  if (configs.empty()) {
    providers::SpaceRequest request;
    request.parameter_values = options.ranges;
    request.max_configs = static_cast<std::size_t>(std::max(options.max_configs, 0));
    configs = providers::family_provider(family.name()).candidates(problem, limits, request);
  }
  if (options.include_default && std::find(configs.begin(), configs.end(), default_config) == configs.end()) {
    configs.insert(configs.begin(), default_config);
  }
  if (configs.empty()) QTUNE_INPUT_ERROR("ranges: no valid configuration for " + problem.to_string());
  return configs;
}

void record_result(SweepRow& row, const CandidateResult& result, uint64_t compulsory_bytes, const Problem& problem) {
  row.verified = result.verified && result.outcome == CandidateOutcome::Measured;
  row.verification = result.verified ? result.verification_summary : "not verified";
  switch (result.outcome) {
    case CandidateOutcome::Measured: {
      row.measurement = result.measurement;
      row.measured = true;
      const double seconds = row.measurement.median_us * 1e-6;
      row.gbps = static_cast<double>(compulsory_bytes) / seconds / 1e9;
      row.tflops = 2.0 * static_cast<double>(problem.m) * static_cast<double>(problem.n) * static_cast<double>(problem.k) /
                   seconds / 1e12;
      return;
    }
    case CandidateOutcome::VerificationFailed:
      row.error = "verification failed: " + result.message;
      return;
    case CandidateOutcome::Error:
      row.error = result.message;
      return;
    case CandidateOutcome::Crashed:
    case CandidateOutcome::Timeout:
      row.error = to_string(result.outcome) + ": " + result.message;
      return;
  }
}

}  // namespace

std::vector<SweepRow> run_sweep(const SweepOptions& options, const TuneTarget& target, InstantiationCompiler& compiler,
                                MeasuringBackend& backend, const std::function<void(const SweepRow&)>& progress) {
  if (options.m_values.empty()) QTUNE_INPUT_ERROR("m: no values");
  const KernelFamily& family = find_family(options.family);
  const ArchLimits& limits = target.limits;
  const ArchSupport support = family.supports(options.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);

  std::vector<SweepRow> rows;
  for (int64_t m : options.m_values) {
    const Problem problem{options.format, m, options.n, options.k, options.bias};
    const KernelConfig default_config = family.default_config(problem, limits);
    const std::vector<KernelConfig> configs = configs_of(options, family, problem, limits, default_config);

    std::vector<SweepRow> m_rows;
    std::vector<Instantiation> requests;
    for (const KernelConfig& config : configs) {
      SweepRow row;
      row.m = m;
      row.config = config;
      row.is_default = config == default_config;
      const RuleVerdict verdict = family.check(config, problem, limits);
      if (verdict.valid) {
        requests.push_back({config, problem.format, target.arch});
      } else {
        row.error = "invalid: " + verdict.rule + ": " + verdict.detail;
      }
      m_rows.push_back(row);
    }
    const std::vector<InstantiationResult> compiled = compiler.compile(family, requests, {});

    size_t next_compiled = 0;
    for (SweepRow& row : m_rows) {
      if (!row.error.empty()) {
        if (progress) progress(row);
        continue;
      }
      const InstantiationResult& outcome = compiled.at(next_compiled++);
      row.shared_bytes = family.launch_geometry(row.config, problem).dynamic_shared_bytes;
      if (!outcome.ok) {
        row.error = "compile failed: " + outcome.message.substr(0, 2000);
      } else {
        row.registers = outcome.resources.registers;
        row.spill_bytes = outcome.spill_store_bytes;
        CandidateRequest request;
        request.family = &family;
        request.problem = problem;
        request.config = row.config;
        request.arch = target.arch;
        request.cache_key = outcome.cache_key;
        request.timeout_s = sweep_candidate_timeout_s(options.measure.time_budget_s);
        record_result(row, backend.evaluate(request), gemm::compulsory_bytes(family, row.config, problem), problem);
      }
      if (progress) progress(row);
    }
    rows.insert(rows.end(), m_rows.begin(), m_rows.end());
  }
  return rows;
}

std::vector<SweepRow> run_sweep_on_device(const SweepOptions& options, const std::function<void(const SweepRow&)>& progress) {
  const TuneTarget target = resolve_target("auto", std::to_string(options.device), false);
  jit::CompilerSettings settings;
  NvrtcInstantiationCompiler compiler(settings);
  WorkerBackendOptions backend_options;
  backend_options.visible_device = target.visible_devices.at(0);
  backend_options.cache_directory = settings.cache_directory.value_or(jit::KernelCache::default_directory());
  backend_options.measure.full_fidelity = options.measure;
  backend_options.measure.full_fidelity.device = 0;  // the worker sees only its GPU
  backend_options.measure.full_verify_max_m = std::numeric_limits<std::int64_t>::max();  // every row, as always
  backend_options.measure.verify = options.verify;
  backend_options.measure.seed = options.seed;
  WorkerBackend backend(backend_options);
  return run_sweep(options, target, compiler, backend, progress);
}

}  // namespace qtune::tune

#include "tuner/tune/worker_backend.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <set>

#include "kernels/error.hpp"
#include "kernels/reference.hpp"
#include "tuner/gemm/gemm_runner.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/stream.hpp"
#include "tuner/tune/problem_set.hpp"

namespace qtune::tune {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- pieces

std::vector<std::int64_t> rows_to_verify(std::int64_t m, std::int64_t full_verify_max_m, std::int64_t count, std::uint64_t seed) {
  std::vector<std::int64_t> rows;
  if (m <= 0) return rows;
  if (m <= full_verify_max_m || count >= m) {
    for (std::int64_t row = 0; row < m; ++row) rows.push_back(row);
    return rows;
  }
  std::set<std::int64_t> chosen{0, m - 1};
  RandomGenerator random(seed ^ 0x5eed'0f'7a'b1e5ULL);
  const auto wanted = static_cast<size_t>(std::max<std::int64_t>(count, 2));
  while (chosen.size() < wanted) chosen.insert(static_cast<std::int64_t>(random.next() % static_cast<std::uint64_t>(m)));
  return {chosen.begin(), chosen.end()};
}

QuantizedActivations select_rows(const QuantizedActivations& activations, const std::vector<std::int64_t>& rows) {
  QuantizedActivations selected;
  selected.format = activations.format;
  selected.m = static_cast<std::int64_t>(rows.size());
  selected.k = activations.k;
  selected.global_scale = activations.global_scale;
  const auto k = static_cast<size_t>(activations.k);
  for (std::int64_t row : rows) {
    if (row < 0 || row >= activations.m) {
      QTUNE_THROW(Error, "select_rows: row " + std::to_string(row) + " outside 0.." + std::to_string(activations.m - 1));
    }
    const size_t offset = static_cast<size_t>(row) * k;
    if (!activations.codes.empty()) {
      selected.codes.insert(selected.codes.end(), activations.codes.begin() + static_cast<std::ptrdiff_t>(offset),
                            activations.codes.begin() + static_cast<std::ptrdiff_t>(offset + k));
    }
    if (!activations.values.empty()) {
      selected.values.insert(selected.values.end(), activations.values.begin() + static_cast<std::ptrdiff_t>(offset),
                             activations.values.begin() + static_cast<std::ptrdiff_t>(offset + k));
    }
    if (!activations.bits16.empty()) {
      selected.bits16.insert(selected.bits16.end(), activations.bits16.begin() + static_cast<std::ptrdiff_t>(offset),
                             activations.bits16.begin() + static_cast<std::ptrdiff_t>(offset + k));
    }
  }
  // Each selected row gets its own copy of the scale row it used (per tensor: the single row), one row per scale row.
  const ScaleGrid& scales = activations.scales;
  selected.scales.type = scales.type;
  if (!scales.empty()) {
    selected.scales.rows = selected.m;
    selected.scales.cols = scales.cols;
    selected.scales.rows_per_scale = 1;
    selected.scales.cols_per_scale = scales.cols_per_scale;
    const auto cols = static_cast<size_t>(scales.cols);
    for (std::int64_t row : rows) {
      const size_t first = static_cast<size_t>(row / scales.rows_per_scale) * cols;
      selected.scales.values.insert(selected.scales.values.end(), scales.values.begin() + static_cast<std::ptrdiff_t>(first),
                                    scales.values.begin() + static_cast<std::ptrdiff_t>(first + cols));
      if (!scales.bits.empty()) {
        selected.scales.bits.insert(selected.scales.bits.end(), scales.bits.begin() + static_cast<std::ptrdiff_t>(first),
                                    scales.bits.begin() + static_cast<std::ptrdiff_t>(first + cols));
      }
    }
  }
  return selected;
}

std::int64_t count_non_finite(const std::vector<std::uint16_t>& output_bits, OutputType output) {
  // All-ones exponent: inf or NaN (f16: 5 exponent bits, bf16: 8).
  const std::uint16_t exponent = output == OutputType::F16 ? 0x7C00 : 0x7F80;
  std::int64_t count = 0;
  for (std::uint16_t bits : output_bits) count += (bits & exponent) == exponent ? 1 : 0;
  return count;
}

// ---------------------------------------------------------------- worker side

namespace {

struct ProblemParams {
  const KernelFamily* family = nullptr;
  Problem problem;
  std::uint64_t seed = 1;
  std::int64_t full_verify_max_m = 256;
  std::int64_t verify_rows = 64;
  int device = 0;

  static ProblemParams from_json(const nlohmann::json& params) {
    ProblemParams result;
    result.family = &find_family(params.at("family").get<std::string>());
    result.problem.format = FormatSpec::parse(params.at("format").get<std::string>());
    result.problem.m = params.at("m").get<std::int64_t>();
    result.problem.n = params.at("n").get<std::int64_t>();
    result.problem.k = params.at("k").get<std::int64_t>();
    result.seed = params.value("seed", std::uint64_t{1});
    result.full_verify_max_m = params.value("full_verify_max_m", std::int64_t{256});
    result.verify_rows = params.value("verify_rows", std::int64_t{64});
    result.device = params.value("device", 0);
    return result;
  }
  std::string weights_key() const {
    return family->name() + "|" + problem.format.to_string() + "|" + std::to_string(problem.n) + "x" +
           std::to_string(problem.k) + "|" + std::to_string(seed);
  }
  std::string key() const { return weights_key() + "|m=" + std::to_string(problem.m); }
};

// What the worker keeps between jobs: the problem's data, reference and device buffers, and the JIT (cache reads).
struct WorkerState {
  std::mutex mutex;  // jobs run one at a time; the lock documents that the state is shared between them
  std::string weights_key;
  gemm::GemmData weights_data;
  std::string problem_key;
  gemm::GemmData data;
  std::vector<std::int64_t> rows;
  ReferenceResult reference;  // of `rows` only
  std::unique_ptr<gemm::GemmDeviceData> device_data;
  std::unique_ptr<runtime::Stream> stream;
  std::unique_ptr<jit::Compiler> compiler;
  std::string compiler_cache;
};

WorkerState& worker_state() {
  static WorkerState* state = new WorkerState;  // never destroyed: device buffers must not outlive the context at exit
  return *state;
}

void prepare_problem(WorkerState& state, const ProblemParams& params, const KernelConfig& any_config) {
  runtime::Device::get(params.device);
  if (state.problem_key == params.key() && state.device_data) return;
  state.device_data.reset();
  state.problem_key.clear();
  if (state.weights_key != params.weights_key()) {
    state.weights_key.clear();
    state.weights_data = gemm::make_gemm_data(Problem{params.problem.format, 1, params.problem.n, params.problem.k, false},
                                              params.seed);
    state.weights_key = params.weights_key();
  }
  state.data = gemm::with_new_activations(state.weights_data, params.problem.m,
                                          params.seed + static_cast<std::uint64_t>(params.problem.m));
  state.rows = rows_to_verify(params.problem.m, params.full_verify_max_m, params.verify_rows,
                              params.seed + static_cast<std::uint64_t>(params.problem.m));
  ReferenceOptions reference_options;
  reference_options.bias = state.data.bias;
  if (static_cast<std::int64_t>(state.rows.size()) == params.problem.m) {
    state.reference = reference_gemm(state.data.activations, state.data.weights, reference_options);
  } else {
    state.reference = reference_gemm(select_rows(state.data.activations, state.rows), state.data.weights, reference_options);
  }
  state.device_data = std::make_unique<gemm::GemmDeviceData>(*params.family, any_config, state.data);
  if (!state.stream) state.stream = std::make_unique<runtime::Stream>();
  state.problem_key = params.key();
}

const jit::Compiler& worker_compiler(WorkerState& state, const nlohmann::json& params) {
  const std::string cache = params.value("cache_dir", std::string{});
  if (!state.compiler || state.compiler_cache != cache) {
    jit::CompilerSettings settings;
    if (!cache.empty()) settings.cache_directory = fs::path(cache);
    settings.threads = 1;
    state.compiler = std::make_unique<jit::Compiler>(settings);
    state.compiler_cache = cache;
  }
  return *state.compiler;
}

nlohmann::json prepare_job(const nlohmann::json& params) {
  WorkerState& state = worker_state();
  std::lock_guard lock(state.mutex);
  const ProblemParams problem = ProblemParams::from_json(params);
  const KernelConfig config = KernelConfig::parse(params.at("config").get<std::string>(), problem.family->name());
  prepare_problem(state, problem, config);
  return {{"problem", problem.key()}, {"rows_verified", state.rows.size()}};
}

nlohmann::json candidate_job(const nlohmann::json& params) {
  WorkerState& state = worker_state();
  std::lock_guard lock(state.mutex);
  const ProblemParams problem = ProblemParams::from_json(params);
  const KernelFamily& family = *problem.family;
  const KernelConfig config = KernelConfig::parse(params.at("config").get<std::string>(), family.name());
  prepare_problem(state, problem, config);

  Instantiation instantiation{config, problem.problem.format, params.at("arch").get<std::string>()};
  const jit::CompileRequest request = compile_request(family, instantiation);
  const jit::Compiler& compiler = worker_compiler(state, params);
  const jit::CompiledKernel compiled = compiler.compile(request);
  const std::string expected_key = params.value("cache_key", std::string{});
  if (!expected_key.empty() && compiled.cache_key != expected_key) {
    QTUNE_THROW(Error, "gemm-candidate: the worker built cache key " + compiled.cache_key + " but the tuner compiled " +
                           expected_key + " (different kernel sources or NVRTC?)");
  }
  gemm::LoadedKernel kernel(family, config, problem.problem.format, compiled);

  gemm::GemmDeviceData& device_data = *state.device_data;
  const runtime::Stream& stream = *state.stream;
  device_data.prepare(config);
  device_data.poison_output();
  device_data.launch(kernel, stream.get());
  stream.synchronize();
  const std::vector<std::uint16_t> output = device_data.output_bits();
  const OutputType output_type = problem.problem.format.output;
  const std::int64_t unwritten = count_non_finite(output, output_type);
  std::vector<std::uint16_t> checked;
  const auto n = static_cast<size_t>(problem.problem.n);
  checked.reserve(state.rows.size() * n);
  for (std::int64_t row : state.rows) {
    const auto first = output.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(row) * n);
    checked.insert(checked.end(), first, first + static_cast<std::ptrdiff_t>(n));
  }
  const gemm::Verification verification =
      gemm::verify_output(checked, output_type, state.reference, default_tolerance(problem.problem.format));
  const bool passed = verification.passed && unwritten == 0;
  std::string summary = verification.summary();
  if (unwritten > 0) summary += "; " + std::to_string(unwritten) + " of " + std::to_string(output.size()) + " outputs NaN/inf or never written";
  summary += " [" + std::to_string(state.rows.size()) + " of " + std::to_string(problem.problem.m) + " rows checked]";
  nlohmann::json result = {{"verification",
                            {{"passed", passed},
                             // JSON has no infinity: a NaN-poisoned output's error travels as null.
                             {"relative_error", std::isfinite(verification.relative_error)
                                                    ? nlohmann::json(verification.relative_error)
                                                    : nlohmann::json(nullptr)},
                             {"tolerance", verification.tolerance},
                             {"rows_checked", state.rows.size()},
                             {"unwritten", unwritten},
                             {"summary", summary}}}};
  if (!passed) return result;
  const measure::MeasureOptions options = measure::measure_options_from_json(params.at("measure"));
  const measure::Measurement measurement =
      measure::measure([&](CUstream launch_stream) { device_data.launch(kernel, launch_stream); }, options);
  result["measurement"] = measurement;
  return result;
}

}  // namespace

void register_tune_jobs() {
  measure::register_job(kPrepareJob, prepare_job);
  measure::register_job(kCandidateJob, candidate_job);
}

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

nlohmann::json WorkerBackend::problem_params(const CandidateRequest& request) const {
  nlohmann::json params = {{"family", request.family->name()},
                           {"format", request.problem.format.to_string()},
                           {"m", request.problem.m},
                           {"n", request.problem.n},
                           {"k", request.problem.k},
                           {"seed", options_.measure.seed},
                           {"full_verify_max_m", options_.measure.full_verify_max_m},
                           {"verify_rows", options_.measure.verify_rows},
                           {"device", 0},
                           {"config", request.config.to_string()}};
  if (options_.cache_directory) params["cache_dir"] = options_.cache_directory->string();
  return params;
}

CandidateResult WorkerBackend::evaluate(const CandidateRequest& request) {
  nlohmann::json params = problem_params(request);
  const std::string problem = problem_key(request.problem);
  // A fresh worker (the first, or after a crash) makes the problem's data under a generous watchdog first, so the
  // candidate's own timeout covers only the candidate.
  if (worker_.pid() == 0 || worker_.pid() != prepared_pid_ || prepared_problem_ != problem) {
    const measure::JobOutcome prepared = worker_.run(kPrepareJob, params, options_.prepare_timeout_s);
    measure::throw_if_failed(prepared, std::string(kPrepareJob) + " of " + problem);
    prepared_pid_ = prepared.worker_pid;
    prepared_problem_ = problem;
  }
  params["arch"] = request.arch;
  params["cache_key"] = request.cache_key;
  params["measure"] = measure::measure_options_to_json(request.fidelity == search::Fidelity::Full ? options_.measure.full_fidelity
                                                                                        : options_.measure.short_fidelity);
  const measure::JobOutcome outcome = worker_.run(kCandidateJob, params, request.timeout_s);
  // A worker that faulted, crashed or was killed is gone (or going): the next candidate prepares a fresh one first.
  if (outcome.status == measure::JobStatus::Fault || outcome.status == measure::JobStatus::Crashed ||
      outcome.status == measure::JobStatus::Timeout) {
    prepared_pid_ = 0;
    prepared_problem_.clear();
  }
  CandidateResult result;
  switch (outcome.status) {
    case measure::JobStatus::Ok: break;
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
  const nlohmann::json& verification = outcome.result.at("verification");
  const nlohmann::json& relative_error = verification.at("relative_error");
  result.max_rel_error = relative_error.is_number() ? relative_error.get<double>() : std::numeric_limits<double>::infinity();
  result.tolerance = verification.value("tolerance", 0.0);
  result.rows_checked = verification.value("rows_checked", std::int64_t{0});
  result.verification_summary = verification.value("summary", std::string{});
  if (!verification.value("passed", false)) {
    result.outcome = CandidateOutcome::VerificationFailed;
    result.message = result.verification_summary;
    return result;
  }
  result.outcome = CandidateOutcome::Measured;
  result.measurement = outcome.result.at("measurement").get<measure::Measurement>();
  return result;
}

}  // namespace qtune::tune

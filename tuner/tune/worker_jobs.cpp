#include "tuner/tune/worker_jobs.hpp"

#include <algorithm>
#include <memory>
#include <mutex>

#include "kernels/error.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/baselines/cublaslt_provider.hpp"
#include "tuner/baselines/moe_grouped_baseline.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/providers/family_provider.hpp"
#include "tuner/providers/moe_provider.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/runtime/stream.hpp"

namespace qtune::tune {

namespace fs = std::filesystem;
using measure::job_field;

providers::Provider& find_provider(const std::string& name) {
  // Python-hosted peers (issue 15) are looked up here beside these.
  if (name == providers::kMoeProviderName || name == providers::kWgmmaMoeProviderName || name == providers::kTmaMoeProviderName) {
    return *providers::find_moe_provider(name);
  }
  if (name == baselines::kMoeGroupedBaselineName) return baselines::moe_grouped_baseline_provider();
  std::string families;
  for (const KernelFamily* family : kernel_families()) {
    if (family->name() == name) return providers::family_provider(name);
    families += (families.empty() ? "" : ", ") + family->name();
  }
  try {
    return baselines::cublaslt_provider(name);
  } catch (const InputError&) {
    QTUNE_INPUT_ERROR("provider: '" + name + "' is neither a kernel family (" + families + "), " +
                      providers::kMoeProviderName + ", " + providers::kWgmmaMoeProviderName + ", " + providers::kTmaMoeProviderName + ", " +
                      baselines::kMoeGroupedBaselineName + " nor a cuBLASLt baseline");
  }
}

std::string CandidateJob::operands_key() const {
  const std::string verify = std::to_string(prepare.seed) + "|v" + std::to_string(prepare.full_verify_max_m) + "," +
                             std::to_string(prepare.verify_rows);
  if (problem.kind == providers::ProblemKind::Moe) {
    // The problem's text names the routing but not its seed. qtune's MoE providers prepare the same operands (the
    // families share the experts' packed layout), so the mma, wgmma and tma candidates of a problem share one prepare.
    const std::string owner = providers::find_moe_provider(provider) != nullptr ? std::string("qtune-moe") : provider;
    return owner + "|" + problem.moe.to_string() + "|routing seed " + std::to_string(problem.moe.routing.seed) + "|" + verify;
  }
  const Problem& gemm = problem.gemm;
  return provider + "|" + gemm.format.to_string() + "|" + std::to_string(gemm.n) + "x" + std::to_string(gemm.k) + "|" +
         (gemm.has_bias ? "bias|" : "") + verify + "|m=" + std::to_string(gemm.m);
}

void to_json(nlohmann::json& json, const CandidateJob& job) {
  json = nlohmann::json{{"provider", job.provider},
                        {"config", job.configuration},
                        {"seed", job.prepare.seed},
                        {"full_verify_max_m", job.prepare.full_verify_max_m},
                        {"verify_rows", job.prepare.verify_rows},
                        {"device", job.prepare.device},
                        {"arch", job.load.arch},
                        {"cache_key", job.load.expected_cache_key},
                        {"verify", job.candidate.verify},
                        {"measure", measure::measure_options_to_json(job.candidate.measure)}};
  if (job.load.cache_directory) json["cache_dir"] = job.load.cache_directory->string();
  if (job.problem.kind == providers::ProblemKind::Moe) {
    json["kind"] = "moe";
    json["moe"] = job.problem.moe.to_json();
  } else {
    const Problem& gemm = job.problem.gemm;
    json["format"] = gemm.format.to_string();
    json["m"] = gemm.m;
    json["n"] = gemm.n;
    json["k"] = gemm.k;
    json["bias"] = gemm.has_bias;
  }
}

void from_json(const nlohmann::json& json, CandidateJob& job) {
  job = CandidateJob{};
  job.provider = job_field(json, "provider", std::string{});
  if (job.provider.empty()) QTUNE_INPUT_ERROR("provider: missing");
  const std::string kind = job_field(json, "kind", std::string{"dense"});
  if (kind == "moe") {
    job.problem.kind = providers::ProblemKind::Moe;
    if (!json.contains("moe")) QTUNE_INPUT_ERROR("moe: missing (a job of kind moe carries its MoE problem)");
    job.problem.moe = MoeProblem::from_json(json.at("moe"));
  } else if (kind == "dense") {
    Problem& gemm = job.problem.gemm;
    gemm.format = FormatSpec::parse(job_field(json, "format", std::string{}));
    gemm.m = job_field(json, "m", std::int64_t{0});
    gemm.n = job_field(json, "n", std::int64_t{0});
    gemm.k = job_field(json, "k", std::int64_t{0});
    gemm.has_bias = job_field(json, "bias", false);
  } else {
    QTUNE_INPUT_ERROR("kind: expected dense or moe, got '" + kind + "'");
  }
  job.configuration = job_field(json, "config", std::string{});
  job.prepare.seed = job_field(json, "seed", job.prepare.seed);
  job.prepare.full_verify_max_m = job_field(json, "full_verify_max_m", job.prepare.full_verify_max_m);
  job.prepare.verify_rows = job_field(json, "verify_rows", job.prepare.verify_rows);
  job.prepare.device = job_field(json, "device", job.prepare.device);
  job.prepare.any_configuration = job.configuration;
  job.load.arch = job_field(json, "arch", std::string{});
  job.load.expected_cache_key = job_field(json, "cache_key", std::string{});
  const std::string cache = job_field(json, "cache_dir", std::string{});
  if (!cache.empty()) job.load.cache_directory = fs::path(cache);
  job.candidate.verify = job_field(json, "verify", true);
  job.candidate.measure = measure::measure_options_from_json(json.value("measure", nlohmann::json::object()));
}

namespace {

// What the worker keeps between jobs: the last problem's operands and the stream the checks launch on.
struct WorkerState {
  std::mutex mutex;  // jobs run one at a time; the lock documents that the state is shared between them
  std::string operands_key;
  std::unique_ptr<providers::Operands> operands;
  std::unique_ptr<runtime::Stream> stream;
};

WorkerState& worker_state() {
  static auto* state = new WorkerState;  // never destroyed: device buffers must not outlive the context at exit
  return *state;
}

providers::Operands& prepared_operands(WorkerState& state, providers::Provider& provider, const CandidateJob& job) {
  runtime::Device::get(job.prepare.device);
  if (state.operands && state.operands_key == job.operands_key()) return *state.operands;
  state.operands.reset();
  state.operands_key.clear();
  state.operands = provider.prepare(job.problem, job.prepare);
  if (!state.stream) state.stream = std::make_unique<runtime::Stream>();
  state.operands_key = job.operands_key();
  return *state.operands;
}

nlohmann::json prepare_job(const nlohmann::json& params) {
  WorkerState& state = worker_state();
  std::lock_guard lock(state.mutex);
  const CandidateJob job = params.get<CandidateJob>();
  prepared_operands(state, find_provider(job.provider), job);
  return {{"operands", state.operands_key}};
}

nlohmann::json candidate_job(const nlohmann::json& params) {
  WorkerState& state = worker_state();
  std::lock_guard lock(state.mutex);
  const CandidateJob job = params.get<CandidateJob>();
  providers::Provider& provider = find_provider(job.provider);
  providers::Operands& operands = prepared_operands(state, provider, job);
  const std::unique_ptr<providers::Runnable> runnable = provider.load(operands, job.configuration, job.load);
  return providers::run_candidate(*runnable, state.stream->get(), job.candidate);
}

nlohmann::json bench_baseline_job(const nlohmann::json& params) {
  return baselines::bench_baseline(baselines::request_from_job_params(params));
}

}  // namespace

void register_worker_jobs() {
  measure::register_selftest_jobs();
  measure::register_job(kPrepareJob, prepare_job);
  measure::register_job(kCandidateJob, candidate_job);
  measure::register_job(baselines::kBenchBaselineJob, bench_baseline_job);
}

std::vector<std::string> worker_job_names() {
  register_worker_jobs();
  return measure::registered_jobs();
}

}  // namespace qtune::tune

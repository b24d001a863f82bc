#include "tuner/tune/bench_run.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <utility>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "tuner/baselines/baseline_pin.hpp"
#include "tuner/baselines/cublaslt_provider.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/tune/records.hpp"
#include "tuner/tune/worker_jobs.hpp"

namespace qtune::tune {

using baselines::BaselineKind;
using baselines::GemmProblem;
using baselines::PinnedAlgorithm;
using baselines::TargetResult;

BenchTarget make_baseline_target(BaselineKind kind, const BenchRequest& request) {
  BenchTarget target;
  target.label = baselines::baseline_id(kind);
  target.job = baselines::kBenchBaselineJob;
  baselines::BaselineOptions baseline;
  baseline.top_k = request.top_k;
  baseline.fp8_output = request.fp8_output;
  baseline.device = request.device;
  baselines::RunoffOptions runoff;
  runoff.screen_time_s = request.screen_time_s;
  // Everything but the problem and the pin, which each job call fills in.
  const baselines::BenchBaselineRequest job{.kind = kind,
                                            .problem = {},
                                            .seed = request.seed,
                                            .baseline = baseline,
                                            .measure = request.measure,
                                            .runoff = runoff,
                                            .pinned = std::nullopt,
                                            .placements = request.placements};
  target.job_params = [job](const GemmProblem& problem, const std::optional<PinnedAlgorithm>& pinned) {
    baselines::BenchBaselineRequest params = job;
    params.problem = problem;
    params.pinned = pinned;
    return baselines::to_job_params(params);
  };
  target.traffic = [kind](const GemmProblem& problem) { return baselines::traffic(kind, problem); };
  target.tensor_type = baselines::tensor_type(kind);
  // Stored under the format it is compared with: --format, else the format its operands have ("f16"/"bf16" for
  // the dense baselines, which no quantization format describes).
  if (request.format) {
    target.problem_format = request.format->to_string();
  } else if (const auto own = baselines::baseline_format(kind)) {
    target.problem_format = own->to_string();
  } else {
    target.problem_format = kind == BaselineKind::BF16 ? "bf16" : "f16";
  }
  target.config_kind = db::ConfigKind::Baseline;
  target.config_family = target.label;
  return target;
}

namespace {

// Runs jobs in a worker process, or (in_process) right here.
class JobRunner {
 public:
  explicit JobRunner(const BenchRequest& request) : in_process_(request.in_process) {
    if (in_process_) register_worker_jobs();
    if (!in_process_) {
      measure::WorkerOptions worker_options;
      worker_options.executable = request.worker_executable;
      worker_ = std::make_unique<measure::Worker>(worker_options);
    }
  }

  measure::JobOutcome run(const std::string& job, const nlohmann::json& params, double timeout_s) {
    if (!in_process_) return worker_->run(job, params, timeout_s);
    return measure::run_job_here(job, params);  // the jobs of the one registry (tune/worker_jobs.hpp)
  }

 private:
  bool in_process_;
  std::unique_ptr<measure::Worker> worker_;
};

// A failed job: no GPU or bad input end the command (exit 3 / 2); anything else is one failed row.
void stop_on_fatal(const measure::JobOutcome& outcome, const std::string& job) {
  if (outcome.ok()) return;
  if (outcome.error_type == "NoGpuError" || outcome.error_type == "InputError") measure::throw_if_failed(outcome, job);
}

// The pin: the algorithm the target's earlier bench chose for `problem` on this GPU, or nullopt with `note` saying
// why there is none. `store` is null when the database file does not exist yet.
std::optional<PinnedAlgorithm> stored_pin(db::Store* store, const BenchTarget& target, const GemmProblem& problem,
                                          const BenchRequest& request, const nlohmann::json& device,
                                          std::string& note) {
  const std::string fallback = "; top-k + run-off decided";
  const std::string gpu_name = device.is_object() ? device.value("name", std::string()) : std::string();
  if (gpu_name.empty()) {
    note = "pin: the GPU is unknown, so no stored choice applies" + fallback;
    return std::nullopt;
  }
  std::optional<baselines::StoredChoice> choice;
  if (store) {
    baselines::StoredChoiceQuery query;
    query.problem = {target.problem_format, problem.m, problem.n, problem.k};
    query.family = target.config_family;
    query.gpu_name = gpu_name;
    query.l2_mode = request.measure.warm_l2 ? db::L2Mode::Warm : db::L2Mode::Cold;
    choice = baselines::latest_stored_choice(*store, query);
  }
  if (!choice) {
    note = "pin: no earlier " + std::string(request.measure.warm_l2 ? "warm" : "cold") +
           "-L2 bench of this baseline and problem on " + gpu_name + " in " + request.db_path + fallback;
    return std::nullopt;
  }
  PinnedAlgorithm pinned;
  pinned.algorithm = choice->algorithm;
  pinned.origin = choice->origin();
  if (choice->gpu_uuid != device.value("uuid", std::string())) pinned.origin += " on another " + gpu_name;
  pinned.search_depth = std::max(baselines::kDefaultPinSearchDepth, request.top_k);
  return pinned;
}

// The GPU profile of the device the jobs saw, and the datasheet bandwidth when the copy was not measured.
void complete_context(BenchContext& context) {
  if (context.device.is_object()) {
    try {
      search::DeviceIdentity identity;
      identity.name = context.device.value("name", std::string());
      identity.sm = context.device.value("compute_capability_major", 0) * 10 +
                    context.device.value("compute_capability_minor", 0);
      identity.sm_count = context.device.value("sm_count", 0);
      context.profile = search::match_device(search::load_gpu_profiles(), identity);
    } catch (const Error& error) {
      context.profile_error = error.what();
    }
  }
  if (!context.copy_gbps && context.profile && context.profile->memory_bandwidth_gbps > 0) {
    context.copy_gbps = context.profile->memory_bandwidth_gbps;
    context.bandwidth_source = "DATASHEET " + fixed(*context.copy_gbps, 0) + " GB/s from " +
                               context.profile->source_file.string() +
                               (context.bandwidth_source.empty() ? "" : "; " + context.bandwidth_source);
  }
}

}  // namespace

BenchOutcome run_bench(const BenchRequest& request, const std::function<void(const BenchRow&)>& on_row) {
  BenchOutcome outcome;
  for (const BaselineKind kind : request.kinds) outcome.targets.push_back(make_baseline_target(kind, request));
  outcome.targets.insert(outcome.targets.end(), request.more_targets.begin(), request.more_targets.end());
  if (outcome.targets.empty()) QTUNE_INPUT_ERROR("--baseline: name at least one baseline");
  const bool self_measured = std::any_of(outcome.targets.begin(), outcome.targets.end(),
                                         [](const BenchTarget& target) { return bool(target.measure_self); });
  BenchContext& context = outcome.context;

  JobRunner runner(request);
  if (request.measure_copy_bandwidth) {
    const nlohmann::json params{{"bytes", uint64_t{1} << 30}, {"device", request.device}};
    const measure::JobOutcome copy = runner.run("selftest-copy", params, 300);
    stop_on_fatal(copy, "selftest-copy");
    if (copy.ok()) {
      context.copy_gbps = copy.result.at("bandwidth_gbps").get<double>();
      context.device = copy.result.value("device", nlohmann::json());
      context.bandwidth_source =
          "measured: 1 GiB device-to-device copy kernel, (read + write) / median = " + fixed(*context.copy_gbps, 0) +
          " GB/s";
    } else {
      context.bandwidth_source = "copy measurement failed (" + copy.error + ")";
    }
  }

  // Pinning looks the earlier choice up by GPU, and self-measured targets never say which GPU they ran on: learn it
  // before the first target (for the latter only where a GPU answers: the peers' fake runs on the host).
  if (self_measured && !request.pin_algorithm && context.device.is_null()) {
    const measure::JobOutcome device = runner.run("selftest-device", {{"device", request.device}}, 120);
    if (device.ok()) context.device = device.result;
  }
  std::optional<db::Store> pin_store;
  if (request.pin_algorithm) {
    if (context.device.is_null()) {
      const measure::JobOutcome device = runner.run("selftest-device", {{"device", request.device}}, 120);
      stop_on_fatal(device, "selftest-device");
      if (device.ok()) context.device = device.result;
    }
    if (std::filesystem::exists(request.db_path)) pin_store = db::Store::open_read_only(request.db_path);
  }

  for (const BenchTarget& target : outcome.targets) {
    for (const int64_t m : request.m_values) {
      BenchRow row;
      row.target = &target;
      row.problem = {m, request.n, request.k};
      if (target.measure_self) {
        SelfMeasured measured = target.measure_self(row.problem);
        row.result = std::move(measured.result);
        row.candidate = std::move(measured.candidate);
        row.failure = std::move(measured.failure);
        if (request.pin_algorithm) row.pin_note = "pin: " + target.label + " has no algorithm to pin";
        if (on_row) on_row(row);
        outcome.rows.push_back(std::move(row));
        continue;
      }
      std::optional<PinnedAlgorithm> pinned;
      if (request.pin_algorithm) {
        pinned = stored_pin(pin_store ? &*pin_store : nullptr, target, row.problem, request, context.device,
                            row.pin_note);
      }
      const measure::JobOutcome job = runner.run(target.job, target.job_params(row.problem, pinned), request.timeout_s);
      stop_on_fatal(job, target.job);
      if (job.ok()) {
        row.result = job.result.get<TargetResult>();
        if (context.device.is_null()) context.device = row.result->device;
      } else {
        row.failure = measure::to_string(job.status) + ": " + job.error;
      }
      if (on_row) on_row(row);
      outcome.rows.push_back(std::move(row));
    }
  }
  pin_store.reset();  // the results are stored through a connection of their own

  complete_context(context);
  return outcome;
}

void store_bench(db::Store& store, const BenchRequest& request, const BenchOutcome& outcome,
                 const std::string& command_line) {
  auto transaction = store.transaction();
  db::RunInfo info = run_info_of_this_build("bench");
  info.command_line = command_line;
  const BenchContext& context = outcome.context;
  const nlohmann::json& device = context.device;
  if (device.is_object()) {
    info.gpu_name = device.value("name", std::string());
    info.gpu_uuid = device.value("uuid", std::string());
    info.sm = device.value("compute_capability_major", 0) * 10 + device.value("compute_capability_minor", 0);
    info.sm_count = device.value("sm_count", 0);
    info.cuda_version = std::to_string(device.value("runtime_version", 0));
    info.driver_version = std::to_string(device.value("driver_version", 0));
    const int sm_clock = device.value("current_sm_clock_mhz", -1);
    const int mem_clock = device.value("current_memory_clock_mhz", -1);
    if (sm_clock > 0) info.sm_clock_mhz = sm_clock;
    if (mem_clock > 0) info.mem_clock_mhz = mem_clock;
  }
  if (context.profile) info.gpu_profile = context.profile->name;
  info.notes = "copy bandwidth: " + context.bandwidth_source;
  const db::RunId run = store.insert_run(info);

  const auto l2_mode = request.measure.warm_l2 ? db::L2Mode::Warm : db::L2Mode::Cold;
  for (const BenchRow& row : outcome.rows) {
    if (row.candidate) {
      // One config, one result, whatever became of it: a failed run is a failed baseline, never a missing row.
      const db::ProblemId problem =
          store.upsert_problem({row.target->problem_format, row.problem.m, row.problem.n, row.problem.k});
      const nlohmann::json params =
          row.result && !row.result->variants.empty() ? row.result->variants.front().params : nlohmann::json::object();
      const db::ConfigId config =
          store.upsert_config({row.target->config_kind, row.target->config_family, params.dump(), ""});
      CandidateRecords records = candidate_records(*row.candidate, run, problem, config, kSelfMeasuredPhase);
      store.insert_verification(records.verification);
      if (!records.measurement) continue;
      if (records.measurement->status != db::MeasurementStatus::Ok) records.measurement->l2_mode = l2_mode;
      store.insert_measurement(*records.measurement);
      continue;
    }
    if (!row.result || !row.result->supported) continue;
    const db::ProblemId problem =
        store.upsert_problem({row.target->problem_format, row.problem.m, row.problem.n, row.problem.k});
    for (size_t i = 0; i < row.result->variants.size(); ++i) {
      const auto& variant = row.result->variants[i];
      const db::ConfigId config =
          store.upsert_config({row.target->config_kind, row.target->config_family, variant.params.dump(), ""});
      const std::string phase =
          static_cast<int>(i) != row.result->best
              ? baselines::kTopKPhase
              : (row.result->pin == baselines::PinOutcome::Pinned ? baselines::kPinnedPhase : baselines::kBestOfTopKPhase);
      CandidateRecords records = candidate_records(baselines::candidate_result(variant), run, problem, config, phase);
      store.insert_verification(records.verification);
      if (!records.measurement) continue;  // verification failed: nothing timed
      db::Measurement& measurement = *records.measurement;
      if (measurement.status == db::MeasurementStatus::Ok) {
        measurement.message = row.result->notes;
      } else {
        measurement.l2_mode = l2_mode;
      }
      store.insert_measurement(measurement);
    }
  }
  store.finish_run(run, db::RunStatus::Completed);
  transaction.commit();
}

}  // namespace qtune::tune

// `qtune bench`: measures GEMM targets for N,K and a list of M, in a worker process (a faulting kernel kills only the
// worker), and prints median/p10/p90 microseconds, GB/s, TFLOP/s and the percentage of the GPU's copy bandwidth and
// tensor peak. Targets are cuBLASLt baselines today; a kernel configuration of a qtune family is another BenchTarget
// (a worker job answering with the same TargetResult JSON), added next to make_baseline_target.
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "kernels/format.hpp"
#include "kernels/text_escape.hpp"
#include "reports/table.hpp"
#include "search/gpu_profile.hpp"
#include "search/shape_limits.hpp"
#include "tuner/baselines/baseline.hpp"
#include "tuner/baselines/baseline_bench.hpp"
#include "tuner/baselines/cublaslt_provider.hpp"
#include "tuner/baselines/baseline_pin.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/measure/worker.hpp"
#include "tuner/tune/records.hpp"
#include "tuner/tune/worker_jobs.hpp"
#include "tuner/runtime/device.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::cli {

namespace {

using baselines::BaselineKind;
using baselines::GemmProblem;
using baselines::PinnedAlgorithm;
using baselines::TargetResult;
using baselines::TrafficModel;

struct BenchOptions {
  std::string baselines;
  std::string format;
  std::string shape;
  std::string m_list;
  int top_k = 8;
  bool warm_l2 = false;
  std::string l2_flush = "read";
  std::string db_path = "qtune.db";
  bool no_db = false;
  bool pin_algorithm = false;
  int placements = 1;
  std::string output = "table";
  uint64_t seed = 1;
  double time_budget_s = 2.0;
  double screen_time_s = 0.05;
  double min_time_s = measure::benchmark_measure_options().min_measure_s;
  int blocks = measure::benchmark_measure_options().stability_blocks;
  double clock_dip = measure::MeasureOptions{}.clock_dip_fraction;
  double timeout_s = 900;
  std::string bandwidth = "measured";
  bool all_variants = false;
  std::string fp8_output = "bf16";
  int device = 0;
  bool in_process = false;
  std::string worker_executable = "/proc/self/exe";
};

// Something measured for a GEMM problem: the worker job that prepares, verifies and times it (answering with a
// TargetResult), how its memory traffic is counted, which tensor peak it is compared with, and how it is stored.
struct BenchTarget {
  std::string label;
  std::string job;
  // The job's params; `pinned`: re-time this algorithm alone (see baselines::PinnedAlgorithm).
  std::function<nlohmann::json(const GemmProblem&, const std::optional<PinnedAlgorithm>& pinned)> job_params;
  std::function<TrafficModel(const GemmProblem&)> traffic;
  search::TensorType tensor_type = search::TensorType::F16;
  std::string problem_format;  // the database problem's format text
  db::ConfigKind config_kind = db::ConfigKind::Baseline;
  std::string config_family;  // the database config family
};


BenchTarget make_baseline_target(BaselineKind kind, const BenchOptions& options,
                                 const std::optional<FormatSpec>& format,
                                 const measure::MeasureOptions& measure_options) {
  BenchTarget target;
  target.label = baselines::baseline_id(kind);
  target.job = baselines::kBenchBaselineJob;
  baselines::BaselineOptions baseline_options;
  baseline_options.top_k = options.top_k;
  baseline_options.fp8_output = parse_output_type(options.fp8_output, "--fp8-output");
  baseline_options.device = options.device;
  const uint64_t seed = options.seed;
  const int placements = options.placements;
  baselines::RunoffOptions runoff;
  runoff.screen_time_s = options.screen_time_s;
  target.job_params = [kind, seed, baseline_options, measure_options, runoff, placements](
                          const GemmProblem& problem, const std::optional<PinnedAlgorithm>& pinned) {
    baselines::BenchBaselineRequest request;
    request.kind = kind;
    request.problem = problem;
    request.seed = seed;
    request.baseline = baseline_options;
    request.measure = measure_options;
    request.runoff = runoff;
    request.pinned = pinned;
    request.placements = placements;
    return baselines::to_job_params(request);
  };
  target.traffic = [kind](const GemmProblem& problem) { return baselines::traffic(kind, problem); };
  target.tensor_type = baselines::tensor_type(kind);
  // Stored under the format it is compared with: --format, else the format its operands have ("f16"/"bf16" for
  // the dense baselines, which no quantization format describes).
  if (format) {
    target.problem_format = format->to_string();
  } else if (const auto own = baselines::baseline_format(kind)) {
    target.problem_format = own->to_string();
  } else {
    target.problem_format = kind == BaselineKind::BF16 ? "bf16" : "f16";
  }
  target.config_kind = db::ConfigKind::Baseline;
  target.config_family = target.label;
  return target;
}

// Runs jobs in a worker process, or (--in-process) right here.
class JobRunner {
 public:
  explicit JobRunner(const BenchOptions& options) : in_process_(options.in_process) {
    if (in_process_) tune::register_worker_jobs();
    if (!in_process_) {
      measure::WorkerOptions worker_options;
      worker_options.executable = options.worker_executable;
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

struct Row {
  const BenchTarget* target = nullptr;
  GemmProblem problem;
  std::optional<TargetResult> result;
  std::string failure;  // the job failed (crash, timeout, error): why
  std::string pin_note;  // --pin-algorithm found nothing to pin: why (the worker's result notes say the rest)
};

std::string short_note(const Row& row) {
  const std::string pin_prefix = row.pin_note.empty() ? "" : row.pin_note + "; ";
  if (!row.failure.empty()) return pin_prefix + "job failed: " + row.failure;
  const TargetResult& result = *row.result;
  if (!result.supported) return pin_prefix + "unsupported: " + result.unsupported_reason;
  std::string note = row.pin_note;
  if (!result.notes.empty()) note += (note.empty() ? "" : "; ") + result.notes;
  if (result.best < 0) {
    int failed = 0;
    for (const auto& variant : result.variants) failed += variant.verify.passed ? 0 : 1;
    note += std::string(note.empty() ? "" : "; ") + "no verified measurement (" + std::to_string(failed) + " of " +
            std::to_string(result.variants.size()) + " algorithms failed verification)";
  }
  return note;
}

struct Context {
  std::optional<double> copy_gbps;
  std::string bandwidth_source;
  std::optional<search::GpuProfile> profile;
  nlohmann::json device;
};

void add_variant_row(reports::Table& table, const Row& row, const baselines::VariantResult& variant, bool is_best,
                     bool mark_best, const Context& context, const std::string& note) {
  const GemmProblem& p = row.problem;
  std::vector<std::string> cells{row.target->label, std::to_string(p.m), std::to_string(p.n), std::to_string(p.k),
                                 (mark_best && is_best ? "* " : "") + variant.label};
  if (variant.measurement) {
    const auto& m = *variant.measurement;
    std::optional<double> peak;
    if (context.profile) peak = context.profile->peak_tflops(row.target->tensor_type);
    const auto metrics =
        baselines::row_metrics(row.target->traffic(p), baselines::gemm_flops(p), m.median_us, context.copy_gbps, peak);
    cells.insert(cells.end(),
                 {fixed(m.median_us, 2), fixed(m.p10_us, 2), fixed(m.p90_us, 2), fixed(metrics.gigabytes_per_second, 1),
                  fixed(metrics.tflops, 2), metrics.bandwidth_percent ? fixed(*metrics.bandwidth_percent, 1) : "-",
                  metrics.peak_percent ? fixed(*metrics.peak_percent, 1) : "-"});
  } else {
    cells.insert(cells.end(), {"-", "-", "-", "-", "-", "-", "-"});
  }
  std::ostringstream error;
  error << variant.verify.rel_error;
  cells.push_back(variant.verify.passed ? error.str() : "FAIL " + error.str());
  std::string full_note = note;
  if (!variant.error.empty() && !(variant.verify.passed && variant.measurement)) {
    full_note += std::string(full_note.empty() ? "" : "; ") + variant.error;
  }
  if (variant.measurement && variant.measurement->throttled) {
    full_note += std::string(full_note.empty() ? "" : "; ") + "clocks throttled";
    if (variant.measurement->clock_dip) {
      full_note += " (SM clock dipped to " + std::to_string(variant.measurement->busy_sm_mhz_min) + " of " +
                   std::to_string(variant.measurement->max_sm_mhz) + " MHz)";
    }
  }
  if (const auto& m = variant.measurement; m && m->blocks_relative_half_width >= 0) {
    full_note += std::string(full_note.empty() ? "" : "; ") + std::to_string(m->stability_blocks) +
                 " blocks' medians agree to +-" + fixed(100 * m->blocks_relative_half_width, 2) + "%";
  }
  // What NVML saw while the repetitions ran: the clocks moved, or a slowdown was reported.
  if (const auto& m = variant.measurement; m && m->busy_samples > 0 &&
                                          (m->busy_sm_mhz_min < m->busy_sm_mhz_max || m->throttled_while_busy)) {
    full_note += std::string(full_note.empty() ? "" : "; ") + "busy SM " + std::to_string(m->busy_sm_mhz_min) + "-" +
                 std::to_string(m->busy_sm_mhz_max) + " MHz, " + std::to_string(static_cast<int>(m->busy_power_w_max)) +
                 " W max, " + measure::describe_clock_event_reasons(m->busy_clock_event_reasons);
  }
  cells.push_back(full_note);
  table.add_row(std::move(cells));
}

reports::Table make_table(const std::vector<Row>& rows, const Context& context, bool all_variants) {
  reports::Table table({"target", "M", "N", "K", "algo", "median_us", "p10_us", "p90_us", "GB/s", "TFLOP/s", "%copy_bw",
                        "%peak", "rel_err", "note"});
  for (const Row& row : rows) {
    const std::string note = short_note(row);
    const bool has_variants = row.failure.empty() && row.result->supported && !row.result->variants.empty();
    if (!has_variants) {
      table.add_row({row.target->label, std::to_string(row.problem.m), std::to_string(row.problem.n),
                     std::to_string(row.problem.k), "-", "-", "-", "-", "-", "-", "-", "-", "-", note});
      continue;
    }
    const TargetResult& result = *row.result;
    if (all_variants) {
      for (size_t i = 0; i < result.variants.size(); ++i) {
        add_variant_row(table, row, result.variants[i], static_cast<int>(i) == result.best, true, context,
                        static_cast<int>(i) == result.best ? note : "");
      }
    } else {
      // The best verified algorithm; without one, cuBLASLt's first choice shows why it failed.
      const auto& shown =
          result.best >= 0 ? result.variants[static_cast<size_t>(result.best)] : result.variants.front();
      add_variant_row(table, row, shown, result.best >= 0, false, context, note);
    }
  }
  return table;
}

void store_results(const BenchOptions& options, const std::vector<Row>& rows, const Context& context,
                   const std::string& command_line) {
  db::Store store = db::Store::open(options.db_path);
  auto transaction = store.transaction();
  db::RunInfo info = tune::run_info_of_this_build("bench");
  info.command_line = command_line;
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

  for (const Row& row : rows) {
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
      tune::CandidateRecords records = tune::candidate_records(baselines::candidate_result(variant), run, problem, config, phase);
      store.insert_verification(records.verification);
      if (!records.measurement) continue;  // verification failed: nothing timed
      db::Measurement& measurement = *records.measurement;
      if (measurement.status == db::MeasurementStatus::Ok) {
        measurement.message = row.result->notes;
      } else {
        measurement.l2_mode = options.warm_l2 ? db::L2Mode::Warm : db::L2Mode::Cold;
      }
      store.insert_measurement(measurement);
    }
  }
  store.finish_run(run, db::RunStatus::Completed);
  transaction.commit();
}

std::string describe_command(const BenchOptions& options) {
  std::string text = "qtune bench";
  if (!options.baselines.empty()) text += " --baseline " + options.baselines;
  if (!options.format.empty()) text += " --format " + options.format;
  text += " --shape " + options.shape + " --m " + options.m_list + " --top-k " + std::to_string(options.top_k);
  if (options.warm_l2) text += " --warm-l2";
  if (!options.warm_l2 && options.l2_flush != "read") text += " --l2-flush " + options.l2_flush;
  if (options.pin_algorithm) text += " --pin-algorithm";
  if (options.placements > 1) text += " --placements " + std::to_string(options.placements);
  return text;
}

// --pin-algorithm: the algorithm each target's earlier bench chose for `problem` on this GPU, or nullopt with `note`
// saying why there is none. `store` is null when the database file does not exist yet.
std::optional<PinnedAlgorithm> stored_pin(db::Store* store, const BenchTarget& target, const GemmProblem& problem,
                                          const BenchOptions& options, const nlohmann::json& device,
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
    query.l2_mode = options.warm_l2 ? db::L2Mode::Warm : db::L2Mode::Cold;
    choice = baselines::latest_stored_choice(*store, query);
  }
  if (!choice) {
    note = "pin: no earlier " + std::string(options.warm_l2 ? "warm" : "cold") +
           "-L2 bench of this baseline and problem on " + gpu_name + " in " + options.db_path + fallback;
    return std::nullopt;
  }
  PinnedAlgorithm pinned;
  pinned.algorithm = choice->algorithm;
  pinned.origin = choice->origin();
  if (choice->gpu_uuid != device.value("uuid", std::string())) pinned.origin += " on another " + gpu_name;
  pinned.search_depth = std::max(baselines::kDefaultPinSearchDepth, options.top_k);
  return pinned;
}

void run_bench(const BenchOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  const std::vector<int64_t> shape = parse_positive_int_list(options.shape, "--shape");
  if (shape.size() != 2) QTUNE_INPUT_ERROR("--shape: expected N,K, got '" + options.shape + "'");
  const std::vector<int64_t> m_values = parse_positive_int_list(options.m_list, "--m");
  for (const int64_t m : m_values) search::check_problem_shape(m, shape[0], shape[1], "--m", "--shape");
  if (options.top_k < 1) QTUNE_INPUT_ERROR("--top-k: must be at least 1, got " + std::to_string(options.top_k));
  if (!(options.time_budget_s > 0)) QTUNE_INPUT_ERROR("--time-budget: must be positive");
  if (options.bandwidth != "measured" && options.bandwidth != "datasheet") {
    QTUNE_INPUT_ERROR("--bandwidth: expected measured or datasheet, got '" + options.bandwidth + "'");
  }
  parse_output_type(options.fp8_output, "--fp8-output");
  if (options.pin_algorithm && options.no_db) {
    QTUNE_INPUT_ERROR(
        "--pin-algorithm: reads the earlier run's choice from the database, so it cannot go with --no-db");
  }

  std::optional<FormatSpec> format;
  if (!options.format.empty()) {
    format = FormatSpec::parse(options.format);
    format->validate_shape(shape[0], shape[1]);
  }
  std::vector<BaselineKind> kinds;
  if (!options.baselines.empty()) {
    kinds = baselines::parse_baseline_list(options.baselines, "--baseline");
  } else if (format) {
    const auto natural = baselines::natural_baseline(*format);
    if (!natural) {
      QTUNE_INPUT_ERROR("--format: no cuBLASLt baseline computes " + format->to_string() +
                        "; name one with --baseline (measuring qtune kernel configurations is not available yet)");
    }
    kinds.push_back(*natural);
  } else {
    QTUNE_INPUT_ERROR("--baseline: name at least one baseline (or give --format to use its natural baseline)");
  }

  measure::MeasureOptions measure_options;
  measure_options.device = options.device;
  measure_options.warm_l2 = options.warm_l2;
  measure_options.l2_flush = measure::l2_flush_from_text(options.l2_flush, "--l2-flush");
  measure_options.time_budget_s = options.time_budget_s;
  measure_options.min_measure_s = std::min(options.min_time_s, options.time_budget_s / 2);
  measure_options.clock_dip_fraction = options.clock_dip;
  measure_options.stability_blocks = options.blocks;
  measure::validate(measure_options);

  std::vector<BenchTarget> targets;
  for (const BaselineKind kind : kinds) targets.push_back(make_baseline_target(kind, options, format, measure_options));

  JobRunner runner(options);
  Context context;
  if (options.bandwidth == "measured") {
    const nlohmann::json params{{"bytes", uint64_t{1} << 30}, {"device", options.device}};
    const measure::JobOutcome outcome = runner.run("selftest-copy", params, 300);
    stop_on_fatal(outcome, "selftest-copy");
    if (outcome.ok()) {
      context.copy_gbps = outcome.result.at("bandwidth_gbps").get<double>();
      context.device = outcome.result.value("device", nlohmann::json());
      context.bandwidth_source =
          "measured: 1 GiB device-to-device copy kernel, (read + write) / median = " + fixed(*context.copy_gbps, 0) +
          " GB/s";
    } else {
      context.bandwidth_source = "copy measurement failed (" + outcome.error + ")";
    }
  }

  // Pinning looks the earlier choice up by GPU: learn which one this is before the first target.
  std::optional<db::Store> pin_store;
  if (options.pin_algorithm) {
    if (context.device.is_null()) {
      const measure::JobOutcome outcome = runner.run("selftest-device", {{"device", options.device}}, 120);
      stop_on_fatal(outcome, "selftest-device");
      if (outcome.ok()) context.device = outcome.result;
    }
    if (std::filesystem::exists(options.db_path)) pin_store = db::Store::open_read_only(options.db_path);
  }

  std::vector<Row> rows;
  for (const BenchTarget& target : targets) {
    for (const int64_t m : m_values) {
      Row row;
      row.target = &target;
      row.problem = {m, shape[0], shape[1]};
      std::optional<PinnedAlgorithm> pinned;
      if (options.pin_algorithm) {
        pinned = stored_pin(pin_store ? &*pin_store : nullptr, target, row.problem, options, context.device,
                            row.pin_note);
      }
      const measure::JobOutcome outcome =
          runner.run(target.job, target.job_params(row.problem, pinned), options.timeout_s);
      stop_on_fatal(outcome, target.job);
      if (outcome.ok()) {
        row.result = outcome.result.get<TargetResult>();
        if (context.device.is_null()) context.device = row.result->device;
      } else {
        row.failure = measure::to_string(outcome.status) + ": " + outcome.error;
      }
      if (style == reports::OutputStyle::Text) {
        std::cerr << "  " << target.label << " M=" << m << ": "
                  << (row.result && row.result->best_variant()
                          ? fixed(row.result->best_variant()->measurement->median_us, 2) + " us"
                          : short_note(row))
                  << "\n";
      }
      rows.push_back(std::move(row));
    }
  }
  pin_store.reset();  // the results are stored through a connection of their own

  if (context.device.is_object()) {
    try {
      search::DeviceIdentity identity;
      identity.name = context.device.value("name", std::string());
      identity.sm = context.device.value("compute_capability_major", 0) * 10 +
                    context.device.value("compute_capability_minor", 0);
      identity.sm_count = context.device.value("sm_count", 0);
      context.profile = search::match_device(search::load_gpu_profiles(), identity);
    } catch (const Error& error) {
      std::cerr << "qtune bench: no GPU profile: " << error.what() << "\n";
    }
  }
  if (!context.copy_gbps && context.profile && context.profile->memory_bandwidth_gbps > 0) {
    context.copy_gbps = context.profile->memory_bandwidth_gbps;
    context.bandwidth_source = "DATASHEET " + fixed(*context.copy_gbps, 0) + " GB/s from " +
                               context.profile->source_file.string() +
                               (context.bandwidth_source.empty() ? "" : "; " + context.bandwidth_source);
  }

  const reports::Table table = make_table(rows, context, options.all_variants);
  std::cerr << "device: " << (context.device.is_object() ? context.device.value("name", std::string("?")) : "unknown")
            << (context.profile ? " (profile " + context.profile->name + ")" : " (no GPU profile: no % of peak)")
            << "\n%copy_bw is of the " << (context.bandwidth_source.empty() ? "unknown" : context.bandwidth_source)
            << "\nbytes: A + W + C once each in their storage types, scales with their operand; rel_err: Frobenius, "
               "against the CPU reference of the same quantized operands\n";
  table.print(std::cout, style);

  if (!options.no_db) store_results(options, rows, context, describe_command(options));
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command = app.add_subcommand(
      "bench", "Measure cuBLASLt baselines (and, later, kernel configurations) for N,K and a list of M");
  command->add_option(
      "--baseline", options->baselines,
      "comma-separated baselines: cublaslt-f16, cublaslt-bf16, cublaslt-fp8-tensor, cublaslt-fp8-outer, "
      "cublaslt-fp8-block128, cublaslt-int8, or all");
  command->add_option("--format", options->format,
                      "the format compared with: results are stored under it; without --baseline, its natural "
                      "baseline is measured");
  command->add_option("--shape", options->shape, "N,K of the weight (C[M,N] = A[M,K] W[N,K]^T)")->required();
  command->add_option("--m", options->m_list, "comma-separated M values, e.g. 1,16,256")->required();
  command->add_option("--top-k", options->top_k, "cuBLASLt heuristic algorithms to verify and time")
      ->check(integer_in(1, 64))
      ->capture_default_str();
  command->add_flag("--warm-l2", options->warm_l2, "keep L2 warm between repetitions (default: flushed, cold)");
  command->add_option("--l2-flush", options->l2_flush,
                      "how cold L2 is made between repetitions: read (a 2x L2 buffer is read, leaving clean lines) or "
                      "write (the buffer is written, leaving dirty lines the kernel pays to write back)")
      ->capture_default_str();
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")
      ->envname("QTUNE_DB");
  command->add_flag("--no-db", options->no_db, "do not store the results");
  command->add_flag("--pin-algorithm", options->pin_algorithm,
                    "re-time, per baseline and M, the cuBLASLt algorithm the latest earlier bench in --db chose on "
                    "a GPU of this name (same problem, L2 mode): found in cuBLASLt's list by its configuration "
                    "(searching the top " + std::to_string(baselines::kDefaultPinSearchDepth) +
                        "), verified and timed alone, no run-off; the note says \"pinned hN from run R of DATE\". "
                        "With nothing stored, or the algorithm not listed, the note says so and top-k + run-off decide");
  command->add_option("--placements", options->placements,
                      "time the chosen algorithm on this many sets of operands, each allocated beside the others "
                      "behind a spacer (other memory), in two passes (the second in reverse order), and report the "
                      "statistics of all their samples pooled; the note lists both passes' medians")
      ->check(integer_in(1, baselines::kMaxPlacements))
      ->capture_default_str();
  command->add_option("--output", options->output, "output style: table, json or csv")->capture_default_str();
  command->add_option("--seed", options->seed, "seed of the random operands")
      ->check(integer_in(0, kMaxSeed))
      ->capture_default_str();
  command->add_option("--time-budget", options->time_budget_s, "seconds of measurement per algorithm at most")
      ->check(real_in(0, 3600, true))
      ->capture_default_str();
  command
      ->add_option("--screen-time", options->screen_time_s,
                   "seconds each of the top-k algorithms is timed for to rank them (the run-off's rounds too); only "
                   "the winner then gets the full measurement (--min-time, --blocks, --clock-dip); 0: every "
                   "algorithm gets the full measurement")
      ->check(real_in(0, baselines::kMaxScreenTimeS))
      ->capture_default_str();
  command
      ->add_option("--min-time", options->min_time_s,
                   "seconds the measured repetitions span at least before the median may count as converged (at "
                   "most half of --time-budget): a median over a few milliseconds follows the GPU's slow phases")
      ->check(real_in(0, 3600))
      ->capture_default_str();
  command
      ->add_option("--blocks", options->blocks,
                   "the median counts as converged only when the measured repetitions, cut in time order into this "
                   "many blocks, agree too: the 95% Student-t interval of the mean of the blocks' medians within "
                   "+-1% (a GPU's slow phases outlast many repetitions, so the samples are not independent); 0 "
                   "turns the check off")
      ->check(CLI::Validator(
          [](const std::string& text) -> std::string {
            const int value = std::atoi(text.c_str());
            const bool valid = value == 0 || (value >= measure::kMinStabilityBlocks && value <= measure::kMaxStabilityBlocks);
            return valid ? "" : "must be 0 (off) or in [" + std::to_string(measure::kMinStabilityBlocks) + ", " +
                                    std::to_string(measure::kMaxStabilityBlocks) + "], got " + text;
          },
          "0 or " + std::to_string(measure::kMinStabilityBlocks) + ".." + std::to_string(measure::kMaxStabilityBlocks)))
      ->capture_default_str();
  add_clock_dip_option(*command, options->clock_dip);
  command->add_option("--timeout", options->timeout_s, "seconds one target x M may take before its worker is killed")
      ->check(real_in(0, 1e6, true))
      ->capture_default_str();
  command
      ->add_option("--bandwidth", options->bandwidth,
                   "reference for %copy_bw: measured (a device-to-device copy) or datasheet (the GPU profile)")
      ->capture_default_str();
  command->add_flag("--all", options->all_variants, "print every timed algorithm, the best marked with *");
  command->add_option("--fp8-output", options->fp8_output, "output type of the fp8 baselines: bf16 or f16")
      ->capture_default_str();
  command->add_option("--device", options->device, "CUDA device ordinal")->check(integer_in(0, 1023))->capture_default_str();
  command->add_flag("--in-process", options->in_process,
                    "measure in this process instead of a worker (no containment; for debugging)");
  command->add_option("--worker-executable", options->worker_executable, "the qtune executable workers run")->group("");
  command->callback([options] { run_bench(*options); });
}

}  // namespace qtune::cli

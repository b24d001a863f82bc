// `qtune bench`: parses the options into a tune::BenchRequest, runs it (tuner/tune/bench_run.hpp: measures GEMM
// targets for N,K and a list of M in a worker process; peers hosted in Python in theirs, tuner/peers/peer_runs.hpp)
// and prints median/p10/p90 microseconds, GB/s, TFLOP/s and the percentage of the GPU's copy bandwidth and tensor
// peak; stores the results unless --no-db.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
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
#include "tuner/cli/commands.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/measure/nvml.hpp"
#include "tuner/peers/peer_host.hpp"
#include "tuner/peers/peer_runs.hpp"
#include "tuner/tune/bench_run.hpp"

namespace qtune::cli {

namespace {

using baselines::BaselineKind;
using baselines::GemmProblem;
using baselines::TargetResult;

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
  std::vector<std::string> peer_paths;
  bool test_peers = false;
};

// --baseline split into cuBLASLt's ids (qtune's worker runs them) and peer providers (a Python worker runs them).
struct BaselineChoice {
  std::string cublaslt;  // comma-separated, for parse_baseline_list
  std::vector<peers::ProviderId> peers;
};

BaselineChoice split_baselines(const std::string& text) {
  BaselineChoice choice;
  for (const std::string& item : peers::split_provider_list(text)) {
    if (peers::names_cublaslt_baseline(item)) {
      choice.cublaslt += (choice.cublaslt.empty() ? "" : ",") + item;
      continue;
    }
    const peers::ProviderId provider = peers::parse_provider(item, "--baseline");
    if (std::find(choice.peers.begin(), choice.peers.end(), provider) == choice.peers.end()) choice.peers.push_back(provider);
  }
  return choice;
}

using Row = tune::BenchRow;
using Context = tune::BenchContext;

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
  const OutputType fp8_output = parse_output_type(options.fp8_output, "--fp8-output");
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
  BaselineChoice choice;
  if (!options.baselines.empty()) {
    choice = split_baselines(options.baselines);
    if (!choice.cublaslt.empty()) kinds = baselines::parse_baseline_list(choice.cublaslt, "--baseline");
    if (kinds.empty() && choice.peers.empty()) QTUNE_INPUT_ERROR("--baseline: name at least one baseline");
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

  // The peers are refused (exit 2, one line naming the provider and what to install) before anything is measured or
  // stored: their worker starts and describes them first.
  std::unique_ptr<peers::PeerHost> peer_host;
  if (!choice.peers.empty()) {
    peers::PeerEnvironment environment = peers::peer_environment(options.peer_paths);
    environment.test_peers = options.test_peers;
    peer_host = std::make_unique<peers::PeerHost>(std::move(environment));
    for (const peers::ProviderId& provider : choice.peers) {
      if (provider.operands != "f16" && provider.operands != "bf16") {
        FormatSpec::parse(provider.operands).validate_shape(shape[0], shape[1]);
      }
      peer_host->require(provider);
    }
  }

  tune::BenchRequest request;
  request.kinds = std::move(kinds);
  request.format = format;
  request.n = shape[0];
  request.k = shape[1];
  request.m_values = m_values;
  request.top_k = options.top_k;
  request.fp8_output = fp8_output;
  request.device = options.device;
  request.seed = options.seed;
  request.placements = options.placements;
  request.screen_time_s = options.screen_time_s;
  request.measure = measure_options;
  request.measure_copy_bandwidth = options.bandwidth == "measured";
  request.pin_algorithm = options.pin_algorithm;
  request.db_path = options.db_path;
  request.timeout_s = options.timeout_s;
  request.in_process = options.in_process;
  request.worker_executable = options.worker_executable;
  for (const peers::ProviderId& provider : choice.peers) {
    request.more_targets.push_back(peers::bench_target(*peer_host, provider, request));
  }

  const tune::BenchOutcome outcome = tune::run_bench(request, [style](const Row& row) {
    if (style != reports::OutputStyle::Text) return;
    std::cerr << "  " << row.target->label << " M=" << row.problem.m << ": "
              << (row.result && row.result->best_variant()
                      ? fixed(row.result->best_variant()->measurement->median_us, 2) + " us"
                      : short_note(row))
              << "\n";
  });
  const Context& context = outcome.context;
  if (!context.profile_error.empty()) std::cerr << "qtune bench: no GPU profile: " << context.profile_error << "\n";

  const reports::Table table = make_table(outcome.rows, context, options.all_variants);
  std::cerr << "device: " << (context.device.is_object() ? context.device.value("name", std::string("?")) : "unknown")
            << (context.profile ? " (profile " + context.profile->name + ")" : " (no GPU profile: no % of peak)")
            << "\n%copy_bw is of the " << (context.bandwidth_source.empty() ? "unknown" : context.bandwidth_source)
            << "\nbytes: A + W + C once each in their storage types, scales with their operand; rel_err: Frobenius, "
               "against the CPU reference of the same quantized operands\n";
  table.print(std::cout, style);

  if (!options.no_db) {
    db::Store store = db::Store::open(options.db_path);
    tune::store_bench(store, request, outcome, describe_command(options));
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command = app.add_subcommand(
      "bench", "Measure cuBLASLt baselines and peers (Humming, Marlin, DeepGEMM, PyTorch) for N,K and a list of M");
  command->add_option(
      "--baseline", options->baselines,
      "comma-separated baselines: cublaslt-f16, cublaslt-bf16, cublaslt-fp8-tensor, cublaslt-fp8-outer, "
      "cublaslt-fp8-block128, cublaslt-int8, or all; and peers hosted in Python (docs/peers.md), e.g. "
      "humming-w4a16-int4-ch, marlin-w4a16-int4-g128, deepgemm-w8a8-fp8-block128x128, torch-f16, torch-fp8-rowwise");
  command->add_option("--peer-path", options->peer_paths,
                      "a folder the peers are imported from (a source checkout, a folder of built packages); "
                      "repeatable, before $QTUNE_PEER_PATH");
  command->add_flag("--test-peers", options->test_peers, "also offer qtune's test peers (fake)")->group("");
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

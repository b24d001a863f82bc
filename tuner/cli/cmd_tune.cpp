// `qtune tune`: tunes a kernel family for every (format, N, K, M bucket) of a model or of given shapes on a GPU, and
// stores everything (compiles, verifications, measurements, pruning counts, winners) in the database. Resumable
// (Ctrl-C or a crash loses nothing measured; a rerun continues), shardable (--shard, Slurm arrays, Kubernetes
// indexed jobs; combine the files with `qtune db merge`), one measuring worker per GPU of the host.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "kernels/family_support.hpp"
#include "kernels/text_escape.hpp"
#include "reports/table.hpp"
#include "search/cost_model.hpp"
#include "search/m_buckets.hpp"
#include "search/model_shapes.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/cli/tune_moe.hpp"
#include "tuner/jit/kernel_cache.hpp"
#include "tuner/jit/thread_pool.hpp"
#include "tuner/peers/humming_tune.hpp"
#include "tuner/peers/peer_host.hpp"
#include "tuner/peers/peer_runs.hpp"
#include "tuner/production/selector.hpp"
#include "tuner/tune/devices.hpp"
#include "tuner/tune/family_runs.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/progress.hpp"
#include "tuner/tune/restricted_family.hpp"
#include "tuner/tune/tuner.hpp"
#include "tuner/tune/moe_tune.hpp"
#include "tuner/tune/worker_backend.hpp"

namespace qtune::cli {

namespace {

struct TuneCommandOptions {
  std::string gpu = "auto";
  std::string devices = "all";
  std::string formats = "w4a16-int4-ch";  // the main job's format (scripts/run.sh)
  std::string model;
  int tp = 1;
  std::string gemms = "all";
  std::string shape;
  std::string m_list;
  std::string db_path = "qtune.db";
  std::string strategy = "exhaustive";
  std::string cost_model = "trees";
  std::optional<std::size_t> budget_evals;
  std::optional<double> budget_seconds;
  std::optional<double> budget_fraction;
  std::optional<std::string> shard;
  std::optional<int> shard_count;
  std::string family = "auto";
  std::string space = "curated";
  std::vector<std::string> params;
  double timeout_s = 30;
  std::optional<double> timeout_ms;  // the old spelling, --timeout-ms
  double time_budget_s = 1.0;
  double clock_dip = measure::MeasureOptions{}.clock_dip_fraction;
  bool warm_l2 = false;
  std::string l2_flush = "read";
  std::string compare_table;
  bool dry_run = false;
  bool retune = false;
  std::uint64_t seed = 1;
  std::size_t jobs = 0;
  std::string output = "table";
  std::vector<std::string> peer_paths;
  bool test_peers = false;
  MoeTuneCommandOptions moe;
};

std::atomic<bool> stop_requested{false};

void request_stop(int signal_number) {
  stop_requested.store(true);
  // A second Ctrl-C ends the process at once (what is measured is committed already).
  std::signal(signal_number, SIG_DFL);
}

// Ctrl-C and SIGTERM (Slurm preemption) ask the tuner to stop after the candidate in flight.
class StopSignals {
 public:
  StopSignals() {
    stop_requested.store(false);
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

std::string command_line() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::string text;
  std::string argument;
  while (std::getline(file, argument, '\0')) text += (text.empty() ? "" : " ") + argument;
  return text;
}

search::GemmFilter parse_gemm_filter(const std::string& text) {
  if (text == "all") return search::GemmFilter::All;
  if (text == "dense") return search::GemmFilter::Dense;
  if (text == "moe") return search::GemmFilter::MoeExpert;
  QTUNE_INPUT_ERROR("--gemms: expected all, dense or moe, got '" + text + "'");
}

// "dense" or "dense, moe": the kinds of GEMM the model has at `tp`, as --gemms names them.
std::string gemm_kinds_text(const search::ModelShapes& model, int tp) {
  std::set<std::string> kinds;
  for (const search::ShardedGemm& gemm : search::sharded_gemms(model, tp, "--tp")) {
    kinds.insert(gemm.kind == search::GemmKind::Dense ? "dense" : "moe");
  }
  return joined_or_none(kinds);
}

std::string rules_text(const std::map<std::string, std::size_t>& rules) {
  std::string text;
  for (const auto& [rule, count] : rules) text += (text.empty() ? "" : " ") + rule + "=" + std::to_string(count);
  return text;
}

// The summary's table: one row per problem.
reports::Table report_table(const tune::TuneReport& report, bool dry_run) {
  if (dry_run) {
    reports::Table table({"format", "m", "n", "k", "space", "after_rules", "after_compile", "pruned_pre_compile",
                          "pruned_post_compile"});
    for (const tune::ProblemReport& problem : report.reports) {
      table.add_row({problem.problem.format.to_string(), std::to_string(problem.problem.m), std::to_string(problem.problem.n),
                     std::to_string(problem.problem.k), std::to_string(problem.space_total),
                     std::to_string(problem.after_static_rules), std::to_string(problem.after_compile),
                     rules_text(problem.pruned_pre_compile), rules_text(problem.pruned_post_compile)});
    }
    return table;
  }
  // The table column appears with --compare-table only.
  const bool with_table = std::any_of(report.reports.begin(), report.reports.end(),
                                      [](const tune::ProblemReport& problem) { return problem.table.has_value(); });
  std::vector<std::string> header{"format", "m", "n", "k", "candidates", "evaluated", "measured", "stored", "invalid",
                                  "winner_us", "heuristic_us", "speedup"};
  if (with_table) header.insert(header.end(), {"table_us", "table_vs_winner"});
  header.insert(header.end(), {"seconds", "winner", "reason"});
  reports::Table table(header);
  for (const tune::ProblemReport& problem : report.reports) {
    const bool has_winner = problem.winner.has_value();
    std::vector<std::string> row{problem.problem.format.to_string(), std::to_string(problem.problem.m),
                                 std::to_string(problem.problem.n), std::to_string(problem.problem.k),
                                 std::to_string(problem.after_compile), std::to_string(problem.evaluations),
                                 std::to_string(problem.measured), std::to_string(problem.reused),
                                 std::to_string(problem.invalid), has_winner ? fixed(problem.winner_us, 3) : "",
                                 problem.heuristic_us ? fixed(*problem.heuristic_us, 3) : "",
                                 has_winner && problem.heuristic_us ? fixed(*problem.heuristic_us / problem.winner_us, 3) : ""};
    if (with_table) {
      row.push_back(problem.table_us ? fixed(*problem.table_us, 3) : "");
      row.push_back(has_winner && problem.table_us ? fixed(*problem.table_us / problem.winner_us, 3) : "");
    }
    row.insert(row.end(), {fixed(problem.seconds, 1), has_winner ? problem.winner->to_string() : "",
                           problem.skipped_final ? "final (skipped)" : problem.interrupted ? "interrupted" : problem.winner_reason});
    table.add_row(row);
  }
  return table;
}

void print_report(const tune::TuneReport& report, bool dry_run, reports::OutputStyle style) {
  report_table(report, dry_run).print(std::cout, style);
  if (style != reports::OutputStyle::Text) return;
  // What each pruning rule removed, summed over the problems worked on.
  std::map<std::pair<std::string, std::string>, std::size_t> totals;
  for (const tune::ProblemReport& problem : report.reports) {
    for (const auto& [rule, count] : problem.pruned_pre_compile) totals[{"pre-compile", rule}] += count;
    for (const auto& [rule, count] : problem.pruned_post_compile) totals[{"post-compile", rule}] += count;
  }
  if (!totals.empty()) {
    std::cout << "\npruned candidates (all problems):\n";
    reports::Table pruning({"stage", "rule", "removed"});
    for (const auto& [key, count] : totals) pruning.add_row({key.first, key.second, std::to_string(count)});
    pruning.print_text(std::cout);
  }
  std::cout << "\nrun #" << db::id_value(report.run) << " on " << report.gpu << ": " << report.problems << " problems ("
            << report.skipped_final << " final, skipped), " << report.instantiations << " instantiations ("
            << report.cache_hits << " from cache, " << report.compile_failures << " failed)";
  if (!dry_run) {
    std::cout << ", " << report.measured << " measured, " << report.reused << " reused, " << report.invalid << " invalid, "
              << report.winners << " winners stored";
  }
  std::cout << "; compile " << fixed(report.compile_seconds, 1) << " s";
  if (!dry_run) std::cout << ", measure " << fixed(report.measure_seconds, 1) << " s";
  std::cout << (report.interrupted ? " -- interrupted; rerun the same command to resume\n" : "\n");
}

// The whole run's progress plan: per family a compile and a measuring stage, weighted by the estimated seconds of
// its problems (the sizes the README gives for the curated and the full space). Returns each family's two stages.
std::vector<std::pair<std::size_t, std::size_t>> plan_progress(tune::ConsoleProgress& progress,
                                                               const std::vector<const KernelFamily*>& families,
                                                               const std::vector<std::vector<Problem>>& problems_of_family,
                                                               const TuneCommandOptions& options, std::size_t threads,
                                                               std::size_t humming_problems, std::size_t moe_problems,
                                                               std::size_t* moe_stage) {
  const std::size_t candidates = options.space == "full" ? 20000 : 300;
  double evaluated_share = options.budget_fraction.value_or(1.0);
  if (options.budget_evals) {
    evaluated_share = std::min(evaluated_share, static_cast<double>(*options.budget_evals) / static_cast<double>(candidates));
  }
  const tune::PhaseEstimate per_problem =
      tune::estimate_problem_work(candidates, threads, evaluated_share, options.time_budget_s, options.dry_run);
  tune::WorkPlan plan;
  std::vector<std::pair<std::size_t, std::size_t>> stages;
  for (std::size_t i = 0; i < families.size(); ++i) {
    const auto problems = static_cast<double>(problems_of_family[i].size());
    const std::string name = families[i]->name();
    const std::size_t compile = plan.add_stage("compiling " + name, problems * per_problem.compile_seconds, "compiling");
    const std::size_t measure = plan.add_stage("measuring " + name, problems * per_problem.measure_seconds, "measuring");
    stages.emplace_back(compile, measure);
  }
  if (humming_problems > 0) {
    // Humming's kernels are built ahead by `threads` peer workers at once, then measured.
    const double evaluations = static_cast<double>(humming_problems) *
                               static_cast<double>(options.budget_evals.value_or(peers::kHummingDefaultEvaluations) + 1);
    const std::size_t compile = plan.add_stage(
        "compiling humming", evaluations * peers::kHummingCompileSeconds / static_cast<double>(threads), "compiling");
    const std::size_t measure = plan.add_stage(
        "measuring humming", evaluations * (options.time_budget_s + tune::kEvaluationOverheadSeconds), "measuring");
    stages.emplace_back(compile, measure);
  }
  if (moe_problems > 0) {
    // The MoE expert GEMMs last, counted in problems: each compiles and measures its providers' spaces (the MoE
    // kernels of a shape are shared by its token buckets, so most of a bucket's compiles are cache hits).
    *moe_stage = plan.add_stage("moe", static_cast<double>(moe_problems) * (per_problem.compile_seconds / 4 + per_problem.measure_seconds),
                                "moe");
  }
  progress.set_plan(std::move(plan), threads, options.time_budget_s);
  return stages;
}

// Per family: its progress stages, its line, and its report (in text; one table of all at the end otherwise).
class FamilyConsole final : public tune::FamilyRunObserver {
 public:
  FamilyConsole(tune::ConsoleProgress& progress, std::vector<std::pair<std::size_t, std::size_t>> stages,
                std::size_t families, bool dry_run, reports::OutputStyle style)
      : progress_(progress), stages_(std::move(stages)), families_(families), dry_run_(dry_run), style_(style) {}
  void family_started(std::size_t index, const KernelFamily& family, std::size_t problems) override {
    progress_.start_stages(stages_[index].first, stages_[index].second);
    if (problems > 0 && families_ > 1) std::cerr << "qtune tune: family " << family.name() << ", " << problems << " problems\n";
  }
  void family_finished(std::size_t /*index*/, const tune::TuneReport& report) override {
    if (style_ == reports::OutputStyle::Text) print_report(report, dry_run_, style_);
  }

 private:
  tune::ConsoleProgress& progress_;
  std::vector<std::pair<std::size_t, std::size_t>> stages_;
  std::size_t families_;
  bool dry_run_;
  reports::OutputStyle style_;
};

// The MoE problems' run: --strategy over the MoE providers' spaces (exhaustive: each capped by --budget-evals; the
// others choose within it), measured in one worker on the first GPU; a peer's --moe-baseline on `baseline_peers`.
int run_moe(const TuneCommandOptions& options, const std::vector<MoeProblem>& problems,
            const std::vector<std::string>& moe_providers, const tune::TuneTarget& target, const tune::MeasureSettings& measure,
            const jit::CompilerSettings& settings, const std::filesystem::path& cache, reports::OutputStyle style,
            std::optional<reports::Table>& machine_table, peers::PeerHost* baseline_peers, tune::ConsoleProgress& progress,
            std::size_t progress_stage) {
  tune::MoeTuneOptions moe_options;
  moe_options.strategy = options.strategy;
  moe_options.strategy_options.seed = options.seed;
  moe_options.strategy_options.cost_model = options.cost_model;
  if (options.budget_evals) moe_options.budget.max_evaluations = *options.budget_evals;
  if (options.budget_seconds) moe_options.budget.max_seconds = *options.budget_seconds;
  moe_options.budget_fraction = options.budget_fraction;
  moe_options.problems = problems;
  moe_options.providers = moe_providers;
  moe_options.auto_families = options.family == "auto";
  moe_options.heuristic = [&target](const MoeProblem& problem) -> std::optional<KernelConfig> {
    return production::moe_heuristic_config(problem, target.limits);
  };
  moe_options.space.curated = options.space != "full";
  for (const std::string& text : options.params) {
    auto [name, values] = tune::parse_parameter_values(text);
    moe_options.space.parameter_values[name] = values;
  }
  if (options.budget_evals && options.strategy == "exhaustive") moe_options.space.max_configs = *options.budget_evals;
  moe_options.timeout_s = options.timeout_ms ? *options.timeout_ms / 1000.0 : options.timeout_s;
  moe_options.dry_run = options.dry_run;
  moe_options.retune = options.retune;
  moe_options.baseline = canonical_moe_baseline(options.moe.baseline);
  moe_options.command_line = command_line();
  const jit::Compiler compiler(settings);
  tune::MoeTuneServices services;
  services.compiler = &compiler;
  services.cache_directory = cache;
  services.measure = measure;
  std::unique_ptr<tune::WorkerBackend> backend;
  if (!options.dry_run) {
    tune::WorkerBackendOptions worker;
    worker.visible_device = target.visible_devices.empty() ? std::string{} : target.visible_devices.front();
    worker.measure = measure;
    worker.cache_directory = cache;
    backend = std::make_unique<tune::WorkerBackend>(worker);
    services.evaluate = [&backend](const tune::CandidateJob& job, double timeout_s) { return backend->evaluate_job(job, timeout_s); };
    if (baseline_peers != nullptr) {
      // A peer's MoE kernel as the baseline: its job goes to the peer host, qtune's own baselines to the worker.
      services.evaluate_baseline = [&backend, baseline_peers](const tune::CandidateJob& job, double timeout_s) {
        for (const char* known : tune::kMoeBaselines) {
          if (job.provider == known) return tune::MoeBaselineResult{backend->evaluate_job(job, timeout_s)};
        }
        return peers::run_moe_job(*baseline_peers, job, timeout_s);
      };
    }
  }
  std::size_t problems_done = 0;
  services.problem_finished = [&](const tune::MoeProblemReport& report) {
    progress.problem_line(progress_stage, ++problems_done, problems.size(),
                          report.problem.to_string() + ": " +
                              (report.skipped ? "winner stored already"
                                              : std::to_string(report.candidates) + " candidates, " + std::to_string(report.measured) +
                                                    " measured" + (report.winner ? ", winner " + fixed(report.winner_us, 3) + " us" : "")));
  };
  std::string provider_names;
  for (const std::string& name : moe_providers) provider_names += (provider_names.empty() ? "" : ", ") + name;
  std::cerr << "qtune tune: " << problems.size() << " MoE problems (" << provider_names << ")\n";
  tune::MoeTuneReport report;
  {
    StopSignals signals;
    report = tune::run_moe_tune(moe_options, target, options.db_path, services, &stop_requested);
  }
  if (style == reports::OutputStyle::Text) {
    print_moe_report(report, options.dry_run, style);
  } else {
    machine_table = moe_report_table(report);  // printed with the dense rows, as one document
  }
  return report.interrupted ? kExitInterrupted : 0;
}

// Humming's part of the tune, settled before anything is stored: --family humming refuses a missing peer or a format
// it lacks (exit 2, one line naming the provider and what to install); --family auto says once why it skips Humming.
struct HummingPart {
  std::unique_ptr<peers::PeerHost> host;
  std::vector<Problem> problems;
};

HummingPart plan_humming(const TuneCommandOptions& options, peers::HummingChoice choice, const std::vector<Problem>& problems) {
  HummingPart part;
  if (choice == peers::HummingChoice::No) return part;
  if (options.dry_run) {
    std::cerr << "qtune tune: humming is not planned in a dry run (its peer builds and measures its kernels on the GPU)\n";
    return part;
  }
  const auto skip = [](const std::string& why) { std::cerr << "qtune tune: --family auto: humming skipped: " << why << "\n"; };
  try {
    peers::PeerEnvironment environment = peers::peer_environment(options.peer_paths);
    environment.test_peers = options.test_peers;
    part.host = std::make_unique<peers::PeerHost>(std::move(environment));
    if (choice == peers::HummingChoice::Required) {
      std::set<std::string> required;
      for (const Problem& problem : problems) {
        if (required.insert(problem.format.to_string()).second) part.host->require(peers::humming_provider(problem.format));
      }
      part.problems = peers::humming_problems(*part.host, problems);
      return part;
    }
    std::string why_not;
    if (!peers::humming_available(*part.host, &why_not)) {
      skip(why_not);
      part.host.reset();
      return part;
    }
  } catch (const InputError& error) {
    if (choice == peers::HummingChoice::Required) throw;
    skip(error.what());
    part.host.reset();
    return part;
  }
  std::vector<std::string> left_out;
  part.problems = peers::humming_problems(*part.host, problems, &left_out);
  if (!left_out.empty()) {
    std::string formats;
    for (const std::string& format : left_out) formats += (formats.empty() ? "" : ", ") + format;
    std::cerr << "qtune tune: --family auto: humming offers none of " << formats << "\n";
  }
  if (part.problems.empty()) part.host.reset();
  return part;
}

// A format that none of the families tuned here runs on the target (nor Humming, where it tunes it) would be tuned into
// nothing and exit 0: refused before any work, naming --format and the families' reasons (or --family, when a family
// not chosen runs it there).
void refuse_formats_nothing_tunes(const std::vector<FormatSpec>& formats, const std::vector<const KernelFamily*>& families,
                                  const std::vector<Problem>& humming_problems, int sm) {
  for (const FormatSpec& format : formats) {
    const bool tuned = std::any_of(families.begin(), families.end(),
                                   [&](const KernelFamily* family) { return family->supports(format, sm).supported; }) ||
                       std::any_of(humming_problems.begin(), humming_problems.end(),
                                   [&](const Problem& problem) { return problem.format == format; });
    if (tuned) continue;
    const FamilySupport support = family_support(format, sm);
    if (support.family != nullptr) {
      std::string chosen;
      for (const KernelFamily* family : families) chosen += (chosen.empty() ? "" : ", ") + family->name();
      QTUNE_INPUT_ERROR("--family: " + format.to_string() + " runs on sm_" + std::to_string(sm) + " in the " +
                        support.family->name() + " family, not in " + chosen);
    }
    QTUNE_INPUT_ERROR("--format: " + support.reason);
  }
}

int run(const TuneCommandOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  // The problem set: formats x shapes x M buckets, then this process's shard of it.
  if (options.formats.empty()) QTUNE_INPUT_ERROR("--format: empty (format specs or presets, e.g. w4a16-int4-ch)");
  const std::vector<FormatSpec> formats = tune::parse_format_list(options.formats, "--format");
  std::vector<search::GemmShape> shapes;
  std::vector<MoeProblem> moe_problems;  // a model's moe_expert GEMMs, tuned as MoE problems over token buckets
  if (!options.model.empty() && !options.shape.empty()) QTUNE_INPUT_ERROR("--model: give either --model or --shape, not both");
  if (!options.model.empty()) {
    const search::ModelShapes model = search::model_shapes_by_name(options.model, "--model");
    const search::GemmFilter filter = parse_gemm_filter(options.gemms);
    // Expert GEMMs are no dense GEMMs: the dense run takes the dense ones only.
    shapes = filter == search::GemmFilter::MoeExpert ? std::vector<search::GemmShape>{}
                                                     : search::distinct_shapes(model, options.tp, search::GemmFilter::Dense, "--tp");
    moe_problems = moe_tune_problems(options.moe, &model, options.tp, formats, filter != search::GemmFilter::Dense);
    if (shapes.empty() && moe_problems.empty()) {
      QTUNE_INPUT_ERROR("--gemms: model '" + model.name + "' has no " + options.gemms + " GEMMs (it has: " +
                        gemm_kinds_text(model, options.tp) + ")");
    }
  } else if (!options.shape.empty()) {
    shapes = tune::parse_shape_list(options.shape, "--shape");
    moe_problems = moe_tune_problems(options.moe, nullptr, options.tp, formats, false);
  } else {
    QTUNE_INPUT_ERROR("--model: give a model (configs/models name or file) or --shape N,K[;N,K]");
  }
  const std::vector<std::int64_t> m_values =
      options.m_list.empty() ? search::load_m_buckets() : search::parse_m_list(options.m_list, "--m");
  const tune::Shard shard = tune::resolve_shard(options.shard, options.shard_count, tune::process_environment());
  const std::vector<Problem> all_problems = tune::build_problem_set(formats, shapes, m_values);

  tune::TuneOptions tune_options;
  const std::vector<Problem> shard_problems = tune::select_shard(all_problems, shard);
  tune_options.problems = shard_problems;
  tune_options.shard = shard;
  tune_options.family = options.family;
  tune_options.space = options.space;
  for (const std::string& text : options.params) {
    auto [name, values] = tune::parse_parameter_values(text);
    tune_options.parameter_values[name] = values;
  }
  tune_options.strategy = options.strategy;
  if (options.budget_evals) tune_options.budget.max_evaluations = *options.budget_evals;
  tune_options.budget_fraction = options.budget_fraction;
  if (options.budget_seconds) tune_options.budget.max_seconds = *options.budget_seconds;
  const double timeout_s = options.timeout_ms ? *options.timeout_ms / 1000.0 : options.timeout_s;
  if (timeout_s <= options.time_budget_s) {
    QTUNE_INPUT_ERROR("--timeout: the candidate timeout must exceed the measurement's --time-budget");
  }
  tune_options.timeout_s = timeout_s;
  tune_options.dry_run = options.dry_run;
  tune_options.retune = options.retune;
  tune_options.strategy_options.seed = options.seed;
  tune_options.strategy_options.cost_model = options.cost_model;
  search::make_cost_model(options.cost_model);  // an unknown name fails here, naming the field
  tune_options.command_line = command_line();
  if (!options.compare_table.empty()) {
    auto table = std::make_shared<const reports::SelectionTable>(production::read_selection_table(options.compare_table));
    tune_options.table_selection = [table](const Problem& problem, const ArchLimits& limits) -> std::optional<KernelConfig> {
      return production::select_config(table.get(), problem, limits).config;
    };
  }

  if (!moe_problems.empty() && shard.sharded()) {
    QTUNE_INPUT_ERROR("--shard: MoE expert GEMMs are not sharded yet; tune them in one process (--gemms moe)");
  }
  // A peer's MoE kernel as the baseline: the peer must run MoE GEMMs in every format it applies to, settled before
  // anything is stored (exit 2 naming the provider and what to install). A dry run measures no baseline.
  std::unique_ptr<peers::PeerHost> moe_baseline_peers;
  const std::vector<peers::ProviderId> moe_peer_providers = moe_baseline_peer_providers(options.moe.baseline, moe_problems);
  if (!moe_peer_providers.empty() && !options.dry_run) {
    peers::PeerEnvironment environment = peers::peer_environment(options.peer_paths);
    environment.test_peers = options.test_peers;
    moe_baseline_peers = std::make_unique<peers::PeerHost>(std::move(environment));
    for (const peers::ProviderId& provider : moe_peer_providers) moe_baseline_peers->require_moe(provider);
  }
  const peers::FamilyChoice family_choice = peers::split_families(options.family);
  HummingPart humming;
  if (family_choice.humming == peers::HummingChoice::Required) humming = plan_humming(options, family_choice.humming, shard_problems);
  const tune::TuneTarget target = tune::resolve_target(options.gpu, options.devices, options.dry_run);
  if (family_choice.humming == peers::HummingChoice::IfAvailable) humming = plan_humming(options, family_choice.humming, shard_problems);
  const std::vector<const KernelFamily*> families =
      family_choice.kernel_families.empty()
          ? std::vector<const KernelFamily*>{}
          : tune::families_to_tune(family_choice.kernel_families, formats, target.limits.sm);
  if (!families.empty() && !shapes.empty()) refuse_formats_nothing_tunes(formats, families, humming.problems, target.limits.sm);
  // The MoE expert GEMMs run in the MoE kernels of the families --family names (auto: mma; on sm_90 wgmma for
  // weight-only formats and tma for quantized activations).
  const std::vector<std::string> moe_providers =
      moe_problems.empty() ? std::vector<std::string>{}
                           : tune::moe_providers_for_families(
                                 family_choice.kernel_families.empty() ? options.family : family_choice.kernel_families, formats,
                                 target.limits.sm);
  std::cerr << "qtune tune: " << tune_options.problems.size() << " problems";
  if (shard.sharded()) std::cerr << " (shard " << shard.to_string() << " of " << all_problems.size() << ")";
  std::cerr << " on " << target.gpu_key() << " (" << target.arch << ")";
  if (!options.dry_run) std::cerr << ", " << target.visible_devices.size() << " GPU(s)";
  std::cerr << ", strategy " << options.strategy << ", db " << options.db_path << (options.dry_run ? ", dry run: NVRTC only, no GPU is touched" : "") << "\n";

  const jit::CompilerSettings settings = compiler_settings(options.jobs);
  tune::NvrtcInstantiationCompiler compiler(settings);
  tune::MeasureSettings measure = tune::default_measure_settings();
  measure.full_fidelity.time_budget_s = options.time_budget_s;
  measure.full_fidelity.max_warmup_s = std::min(measure.full_fidelity.max_warmup_s, options.time_budget_s / 2);
  measure.full_fidelity.warm_l2 = options.warm_l2;
  measure.short_fidelity.time_budget_s = std::min(measure.short_fidelity.time_budget_s, options.time_budget_s);
  measure.short_fidelity.warm_l2 = options.warm_l2;
  measure.full_fidelity.l2_flush = measure::l2_flush_from_text(options.l2_flush, "--l2-flush");
  measure.short_fidelity.l2_flush = measure.full_fidelity.l2_flush;
  measure.full_fidelity.clock_dip_fraction = options.clock_dip;
  measure.seed = options.seed;
  tune::TuneServices services;
  services.compiler = &compiler;
  services.slots = static_cast<int>(target.visible_devices.size());
  const std::filesystem::path cache = settings.cache_directory.value_or(jit::KernelCache::default_directory());
  services.backends = tune::worker_backends(target.visible_devices, measure, cache);

  // Each family is its own run; a problem's winner is the fastest over the families (tuner.cpp keeps another
  // family's faster winner). One progress bar covers every family's compile and measuring.
  std::vector<std::vector<Problem>> problems_of_family;
  for (const KernelFamily* family : families) {
    problems_of_family.push_back(
        tune::problems_for_family(*family, families, shard_problems, target.limits.sm, options.family == "auto"));
  }
  tune::ConsoleProgress progress(std::cerr, isatty(STDERR_FILENO) != 0);
  const std::size_t threads = jit::compiler_thread_count(options.jobs);
  std::size_t moe_stage = 0;
  const std::vector<std::pair<std::size_t, std::size_t>> stages =
      plan_progress(progress, families, problems_of_family, options, threads, humming.problems.size(), moe_problems.size(), &moe_stage);
  FamilyConsole console(progress, stages, families.size(), options.dry_run, style);
  tune::FamilyRuns runs;
  if (!shard_problems.empty()) {
    StopSignals signals;
    runs = tune::run_tune_families(tune_options, families, problems_of_family, target, options.db_path, services, &progress,
                                   &console, &stop_requested);
  }
  if (!runs.interrupted) progress.end_stages();
  if (!runs.interrupted && !humming.problems.empty()) {
    // Humming last: a problem's winner is the fastest of every provider (each run keeps another's faster winner).
    if (!families.empty()) std::cerr << "qtune tune: family humming, " << humming.problems.size() << " problems\n";
    progress.start_stages(stages.back().first, stages.back().second);
    peers::HummingTuneOptions humming_options;
    humming_options.compile_workers = threads;  // --jobs: Humming's kernels are built ahead by this many workers
    humming_options.tune = tune_options;
    humming_options.tune.problems = humming.problems;
    humming_options.tune.family = search::kHummingFamily;
    humming_options.measure = measure;
    tune::TuneReport report;
    {
      StopSignals signals;
      report = peers::run_humming_tune(humming_options, target, options.db_path, *humming.host, &progress, &stop_requested);
    }
    if (!report.interrupted) progress.end_stages();
    runs.interrupted = runs.interrupted || report.interrupted;
    if (style == reports::OutputStyle::Text) print_report(report, false, style);
    runs.reports.push_back(std::move(report));
  }
  // --output json|csv: one table of every family's dense problems and of the MoE problems, as one document.
  std::optional<reports::Table> dense_table;
  std::optional<reports::Table> moe_table;
  if (style != reports::OutputStyle::Text && (!shard_problems.empty() || moe_problems.empty())) {
    tune::TuneReport machine_report;
    for (const tune::TuneReport& report : runs.reports) {
      machine_report.reports.insert(machine_report.reports.end(), report.reports.begin(), report.reports.end());
    }
    dense_table = report_table(machine_report, options.dry_run);
  }
  int moe_status = 0;
  if (!moe_problems.empty() && !runs.interrupted) {
    moe_status = run_moe(options, moe_problems, moe_providers, target, measure, settings, cache, style, moe_table,
                         moe_baseline_peers.get(), progress, moe_stage);
  }
  if (style != reports::OutputStyle::Text) {
    std::vector<std::pair<std::string, const reports::Table*>> parts;
    if (dense_table) parts.emplace_back("dense", &*dense_table);
    if (moe_table) parts.emplace_back("moe", &*moe_table);
    reports::stack_tables("gemm", parts).print(std::cout, style);
  }
  if (moe_status != 0) return moe_status;
  // 130: stopped by a signal, as shells report a Ctrl-C.
  return runs.interrupted ? kExitInterrupted : 0;
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto options = std::make_shared<TuneCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "tune", "tune kernels for every (format, N, K, M bucket) of a model or shapes on a GPU, into the database");
  command->add_option("--gpu", options->gpu, "auto (the local device, matched to a configs/gpus profile) or a profile name")
      ->capture_default_str();
  CLI::Option* device = command->add_option("--device", options->devices,
                                            "GPUs to measure on: all, or ordinals such as 0,1 (one worker each)")
                            ->capture_default_str();
  add_hidden_alias(*command, "--devices", options->devices, device);
  CLI::Option* format = command->add_option("--format", options->formats,
                                            "format specs or presets, comma- or ';'-separated")
                            ->capture_default_str();
  add_hidden_alias(*command, "--formats", options->formats, format);
  command->add_option("--model", options->model, "model shape set: a configs/models name or a JSON file");
  command->add_option("--tp", options->tp, "tensor-parallel degree of the model's GEMMs")->check(integer_in(1, 1024))->capture_default_str();
  command->add_option("--gemms", options->gemms, "which of the model's GEMMs: all, dense or moe")->capture_default_str();
  command->add_option("--shape", options->shape, "GEMM weight shapes N,K[;N,K...] instead of --model");
  add_moe_tune_options(*command, options->moe);
  command->add_option("--m", options->m_list, "M buckets, e.g. 1,2,4,...,8192 (default: configs/m_buckets.json)");
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
  command->add_option("--strategy", options->strategy, "exhaustive, random, halving or model")->capture_default_str();
  command->add_option("--cost-model", options->cost_model, "the model strategy's cost model: trees or ridge")->capture_default_str();
  command->add_option("--budget-evals", options->budget_evals, "at most this many evaluations per problem")
      ->check(integer_in(1, 1000000000));
  command->add_option("--budget-fraction", options->budget_fraction,
                      "at most this share of each problem's candidates, e.g. 0.15 (with --budget-evals: the smaller)")
      ->check(real_in(0, 1, true));
  command->add_option("--budget-seconds", options->budget_seconds, "at most this many seconds of search per problem")
      ->check(real_in(0, 1e9, true));
  command->add_option("--shard", options->shard,
                      "tune shard i/n of the problems (default: from SLURM_ARRAY_TASK_ID/COUNT or JOB_COMPLETION_INDEX)");
  command->add_option("--shard-count", options->shard_count, "number of shards with JOB_COMPLETION_INDEX (else QTUNE_SHARD_COUNT)")
      ->check(integer_in(1, 1000000));
  command->add_option("--family", options->family,
                      "kernel families to tune, one run each, in order: auto (every family that runs one of the "
                      "formats on the GPU, each where it can win: on sm_90 mma to M = 32, wgmma from M = 16 to M = 64 (fp8 "
                      "activations, which it widens to f16, from M = 1), tma from M = 32) or a "
                      "list such as mma,wgmma (every problem for each); humming (Humming's TuningConfig, run by its "
                      "peer: docs/peers.md; auto includes it where its peer is installed); a problem's winner is the "
                      "fastest of all. MoE expert GEMMs run in the MoE kernels of the mma, wgmma and tma families named "
                      "(auto: mma; on sm_90 wgmma for weight-only and fp8-activation formats, tma for quantized activations, each only "
                      "at the rows per expert where it can win: docs/moe.md)")
      ->capture_default_str();
  command->add_option("--space", options->space,
                      "curated: per-M parameter ranges (a few hundred candidates per problem); full: the family's whole "
                      "space (tens of thousands of instantiations to compile)")
      ->capture_default_str();
  command->add_option("--param", options->params, "narrow a parameter's values, e.g. --param bm=16,32 (repeatable)");
  CLI::Option* timeout = command->add_option("--timeout", options->timeout_s,
                                             "seconds per candidate to load, verify and measure it, else it is a timeout")
                             ->check(real_in(0, 1e6, true))
                             ->capture_default_str();
  // The old spelling counted milliseconds.
  add_hidden_alias(*command, "--timeout-ms", options->timeout_ms, timeout)->check(real_in(0, 1e9, true));
  command->add_option("--time-budget", options->time_budget_s, "seconds of measurement per candidate")
      ->check(real_in(0, 3600, true))
      ->capture_default_str();
  add_clock_dip_option(*command, options->clock_dip)->description(
      "full-fidelity measurements (those winners come from) during which NVML saw the SM clock below this fraction "
      "of the GPU's highest are treated as throttled: cooled down and measured again (at most twice); screening "
      "measurements never retry a dip; 0 turns the rule off");
  command->add_flag("--warm-l2", options->warm_l2, "do not flush L2 between repetitions (default: cold L2)");
  command->add_option("--compare-table", options->compare_table,
                      "also measure what this exported table (qtune export -o table.json) picks for each problem, as "
                      "production would run it (tuned range, else nearest tuned shape, else heuristic): phase 'table'")
      ->check(CLI::ExistingFile);
  command->add_option("--l2-flush", options->l2_flush,
                      "how cold L2 is made between repetitions: read (a 2x L2 buffer is read, leaving clean lines) or "
                      "write (the buffer is written, leaving dirty lines the kernel pays to write back)")
      ->capture_default_str();
  command->add_flag("--dry-run", options->dry_run, "enumerate, prune and compile, store the counts, but measure nothing");
  command->add_flag("--retune", options->retune, "search problems again even when their stored winner is final");
  command->add_option("--seed", options->seed, "seed of the problem data and of randomised strategies")
      ->check(integer_in(0, kMaxSeed))
      ->capture_default_str();
  command->add_option("--jobs", options->jobs,
                      "compiler threads, and Humming's peer workers building its kernels ahead (0: every core; at most "
                      "the cores)")
      ->check(integer_in(0, kMaxJobs))
      ->capture_default_str();
  command->add_option("--output", options->output, "summary style: table, json or csv")->capture_default_str();
  command->add_option("--peer-path", options->peer_paths,
                      "a folder the peers (Humming, also as --moe-baseline) are imported from; repeatable, before "
                      "$QTUNE_PEER_PATH");
  command->add_flag("--test-peers", options->test_peers, "also offer qtune's test peers (fake)")->group("");
  command->callback([options] { set_exit_status(run(*options)); });
}

}  // namespace qtune::cli

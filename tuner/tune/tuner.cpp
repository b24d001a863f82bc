#include "tuner/tune/tuner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "kernels/embedded_sources.hpp"
#include "kernels/error.hpp"
#include "search/space.hpp"
#include "search/winner.hpp"
#include "tuner/jit/sha256.hpp"
#include "tuner/tune/records.hpp"
#include "tuner/tune/restricted_family.hpp"

namespace qtune::tune {

namespace fs = std::filesystem;

TuneTarget target_from_profile(const search::GpuProfile& profile) {
  TuneTarget target;
  target.gpu_profile = profile.name;
  target.gpu_name = profile.display_name.empty() ? profile.name : profile.display_name;
  target.limits = limits_of_profile(profile);
  target.arch = profile.arch;
  return target;
}

std::string kernel_source_hash(const KernelFamily& family) {
  std::vector<EmbeddedSource> sources(embedded_device_sources().begin(), embedded_device_sources().end());
  std::sort(sources.begin(), sources.end(), [](const EmbeddedSource& a, const EmbeddedSource& b) { return a.name < b.name; });
  jit::Sha256 hash;
  hash.update_field("qtune-kernel-sources-1");
  hash.update_field(family.name());
  for (const EmbeddedSource& source : sources) {
    hash.update_field(source.name);
    hash.update_field(source.text);
  }
  return hash.finish_hex().substr(0, 16);
}

namespace {

// Thrown inside a search when the tune must stop; caught per problem.
struct Interrupted {};


db::Problem db_problem(const Problem& problem) {
  return db::Problem{problem.format.to_string(), problem.m, problem.n, problem.k};
}

bool is_short_phase(const std::string& phase) {
  return phase.size() >= 6 && phase.compare(phase.size() - 6, 6, "-short") == 0;
}


// What identifies a search, so that a rerun can tell whether a stored winner is final.
struct SearchIdentity {
  std::string space_key;
  std::string search_key;
  bool exhaustive_complete = false;
};

// The values each parameter may take for one problem: the space preset's, replaced by the user's where given.
std::map<std::string, std::vector<int>> parameter_ranges(const TuneOptions& options, const KernelFamily& family, std::int64_t m) {
  std::map<std::string, std::vector<int>> ranges;
  if (options.space == "curated") ranges = family.curated_ranges(m);
  for (const auto& [name, values] : options.parameter_values) ranges[name] = values;
  return ranges;
}

SearchIdentity search_identity(const TuneOptions& options, const KernelFamily& family, const TuneTarget& target) {
  nlohmann::json space = {{"family", family.name()}, {"arch", target.arch}, {"preset", options.space}};
  // M values that reach every branch of the curated ranges, so the key changes when those ranges do.
  for (std::int64_t m : {1, 16, 32, 64, 128, 256, 512, 8192}) {
    const RestrictedFamily restricted(family, parameter_ranges(options, family, m));
    for (const ParameterDomain& domain : restricted.parameter_space()) space["m" + std::to_string(m)][domain.name] = domain.values;
  }
  SearchIdentity identity;
  identity.space_key = jit::sha256_hex(space.dump()).substr(0, 16);
  const bool unlimited_evaluations = options.budget.max_evaluations == std::numeric_limits<std::size_t>::max();
  const bool unlimited_seconds = !std::isfinite(options.budget.max_seconds);
  const search::StrategyOptions& strategy = options.strategy_options;
  nlohmann::json search = {{"space", identity.space_key},
                           {"strategy", options.strategy},
                           {"budget_evaluations", unlimited_evaluations ? nlohmann::json(nullptr) : nlohmann::json(options.budget.max_evaluations)},
                           {"budget_seconds", unlimited_seconds ? nlohmann::json(nullptr) : nlohmann::json(options.budget.max_seconds)},
                           {"seed", strategy.seed},
                           {"batch_size", strategy.batch_size},
                           {"initial_random_fraction", strategy.initial_random_fraction},
                           {"halving_eta", strategy.halving_eta},
                           {"prior_limit", options.prior_limit},
                           {"cost_model", strategy.cost_model}};
  if (options.budget_fraction) search["budget_fraction"] = *options.budget_fraction;
  identity.search_key = jit::sha256_hex(search.dump()).substr(0, 16);
  identity.exhaustive_complete =
      options.strategy == "exhaustive" && unlimited_evaluations && unlimited_seconds && !options.budget_fraction;
  return identity;
}

// Results already in the store for one problem on this GPU, per config (only configs of the current source hash
// matter: another hash is another config id).
struct StoredResult {
  bool passed = false;  // some verification passed
  bool failed = false;  // some verification did not pass, or a measurement crashed, timed out or failed
  std::optional<search::Evaluation> full;
  std::optional<search::Evaluation> short_fidelity;
  double ci_high_us = 0;
  bool usable_full() const { return passed && !failed && full.has_value(); }
};

std::map<db::ConfigId, StoredResult> load_stored(db::Store& store, db::ProblemId problem, const std::string& gpu) {
  std::map<db::ConfigId, StoredResult> stored;
  for (const db::VerificationRecord& verification : store.list_verifications(db::RowFilter{.problem = problem, .gpu = gpu})) {
    StoredResult& result = stored[verification.config];
    if (verification.status == db::VerificationStatus::Passed) {
      result.passed = true;
    } else {
      result.failed = true;
    }
  }
  for (const db::MeasurementRecord& measurement : store.list_measurements(db::RowFilter{.problem = problem, .gpu = gpu})) {
    StoredResult& result = stored[measurement.config];
    if (measurement.status != db::MeasurementStatus::Ok || !measurement.stats) {
      result.failed = true;
      continue;
    }
    const search::Evaluation evaluation{true, measurement.stats->median_us};
    if (is_short_phase(measurement.phase)) {
      result.short_fidelity = evaluation;
    } else {
      result.full = evaluation;
      result.ci_high_us = measurement.stats->ci_high_us;
    }
  }
  return stored;
}

struct CandidateEntry {
  KernelConfig config;
  db::ConfigId config_id{};
  std::size_t instantiation = 0;
  bool compiled = false;
  std::string cache_key;
};

struct PreparedProblem {
  std::size_t position = 0;  // in TuneOptions::problems
  ProblemReport report;
  std::vector<CandidateEntry> entries;  // every candidate that passed the static rules, then the heuristic if apart
  std::vector<std::size_t> searchable;  // entries the strategy searches (compiled, not pruned after compiling)
  std::optional<std::size_t> heuristic;
  std::optional<std::size_t> table;  // TuneOptions::table_selection's pick, when there is one
};

struct InstantiationRecord {
  Instantiation instantiation;
  InstantiationResult result;
  db::ConfigId config_id{};
};


// State the measuring slots share; every member but the atomics is guarded by `mutex`.
struct Shared {
  std::mutex mutex;
  TuneObserver* observer = nullptr;
  std::size_t next_problem = 0;
  std::vector<std::pair<db::ProblemId, search::PriorObservation>> prior_pool;
  std::exception_ptr error;
  std::atomic<bool> abort{false};
  const std::atomic<bool>* stop = nullptr;

  bool stopping() const { return abort.load() || (stop != nullptr && stop->load()); }
  template <typename Call>
  void notify(Call call) {
    if (observer == nullptr) return;
    std::lock_guard lock(mutex);
    call(*observer);
  }
};

struct RunContext {
  const TuneOptions& options;
  const TuneTarget& target;
  const KernelFamily& family;
  const fs::path& database;
  db::RunId run{};
  std::string gpu;
  std::string source_hash;
};

// The objective of one problem's search: answers from the store where it can, else verifies and measures the
// candidate through the backend and stores the result in one transaction before returning it.
class TuneObjective final : public search::Objective {
 public:
  TuneObjective(const RunContext& context, Shared& shared, PreparedProblem& prepared, db::Store& store,
                MeasuringBackend& backend, std::map<db::ConfigId, StoredResult>& stored)
      : context_(context), shared_(shared), prepared_(prepared), store_(store), backend_(backend), stored_(stored) {}

  void set_phase(std::string phase) { phase_ = std::move(phase); }

  search::Evaluation evaluate(const search::Candidate& candidate, search::Fidelity fidelity) override {
    return evaluate_entry(prepared_.searchable.at(candidate.id), fidelity);
  }

  search::Evaluation evaluate_entry(std::size_t entry_index, search::Fidelity fidelity) {
    if (shared_.stopping()) throw Interrupted{};
    const CandidateEntry& entry = prepared_.entries.at(entry_index);
    ProblemReport& report = prepared_.report;
    const std::string phase = fidelity == search::Fidelity::Full ? phase_ : phase_ + "-short";
    EvaluationEvent event{&report.problem, entry.config, phase, true, false, 0, "stored"};
    if (!entry.compiled) {
      ++report.invalid;
      event.outcome = "compile-failed";
      shared_.notify([&](TuneObserver& observer) { observer.evaluated(event); });
      return {};
    }
    StoredResult& stored = stored_[entry.config_id];
    std::optional<search::Evaluation> reuse;
    if (stored.failed) {
      reuse = search::Evaluation{};
    } else if (stored.passed && stored.full) {
      reuse = stored.full;
    } else if (fidelity == search::Fidelity::Short && stored.passed && stored.short_fidelity) {
      reuse = stored.short_fidelity;
    }
    if (reuse) {
      ++report.reused;
      if (!reuse->valid) ++report.invalid;
      event.valid = reuse->valid;
      event.time_us = reuse->valid ? reuse->time_us : 0;
      shared_.notify([&](TuneObserver& observer) { observer.evaluated(event); });
      return *reuse;
    }

    CandidateRequest request;
    request.family = &context_.family;
    request.problem = report.problem;
    request.config = entry.config;
    request.arch = context_.target.arch;
    request.cache_key = entry.cache_key;
    request.fidelity = fidelity;
    request.timeout_s = context_.options.timeout_s;
    CandidateResult result;
    try {
      result = backend_.evaluate(request);
    } catch (const Error&) {
      // Ctrl-C also kills the worker while it prepares a problem: that is the stop, not a failure.
      if (shared_.stopping()) throw Interrupted{};
      throw;
    }
    // Ctrl-C reaches the worker too: a crash seen while stopping is not the candidate's fault and is not stored.
    if (shared_.stopping() && (result.outcome == CandidateOutcome::Crashed || result.outcome == CandidateOutcome::Timeout)) {
      throw Interrupted{};
    }
    store_result(entry, phase, result, stored);
    ++report.measured;
    search::Evaluation evaluation;
    if (result.outcome == CandidateOutcome::Measured) {
      evaluation = {true, result.measurement.median_us};
      if (fidelity == search::Fidelity::Full) add_prior(entry, result.measurement.median_us);
    } else {
      ++report.invalid;
    }
    event.reused = false;
    event.valid = evaluation.valid;
    event.time_us = evaluation.valid ? evaluation.time_us : 0;
    event.outcome = to_string(result.outcome);
    shared_.notify([&](TuneObserver& observer) { observer.evaluated(event); });
    return evaluation;
  }

 private:
  void store_result(const CandidateEntry& entry, const std::string& phase, const CandidateResult& result, StoredResult& stored) {
    const CandidateRecords records =
        candidate_records(result, context_.run, prepared_.report.problem_id, entry.config_id, phase);
    auto transaction = store_.transaction();
    store_.insert_verification(records.verification);
    if (records.measurement) store_.insert_measurement(*records.measurement);
    transaction.commit();
    if (result.outcome == CandidateOutcome::Measured) {
      stored.passed = true;
      const search::Evaluation evaluation{true, result.measurement.median_us};
      if (is_short_phase(phase)) {
        stored.short_fidelity = evaluation;
      } else {
        stored.full = evaluation;
        stored.ci_high_us = result.measurement.ci_high_us;
      }
    } else {
      stored.failed = true;
    }
  }

  void add_prior(const CandidateEntry& entry, double time_us) {
    if (context_.options.strategy != "model") return;
    search::PriorObservation observation{
        search::cost_features(context_.family, entry.config, prepared_.report.problem, context_.target.limits), time_us};
    std::lock_guard lock(shared_.mutex);
    shared_.prior_pool.emplace_back(prepared_.report.problem_id, std::move(observation));
  }

  const RunContext& context_;
  Shared& shared_;
  PreparedProblem& prepared_;
  db::Store& store_;
  MeasuringBackend& backend_;
  std::map<db::ConfigId, StoredResult>& stored_;
  std::string phase_ = "heuristic";
};

// Observations of other problems for the model strategy: the measurements of this family already in the store.
void load_prior_pool(db::Store& store, const KernelFamily& family, const TuneTarget& target, Shared& shared) {
  std::map<db::ProblemId, Problem> problems;
  for (const db::ProblemRecord& record : store.list_problems()) {
    try {
      problems[record.id] = Problem{FormatSpec::parse(record.format), record.m, record.n, record.k, false};
    } catch (const InputError&) {
      // A format this build cannot parse: not usable as a prior.
    }
  }
  const std::map<db::ConfigId, KernelConfig> configs = db::kernel_configs_of_family(store, family.name());
  std::map<db::RunId, ArchLimits> limits_of_run;
  for (const db::RunRecord& run : store.list_runs()) {
    ArchLimits limits = target.limits;
    if (run.sm > 0 && run.sm != target.limits.sm) {
      try {
        limits = ArchLimits::for_sm(run.sm);
      } catch (const InputError&) {
      }
    }
    if (run.sm_count > 0) limits.sm_count = run.sm_count;
    limits_of_run[run.id] = limits;
  }
  for (const db::MeasurementRecord& measurement : store.list_measurements()) {
    if (measurement.status != db::MeasurementStatus::Ok || !measurement.stats || is_short_phase(measurement.phase)) continue;
    auto problem = problems.find(measurement.problem);
    auto config = configs.find(measurement.config);
    if (problem == problems.end() || config == configs.end()) continue;
    auto limits = limits_of_run.find(measurement.run);
    try {
      shared.prior_pool.emplace_back(
          measurement.problem,
          search::PriorObservation{search::cost_features(family, config->second, problem->second,
                                                         limits == limits_of_run.end() ? target.limits : limits->second),
                                   measurement.stats->median_us});
    } catch (const Error&) {
      // A config the family no longer describes (a parameter renamed): skip it.
    }
  }
}

std::vector<search::PriorObservation> prior_for(Shared& shared, db::ProblemId problem, std::size_t limit, std::uint64_t seed) {
  std::vector<search::PriorObservation> prior;
  {
    std::lock_guard lock(shared.mutex);
    for (const auto& [owner, observation] : shared.prior_pool) {
      if (owner != problem) prior.push_back(observation);
    }
  }
  if (prior.size() > limit) {
    std::mt19937_64 random(seed);
    std::shuffle(prior.begin(), prior.end(), random);
    prior.resize(limit);
  }
  return prior;
}

// Whether a run's tune notes describe this search: the same search key, or an exhaustive search of the same space.
bool same_search(const nlohmann::json& tune, const SearchIdentity& identity) {
  if (tune.value("search_key", std::string{}) == identity.search_key) return true;
  return tune.value("exhaustive_complete", false) && tune.value("space_key", std::string{}) == identity.space_key;
}

// The completed, measuring runs of `family` on `gpu` with this search identity and these sources.
std::vector<db::RunId> runs_of_search(db::Store& store, const std::string& gpu, const std::string& family,
                                      const std::string& source_hash, const SearchIdentity& identity) {
  std::vector<db::RunId> runs;
  for (const db::RunRecord& run : store.list_runs()) {
    if (run.status != db::RunStatus::Completed || run.gpu_key() != gpu) continue;
    try {
      const nlohmann::json notes = nlohmann::json::parse(run.notes);
      const nlohmann::json& tune = notes.at("tune");
      if (tune.value("family", std::string{}) == family && !tune.value("dry_run", true) &&
          tune.value("source_hash", std::string{}) == source_hash && same_search(tune, identity)) {
        runs.push_back(run.id);
      }
    } catch (const std::exception&) {
      continue;  // a run of another kind, or notes written by hand
    }
  }
  return runs;
}

// `searched_by`: runs_of_search for this family and search.
bool winner_is_final(db::Store& store, db::ProblemId problem, const std::string& gpu, const std::string& family,
                     const std::string& source_hash, const SearchIdentity& identity, const std::vector<db::RunId>& searched_by) {
  const auto winner = store.get_winner(problem, gpu);
  if (!winner) return false;
  const auto config = store.get_config(winner->config);
  if (!config) return false;
  // Another family's winner: final for this family once one of this family's runs of the same search measured it.
  if (config->family != family) {
    return std::any_of(searched_by.begin(), searched_by.end(), [&](db::RunId run) {
      return !store.list_measurements({run, problem, std::nullopt, std::nullopt}).empty();
    });
  }
  if (config->source_hash != source_hash) return false;
  const auto run = store.get_run(winner->run);
  if (!run) return false;
  try {
    const nlohmann::json notes = nlohmann::json::parse(run->notes);
    return same_search(notes.at("tune"), identity);
  } catch (const std::exception&) {
    return false;  // a run of another kind, or notes written by hand
  }
}

// Measures one prepared problem: the heuristic, the strategy's search, then the winner.
void measure_problem(const RunContext& context, Shared& shared, PreparedProblem& prepared, db::Store& store,
                     MeasuringBackend& backend) {
  ProblemReport& report = prepared.report;
  const auto started = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  shared.notify([&](TuneObserver& observer) { observer.problem_started(report); });
  std::map<db::ConfigId, StoredResult> stored = load_stored(store, report.problem_id, context.gpu);
  TuneObjective objective(context, shared, prepared, store, backend, stored);
  try {
    if (prepared.heuristic) {
      objective.set_phase("heuristic");
      const search::Evaluation heuristic = objective.evaluate_entry(*prepared.heuristic, search::Fidelity::Full);
      if (heuristic.valid) report.heuristic_us = heuristic.time_us;
    }
    if (prepared.table) {
      objective.set_phase("table");
      const search::Evaluation table = objective.evaluate_entry(*prepared.table, search::Fidelity::Full);
      if (table.valid) report.table_us = table.time_us;
    }
    if (!prepared.searchable.empty()) {
      const std::uint64_t seed = context.options.strategy_options.seed ^ fnv1a(problem_key(report.problem));
      search::StrategyOptions strategy_options = context.options.strategy_options;
      strategy_options.seed = seed;
      if (context.options.strategy == "model") {
        strategy_options.prior = prior_for(shared, report.problem_id, context.options.prior_limit, seed);
      }
      std::vector<search::Candidate> candidates;
      candidates.reserve(prepared.searchable.size());
      for (std::size_t i = 0; i < prepared.searchable.size(); ++i) {
        const CandidateEntry& entry = prepared.entries[prepared.searchable[i]];
        candidates.push_back({i, search::cost_features(context.family, entry.config, report.problem, context.target.limits)});
      }
      const std::unique_ptr<search::Strategy> strategy = search::make_strategy(context.options.strategy, strategy_options);
      objective.set_phase(context.options.strategy);
      const search::SearchOutcome outcome =
          strategy->run(candidates, objective, problem_budget(context.options, candidates.size()));
      report.evaluations = outcome.history.size();
    }
  } catch (const Interrupted&) {
    report.interrupted = true;
    report.seconds = elapsed();
    shared.notify([&](TuneObserver& observer) { observer.problem_finished(report); });
    return;
  }

  // The winner among every verified full measurement of this problem's candidates on this GPU (now and before).
  std::vector<search::ScoredCandidate> scored;
  std::vector<std::size_t> scored_entry;
  std::vector<std::size_t> eligible = prepared.searchable;
  for (const std::optional<std::size_t>& reference : {prepared.heuristic, prepared.table}) {
    if (reference && std::find(eligible.begin(), eligible.end(), *reference) == eligible.end()) eligible.push_back(*reference);
  }
  for (std::size_t index : eligible) {
    const CandidateEntry& entry = prepared.entries[index];
    auto found = stored.find(entry.config_id);
    if (found == stored.end() || !found->second.usable_full() || !found->second.full->valid) continue;
    scored.push_back({entry.config.to_string(), found->second.full->time_us, found->second.ci_high_us,
                      search::config_complexity(entry.config), true});
    scored_entry.push_back(index);
  }
  // The incumbent is the previous winner's configuration, even when it was measured with older kernel sources.
  std::optional<std::string> incumbent;
  const std::optional<db::WinnerRecord> previous_winner = store.get_winner(report.problem_id, context.gpu);
  std::optional<db::KernelConfigRecord> other_family_winner;  // a previous winner of another kernel family
  if (const auto& previous = previous_winner) {
    const auto config = store.get_config(previous->config);
    if (config && config->family != context.family.name()) other_family_winner = config;
    if (config && config->family == context.family.name()) {
      try {
        incumbent = db::to_kernel_config(*config).to_string();
      } catch (const std::exception&) {
        incumbent.reset();  // parameters this build no longer knows: no incumbent
      }
    }
  }
  if (const auto choice = search::choose_winner(scored, incumbent, context.options.tie_tolerance)) {
    const CandidateEntry& entry = prepared.entries[scored_entry[choice->index]];
    const double chosen_us = scored[choice->index].median_us;
    if (other_family_winner && previous_winner->median_us <= chosen_us) {
      // Families are tuned one after another (tune --family mma,wgmma): another family's faster winner stays.
      try {
        report.winner = db::to_kernel_config(*other_family_winner);
      } catch (const std::exception&) {
        report.winner.reset();  // parameters this build no longer knows
      }
      report.winner_us = previous_winner->median_us;
      char chosen_text[32];
      std::snprintf(chosen_text, sizeof chosen_text, "%.2f", chosen_us);
      report.winner_reason = "kept: the " + other_family_winner->family + " winner is faster than this family's " +
                             chosen_text + " us";
    } else {
      store.set_winner(db::Winner{context.run, report.problem_id, entry.config_id, chosen_us, choice->reason});
      report.winner = entry.config;
      report.winner_us = chosen_us;
      report.winner_reason = choice->reason;
    }
  }
  report.seconds = elapsed();
  shared.notify([&](TuneObserver& observer) { observer.problem_finished(report); });
}

// One measuring slot: takes problems from the shared queue until none is left or the tune stops.
void run_slot(const RunContext& context, Shared& shared, std::vector<PreparedProblem>& prepared,
              const std::vector<std::size_t>& order, MeasuringBackend& backend) {
  db::Store store = db::Store::open(context.database);
  while (!shared.stopping()) {
    std::size_t position = 0;
    {
      std::lock_guard lock(shared.mutex);
      if (shared.next_problem >= order.size()) return;
      position = shared.next_problem++;
    }
    measure_problem(context, shared, prepared[order[position]], store, backend);
  }
}

}  // namespace

search::Budget problem_budget(const TuneOptions& options, std::size_t candidates) {
  search::Budget budget = options.budget;
  if (options.budget_fraction) {
    const auto share = static_cast<std::size_t>(std::ceil(*options.budget_fraction * static_cast<double>(candidates)));
    budget.max_evaluations = std::min(budget.max_evaluations, std::max<std::size_t>(1, share));
  }
  return budget;
}

namespace {

// The steps of run_tune, in order: check the options, open the run, plan the problems (enumerate and prune by the
// static rules), compile every instantiation once, prune by the compiler's resources, measure, store the outcome.

void check_tune_options(const TuneOptions& options, const TuneTarget& target, const TuneServices& services) {
  if (services.compiler == nullptr) QTUNE_THROW(Error, "run_tune: no compiler");
  if (!options.dry_run && !services.backends) QTUNE_THROW(Error, "run_tune: no measuring backend");
  if (!options.dry_run && services.slots < 1) QTUNE_INPUT_ERROR("devices: no GPU to measure on");
  if (target.arch.empty()) QTUNE_INPUT_ERROR("gpu: the target has no NVRTC architecture");
  if (!(options.timeout_s > 0)) QTUNE_INPUT_ERROR("--timeout-ms: must be positive");
  if (options.budget_fraction && !(*options.budget_fraction > 0 && *options.budget_fraction <= 1)) {
    QTUNE_INPUT_ERROR("--budget-fraction: must lie in (0, 1]");
  }
  search::make_strategy(options.strategy, options.strategy_options);  // InputError for an unknown name, before any work
  if (options.space != "curated" && options.space != "full") {
    QTUNE_INPUT_ERROR("--space: expected curated or full, got '" + options.space + "'");
  }
}

db::RunInfo tune_run_info(const TuneOptions& options, const TuneTarget& target, const KernelFamily& family,
                          const std::string& source_hash, const SearchIdentity& identity) {
  db::RunInfo info = tune_run_on(target, options.command_line, options.shard.to_string());
  nlohmann::json notes;
  notes["tune"] = {{"search_key", identity.search_key},
                   {"space_key", identity.space_key},
                   {"exhaustive_complete", identity.exhaustive_complete && !options.dry_run},
                   {"strategy", options.strategy},
                   {"family", family.name()},
                   {"source_hash", source_hash},
                   {"dry_run", options.dry_run},
                   {"problems", options.problems.size()}};
  info.notes = notes.dump();
  if (info.gpu_key().empty()) QTUNE_INPUT_ERROR("gpu: neither a profile nor a device name");
  return info;
}

// What every step after planning works on.
struct TunePlan {
  std::vector<PreparedProblem> prepared;
  std::vector<InstantiationRecord> instantiations;
  std::map<std::string, std::size_t> instantiation_index;

  // The index of an instantiation (config, format, arch), added when new: kernels do not depend on M, N or K.
  std::size_t instantiation_of(const KernelConfig& config, const FormatSpec& format, const std::string& arch) {
    Instantiation instantiation{config, format, arch};
    const std::string key = instantiation.key();
    auto found = instantiation_index.find(key);
    if (found != instantiation_index.end()) return found->second;
    instantiations.push_back({std::move(instantiation), {}, {}});
    instantiation_index[key] = instantiations.size() - 1;
    return instantiations.size() - 1;
  }
};

// Step 1: the problems to work on (a final winner skips one), each problem's space after the static rules, and its
// reference configurations (the heuristic, the table's pick).
TunePlan plan_problems(const TuneOptions& options, const TuneTarget& target, const RestrictedFamily& family,
                       const std::string& source_hash, const SearchIdentity& identity, db::Store& store,
                       TuneReport& report, TuneObserver* observer) {
  const KernelFamily& base_family = family.base();
  TunePlan plan;
  report.reports.resize(options.problems.size());
  const std::vector<db::RunId> searched_by = runs_of_search(store, report.gpu, family.name(), source_hash, identity);
  std::set<std::string> noted_reasons;
  for (std::size_t position = 0; position < options.problems.size(); ++position) {
    const Problem& problem = options.problems[position];
    ProblemReport problem_report;
    problem_report.problem = problem;
    problem_report.problem_id = store.upsert_problem(db_problem(problem));
    if (!options.dry_run && !options.retune &&
        winner_is_final(store, problem_report.problem_id, report.gpu, family.name(), source_hash, identity, searched_by)) {
      problem_report.skipped_final = true;
      if (const auto winner = store.get_winner(problem_report.problem_id, report.gpu)) {
        problem_report.winner_us = winner->median_us;
        problem_report.winner_reason = winner->reason;
        if (const auto config = store.get_config(winner->config)) {
          problem_report.winner = db::to_kernel_config(*config);
        }
      }
      ++report.skipped_final;
      report.reports[position] = problem_report;
      continue;
    }
    PreparedProblem item;
    item.position = position;
    const RestrictedFamily problem_family(base_family, parameter_ranges(options, base_family, problem.m));
    const search::SpaceEnumeration space = search::enumerate_space(problem_family, problem, target.limits);
    problem_report.space_total = space.total;
    problem_report.after_static_rules = space.candidates.size();
    problem_report.pruned_pre_compile = space.removed_by_rule;
    for (const KernelConfig& config : space.candidates) {
      CandidateEntry entry;
      entry.config = config;
      entry.instantiation = plan.instantiation_of(config, problem.format, target.arch);
      item.entries.push_back(std::move(entry));
    }
    const ArchSupport support = family.supports(problem.format, target.limits.sm);
    std::optional<KernelConfig> default_config;
    if (support.supported) {
      try {
        default_config = family.default_config(problem, target.limits);
      } catch (const Error& error) {
        if (observer != nullptr) observer->note(problem_key(problem) + ": no heuristic configuration: " + error.what());
      }
    }
    // The entry of a reference configuration (heuristic, table pick): an enumerated candidate, or one added apart.
    // The table pick is not checked again: the selection already applied production's own rule check.
    const auto reference_entry = [&](const KernelConfig& config, bool check) -> std::optional<std::size_t> {
      auto found = std::find_if(item.entries.begin(), item.entries.end(),
                                [&](const CandidateEntry& entry) { return entry.config == config; });
      if (found != item.entries.end()) return static_cast<std::size_t>(found - item.entries.begin());
      if (check && !base_family.check(config, problem, target.limits).valid) return std::nullopt;
      CandidateEntry entry;
      entry.config = config;
      entry.instantiation = plan.instantiation_of(config, problem.format, target.arch);
      item.entries.push_back(std::move(entry));
      return item.entries.size() - 1;
    };
    if (options.table_selection && support.supported) {
      // A pick of another family is timed when that family is tuned.
      if (const std::optional<KernelConfig> pick = options.table_selection(problem, target.limits);
          pick && pick->family == family.name()) {
        problem_report.table = *pick;
        item.table = reference_entry(*pick, false);
      }
    }
    if (default_config) {
      problem_report.heuristic = *default_config;
      item.heuristic = reference_entry(*default_config, true);
    } else if (!support.supported && observer != nullptr && noted_reasons.insert(support.reason).second) {
      observer->note(support.reason);
    }
    item.report = std::move(problem_report);
    plan.prepared.push_back(std::move(item));
  }
  return plan;
}

// Step 2: every distinct instantiation compiled once, ahead of measuring, and each compile stored.
void compile_instantiations(TunePlan& plan, const KernelFamily& family, const std::string& source_hash,
                            TuneServices& services, db::Store& store, TuneReport& report, TuneObserver* observer) {
  std::vector<Instantiation> requests;
  for (const InstantiationRecord& record : plan.instantiations) requests.push_back(record.instantiation);
  const auto compile_start = std::chrono::steady_clock::now();
  const std::vector<InstantiationResult> compiled =
      services.compiler->compile(family, requests, [&](std::size_t done, std::size_t total) {
        if (observer != nullptr) observer->compile_progress(done, total);
      });
  report.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  if (compiled.size() != plan.instantiations.size()) QTUNE_THROW(Error, "compiler returned a wrong number of results");
  auto transaction = store.transaction();
  for (std::size_t i = 0; i < plan.instantiations.size(); ++i) {
    InstantiationRecord& record = plan.instantiations[i];
    record.result = compiled[i];
    record.config_id = store.upsert_config(config_record(record.instantiation.config, source_hash));
    store.insert_compile(compile_record(report.run, record.config_id, record.instantiation, record.result));
    if (!record.result.ok) {
      ++report.compile_failures;
    } else if (record.result.cache_hit) {
      ++report.cache_hits;
    }
  }
  transaction.commit();
  report.instantiations = plan.instantiations.size();
}

// Step 3: the candidates the compiler's resource report prunes, and both stages' counts stored per problem. Returns
// the evaluations the measuring step expects.
std::size_t prune_compiled(TunePlan& plan, const TuneOptions& options, const TuneTarget& target, const KernelFamily& family,
                           db::Store& store, const TuneReport& report) {
  std::size_t expected_evaluations = 0;
  for (PreparedProblem& item : plan.prepared) {
    for (std::size_t i = 0; i < item.entries.size(); ++i) {
      CandidateEntry& entry = item.entries[i];
      const InstantiationRecord& record = plan.instantiations[entry.instantiation];
      entry.config_id = record.config_id;
      entry.compiled = record.result.ok;
      entry.cache_key = record.result.cache_key;
      // A heuristic (or table pick) outside the enumerated space is measured for comparison but not searched or counted.
      if (i >= item.report.after_static_rules) continue;
      if (!entry.compiled) {
        ++item.report.pruned_post_compile["compile-failed"];
        continue;
      }
      const RuleVerdict verdict =
          search::check_compiled(entry.config, item.report.problem, target.limits,
                                 family.launch_geometry(entry.config, item.report.problem), record.result.resources);
      if (!verdict.valid) {
        ++item.report.pruned_post_compile[verdict.rule];
        continue;
      }
      item.searchable.push_back(i);
    }
    item.report.after_compile = item.searchable.size();
    auto transaction = store.transaction();
    for (const auto& [rule, count] : item.report.pruned_pre_compile) {
      store.set_pruning_count({report.run, item.report.problem_id, db::PruningStage::PreCompile, rule, static_cast<std::int64_t>(count)});
    }
    for (const auto& [rule, count] : item.report.pruned_post_compile) {
      store.set_pruning_count({report.run, item.report.problem_id, db::PruningStage::PostCompile, rule, static_cast<std::int64_t>(count)});
    }
    transaction.commit();
    expected_evaluations +=
        std::min(problem_budget(options, item.searchable.size()).max_evaluations, item.searchable.size()) + (item.heuristic ? 1 : 0) +
        (item.table && item.table != item.heuristic ? 1 : 0);
  }
  return expected_evaluations;
}

// Step 4: one measuring slot per GPU, each taking problems from one queue; every candidate is stored as it is
// measured (TuneObjective). Rethrows the first slot's failure.
void measure_problems(TunePlan& plan, const RunContext& context, TuneServices& services, db::Store& store,
                      TuneObserver* observer, const std::atomic<bool>* stop, std::size_t expected_evaluations,
                      TuneReport& report) {
  Shared shared;
  shared.observer = observer;
  shared.stop = stop;
  if (context.options.strategy == "model") load_prior_pool(store, context.family, context.target, shared);
  std::vector<std::size_t> order(plan.prepared.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (observer != nullptr) observer->measuring_started(plan.prepared.size(), expected_evaluations);
  const int slots = std::max(1, std::min<int>(services.slots, static_cast<int>(std::max<std::size_t>(plan.prepared.size(), 1))));
  auto slot_body = [&](int slot) {
    try {
      const std::unique_ptr<MeasuringBackend> backend = services.backends(slot);
      if (!backend) QTUNE_THROW(Error, "no measuring backend for slot " + std::to_string(slot));
      run_slot(context, shared, plan.prepared, order, *backend);
    } catch (...) {
      std::lock_guard lock(shared.mutex);
      if (!shared.error) shared.error = std::current_exception();
      shared.abort = true;
    }
  };
  const auto measure_start = std::chrono::steady_clock::now();
  if (slots == 1) {
    slot_body(0);
  } else {
    std::vector<std::thread> threads;
    for (int slot = 0; slot < slots; ++slot) threads.emplace_back(slot_body, slot);
    for (std::thread& thread : threads) thread.join();
  }
  report.measure_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - measure_start).count();
  if (shared.error) std::rethrow_exception(shared.error);
}

// Step 5: the problems' reports gathered into the run's, and the run finished as completed or interrupted.
void finish_tune(TunePlan& plan, db::Store& store, const std::atomic<bool>* stop, TuneReport& report) {
  for (PreparedProblem& item : plan.prepared) {
    const ProblemReport& problem_report = item.report;
    report.measured += problem_report.measured;
    report.reused += problem_report.reused;
    report.invalid += problem_report.invalid;
    if (problem_report.winner) ++report.winners;
    if (problem_report.interrupted) report.interrupted = true;
    report.reports[item.position] = problem_report;
  }
  report.interrupted = report.interrupted || (stop != nullptr && stop->load());
  store.finish_run(report.run, report.interrupted ? db::RunStatus::Interrupted : db::RunStatus::Completed);
}

}  // namespace

TuneReport run_tune(const TuneOptions& options, const TuneTarget& target, const fs::path& database, TuneServices& services,
                    TuneObserver* observer, const std::atomic<bool>* stop) {
  check_tune_options(options, target, services);
  const KernelFamily& base_family = find_family(options.family);
  const RestrictedFamily family(base_family, options.parameter_values);  // validates --param before any work
  const std::string source_hash = options.source_hash.empty() ? kernel_source_hash(family) : options.source_hash;
  const SearchIdentity identity = search_identity(options, base_family, target);

  db::Store store = db::Store::open(database);
  const db::RunInfo info = tune_run_info(options, target, family, source_hash, identity);
  TuneReport report;
  report.run = store.insert_run(info);
  report.gpu = info.gpu_key();
  report.problems = options.problems.size();
  try {
    TunePlan plan = plan_problems(options, target, family, source_hash, identity, store, report, observer);
    compile_instantiations(plan, family, source_hash, services, store, report, observer);
    const std::size_t expected_evaluations = prune_compiled(plan, options, target, family, store, report);
    if (options.dry_run) {
      finish_tune(plan, store, nullptr, report);
      return report;
    }
    const RunContext context{options, target, family, database, report.run, report.gpu, source_hash};
    measure_problems(plan, context, services, store, observer, stop, expected_evaluations, report);
    finish_tune(plan, store, stop, report);
  } catch (...) {
    try {
      store.finish_run(report.run, stop != nullptr && stop->load() ? db::RunStatus::Interrupted : db::RunStatus::Failed);
    } catch (...) {
      // The original error matters more than the bookkeeping.
    }
    throw;
  }
  return report;
}

db::RunInfo tune_run_on(const TuneTarget& target, const std::string& command_line, const std::string& shard,
                        const std::string& kind) {
  db::RunInfo info = run_info_of_this_build(kind);
  info.cuda_version = target.cuda_version;
  info.driver_version = target.driver_version;
  info.gpu_name = target.gpu_name;
  info.gpu_uuid = target.gpu_uuid;
  info.gpu_profile = target.gpu_profile;
  info.sm = target.limits.sm;
  info.sm_count = target.limits.sm_count;
  info.sm_clock_mhz = target.sm_clock_mhz;
  info.mem_clock_mhz = target.mem_clock_mhz;
  info.command_line = command_line;
  info.shard = shard;
  return info;
}

}  // namespace qtune::tune

#include "tuner/peers/humming_tune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "search/strategy.hpp"
#include "tuner/peers/peer_runs.hpp"
#include "tuner/tune/records.hpp"

namespace qtune::peers {

FamilyChoice split_families(const std::string& text) {
  FamilyChoice choice;
  if (text == "auto") return {"auto", HummingChoice::IfAvailable};
  std::stringstream stream(text);
  std::string name;
  while (std::getline(stream, name, ',')) {
    if (name == kHummingPeer) {
      choice.humming = HummingChoice::Required;
      continue;
    }
    choice.kernel_families += (choice.kernel_families.empty() ? "" : ",") + name;
  }
  return choice;
}

ProviderId humming_provider(const FormatSpec& format, const std::string& peer) { return {peer, format.to_string()}; }

namespace {

const PeerInfo* humming_info(PeerHost& host, const std::string& name) {
  for (const PeerInfo& peer : host.describe()) {
    if (peer.peer == name) return &peer;
  }
  return nullptr;
}

}  // namespace

bool humming_available(PeerHost& host, std::string* why_not, const std::string& peer) {
  const PeerInfo* info = humming_info(host, peer);
  if (info != nullptr && info->available) return true;
  if (why_not != nullptr) *why_not = info == nullptr ? "the peer worker knows no humming adapter" : info->problem + "; " + info->install;
  return false;
}

std::vector<Problem> humming_problems(PeerHost& host, const std::vector<Problem>& problems,
                                      std::vector<std::string>* left_out, const std::string& peer) {
  const PeerInfo* info = humming_info(host, peer);
  std::vector<Problem> kept;
  std::set<std::string> refused;
  for (const Problem& problem : problems) {
    const std::string provider = humming_provider(problem.format, peer).text();
    const bool offered = info != nullptr && info->available &&
                         std::find(info->providers.begin(), info->providers.end(), provider) != info->providers.end();
    if (offered && !problem.has_bias) {
      kept.push_back(problem);
    } else {
      refused.insert(problem.format.to_string() + (problem.has_bias ? " with bias" : ""));
    }
  }
  if (left_out != nullptr) left_out->assign(refused.begin(), refused.end());
  return kept;
}

nlohmann::json humming_job_config(const KernelConfig& config) {
  return {{"tuning_config", search::HummingSpace::tuning_config(config)}};
}

std::optional<KernelConfig> humming_heuristic(const nlohmann::json& ran_config, std::string* why_not) {
  const auto found = ran_config.find("heuristic");
  if (found == ran_config.end() || !found->is_object()) {
    if (why_not != nullptr) *why_not = "the Humming peer did not say which configuration its heuristic ran";
    return std::nullopt;
  }
  try {
    return search::HummingSpace::from_tuning_config(*found);
  } catch (const InputError& error) {
    if (why_not != nullptr) *why_not = std::string("Humming's pick is no point of qtune's space: ") + error.what();
    return std::nullopt;
  }
}

std::vector<KernelConfig> humming_candidates(const Problem& problem, const ArchLimits& limits, bool full_space,
                                             const std::optional<KernelConfig>& heuristic,
                                             search::SpaceEnumeration* enumeration) {
  search::SpaceEnumeration space = search::HummingSpace::enumerate(
      problem, limits, full_space ? search::HummingSpaceKind::Full : search::HummingSpaceKind::Curated);
  std::vector<KernelConfig> candidates;
  for (const KernelConfig& config : space.candidates) {
    if (heuristic && config == *heuristic) continue;
    candidates.push_back(config);
  }
  if (heuristic) {
    const auto differing = [&](const KernelConfig& config) {
      std::size_t count = 0;
      for (const auto& [name, value] : config.params) {
        const auto other = heuristic->params.find(name);
        count += other == heuristic->params.end() || other->second != value ? 1 : 0;
      }
      return count;
    };
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](const KernelConfig& a, const KernelConfig& b) { return differing(a) < differing(b); });
  }
  if (enumeration != nullptr) *enumeration = std::move(space);
  return candidates;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// An earlier result of the same (problem, config) on this GPU: a measurement of the same Humming version.
struct Stored {
  bool valid = false;
  double time_us = 0;
};

std::optional<Stored> stored_result(db::Store& store, db::ProblemId problem, db::ConfigId config, const std::string& gpu,
                                    db::L2Mode l2_mode) {
  db::RowFilter filter;
  filter.problem = problem;
  filter.config = config;
  filter.gpu = gpu;
  bool failed = false;
  bool passed = false;
  for (const db::VerificationRecord& check : store.list_verifications(filter)) {
    (check.status == db::VerificationStatus::Passed ? passed : failed) = true;
  }
  if (failed) return Stored{false, 0};
  if (!passed) return std::nullopt;
  std::optional<double> best;
  for (const db::MeasurementRecord& measurement : store.list_measurements(filter)) {
    if (measurement.status != db::MeasurementStatus::Ok || !measurement.stats || measurement.l2_mode != l2_mode) continue;
    if (measurement.phase.size() > 6 && measurement.phase.compare(measurement.phase.size() - 6, 6, "-short") == 0) continue;
    best = best ? std::min(*best, measurement.stats->median_us) : measurement.stats->median_us;
  }
  if (!best) return std::nullopt;
  return Stored{true, *best};
}

db::RunInfo humming_run_info(const HummingTuneOptions& options, const tune::TuneTarget& target,
                             const std::string& version) {
  db::RunInfo info = tune::tune_run_on(target, options.tune.command_line, options.tune.shard.to_string());
  nlohmann::json notes;
  notes["tune"] = {{"strategy", options.tune.strategy},
                   {"family", std::string(search::kHummingFamily)},
                   {"space", options.tune.space},
                   {"peer_version", version},
                   {"source_hash", "humming " + version},
                   {"dry_run", false},
                   {"problems", options.tune.problems.size()}};
  info.notes = notes.dump();
  if (info.gpu_key().empty()) QTUNE_INPUT_ERROR("gpu: neither a profile nor a device name");
  return info;
}

// What one problem's search works with.
struct ProblemContext {
  const HummingTuneOptions& options;
  const tune::TuneTarget& target;
  PeerHost& host;
  db::Store& store;
  db::RunId run{};
  std::string gpu;
  std::string source_hash;
  ProviderId provider;
  db::ProblemId problem_id{};
  tune::ProblemReport& report;
  tune::TuneObserver* observer;
  const std::atomic<bool>* stop;
  // Valid full-fidelity results: config id -> (config, median).
  std::map<std::int64_t, std::pair<KernelConfig, double>> valid;
  // What was built ahead: build_key -> outcome (a refused build is the candidate's failure; it is not run).
  const std::map<std::string, PeerCompileResult>* built = nullptr;

  bool stopping() const { return stop != nullptr && stop->load(); }
};

PeerRunOptions run_options(const HummingTuneOptions& options, search::Fidelity fidelity, bool built_ahead) {
  PeerRunOptions run;
  run.measure = fidelity == search::Fidelity::Full ? options.measure.full_fidelity : options.measure.short_fidelity;
  run.timeout_s = humming_run_timeout_s(options, built_ahead);
  return run;
}

db::L2Mode l2_mode_of(const HummingTuneOptions& options) {
  return options.measure.full_fidelity.warm_l2 ? db::L2Mode::Warm : db::L2Mode::Cold;
}

// Runs `config` (nullopt: Humming's own pick, which `ran` receives as a point of the space) through the peer, stores
// the outcome in its own transaction and tells the observer; a Full result the same Humming version stored on this GPU
// before is reused.
search::Evaluation evaluate(ProblemContext& context, std::optional<KernelConfig> config, const std::string& phase,
                            search::Fidelity fidelity, std::optional<KernelConfig>* ran = nullptr) {
  if (context.stopping()) return {};
  const bool full = fidelity == search::Fidelity::Full;
  const HummingTuneOptions& options = context.options;
  tune::EvaluationEvent event;
  event.problem = &context.report.problem;
  event.phase = phase;
  const auto tell = [&] {
    if (context.observer != nullptr) context.observer->evaluated(event);
  };
  const auto remember = [&](db::ConfigId config_id, const search::Evaluation& evaluation) {
    if (full && evaluation.valid) context.valid[db::id_value(config_id)] = {*config, evaluation.time_us};
  };
  if (config && full && !options.tune.retune) {
    const db::ConfigId config_id = context.store.upsert_config(tune::config_record(*config, context.source_hash));
    if (const auto stored = stored_result(context.store, context.problem_id, config_id, context.gpu, l2_mode_of(options))) {
      const search::Evaluation evaluation{stored->valid,
                                          stored->valid ? stored->time_us : std::numeric_limits<double>::infinity()};
      ++context.report.reused;
      if (!stored->valid) ++context.report.invalid;
      remember(config_id, evaluation);
      event.config = *config;
      event.reused = true;
      event.valid = evaluation.valid;
      event.time_us = stored->time_us;
      event.outcome = "stored";
      tell();
      if (ran != nullptr) *ran = config;
      return evaluation;
    }
  }

  const Problem& problem = context.report.problem;
  const PeerProblem job{problem.m, problem.n, problem.k, options.measure.seed, 0};
  const nlohmann::json job_config = config ? humming_job_config(*config) : nlohmann::json::object();
  const PeerCompileResult* build = nullptr;
  if (config && context.built != nullptr) {
    const auto found = context.built->find(build_key(context.provider, problem, job_config));
    if (found != context.built->end()) build = &found->second;
  }
  PeerResult result;
  if (build != nullptr && build->refused) {
    // Humming's compiler refused the kernel when it was built ahead: the candidate's failure, as a run would say it.
    result.outcome = PeerOutcome::Error;
    result.provider = context.provider.text();
    result.config = job_config;
    result.error = build->error;
    result.error_type = build->error_type;
  } else {
    result = context.host.run(context.provider, job, job_config, run_options(options, fidelity, build != nullptr && build->compiled));
    ++context.report.measured;
  }
  if (result.error_type == "NoGpuError") QTUNE_THROW(NoGpuError, context.provider.text() + ": " + result.error);
  if (!config) {
    std::string why;
    config = humming_heuristic(result.config, &why);
    if (!config) {
      // Nothing to store it under: a config row is a point of the space.
      if (context.observer != nullptr) context.observer->note(context.provider.text() + " " + problem.to_string() + ": " + why);
      return {};
    }
  }
  if (ran != nullptr) *ran = config;
  const providers::CandidateResult candidate = candidate_result(result);
  const search::Evaluation evaluation{candidate.outcome == providers::CandidateOutcome::Measured,
                                      candidate.outcome == providers::CandidateOutcome::Measured
                                          ? candidate.measurement.median_us
                                          : std::numeric_limits<double>::infinity()};
  {
    auto transaction = context.store.transaction();
    const db::ConfigId config_id = context.store.upsert_config(tune::config_record(*config, context.source_hash));
    tune::CandidateRecords records = tune::candidate_records(candidate, context.run, context.problem_id, config_id, phase);
    context.store.insert_verification(records.verification);
    if (records.measurement) {
      if (records.measurement->status != db::MeasurementStatus::Ok) records.measurement->l2_mode = l2_mode_of(options);
      context.store.insert_measurement(*records.measurement);
    }
    transaction.commit();
    remember(config_id, evaluation);
  }
  if (!evaluation.valid) ++context.report.invalid;
  if (!evaluation.valid && phase == "heuristic") {
    const std::string why = candidate.message.empty() ? candidate.verification_summary : candidate.message;
    context.report.heuristic_failure = providers::to_string(candidate.outcome) + (why.empty() ? "" : ": " + why.substr(0, 160));
  }
  event.config = *config;
  event.valid = evaluation.valid;
  event.time_us = evaluation.valid ? evaluation.time_us : 0;
  event.outcome = providers::to_string(candidate.outcome);
  tell();
  return evaluation;
}

// The strategy's view: candidates by index.
class HummingObjective final : public search::Objective {
 public:
  HummingObjective(ProblemContext& context, const std::vector<KernelConfig>& candidates, std::string strategy)
      : context_(context), candidates_(candidates), strategy_(std::move(strategy)) {}
  search::Evaluation evaluate(const search::Candidate& candidate, search::Fidelity fidelity) override {
    const std::string phase = fidelity == search::Fidelity::Full ? strategy_ : strategy_ + "-short";
    return peers::evaluate(context_, candidates_.at(candidate.id), phase, fidelity);
  }

 private:
  ProblemContext& context_;
  const std::vector<KernelConfig>& candidates_;
  std::string strategy_;
};

// The winner of a problem: the fastest verified Humming configuration, unless another family's stored winner is
// faster (the winner of a cell is the fastest kernel of any provider).
void decide_winner(ProblemContext& context, tune::TuneReport& totals) {
  tune::ProblemReport& report = context.report;
  if (context.valid.empty()) return;
  const auto fastest = std::min_element(context.valid.begin(), context.valid.end(), [](const auto& a, const auto& b) {
    return a.second.second < b.second.second;
  });
  const db::ConfigId chosen{fastest->first};
  const double chosen_us = fastest->second.second;
  if (const auto previous = context.store.get_winner(context.problem_id, context.gpu);
      previous && previous->config != chosen && previous->median_us <= chosen_us) {
    // Another family's winner, or an earlier Humming run's configuration this search did not measure again.
    const auto config = context.store.get_config(previous->config);
    try {
      report.winner = config ? std::optional<KernelConfig>(db::to_kernel_config(*config)) : std::nullopt;
    } catch (const std::exception&) {
      report.winner.reset();  // parameters this build no longer knows
    }
    report.winner_us = previous->median_us;
    report.winner_reason = "kept: the " + (config ? config->family : std::string("stored")) +
                           " winner is faster than humming's " + fixed(chosen_us, 2) + " us";
    return;
  }
  context.store.set_winner(db::Winner{context.run, context.problem_id, chosen, chosen_us, "fastest of humming's measured"});
  report.winner = fastest->second.first;
  report.winner_us = chosen_us;
  report.winner_reason = "fastest of humming's measured";
  ++totals.winners;
}

// Builds the plan's kernels with options.compile_workers peer workers at once, telling the observer.
std::map<std::string, PeerCompileResult> build_ahead(const HummingTuneOptions& options, const tune::TuneTarget& target,
                                                     PeerHost& host, db::Store& store, const std::string& source_hash,
                                                     tune::TuneObserver* observer, const std::atomic<bool>* stop) {
  const HummingBuildPlan plan = plan_humming_builds(options, target, host, store, source_hash);
  if (observer != nullptr) {
    for (const std::string& note : plan.notes) observer->note(note);
  }
  std::map<std::string, PeerCompileResult> built;
  if (plan.jobs.empty()) return built;
  if (observer != nullptr) {
    observer->compile_seconds_each(kHummingCompileSeconds);
    observer->compile_progress(0, plan.jobs.size());
  }
  PeerCompileOptions compile;
  compile.workers = options.compile_workers;
  compile.timeout_s = std::max(options.tune.timeout_s, kHummingMinTimeoutS);
  std::size_t done = 0;
  std::size_t failed = 0;
  std::string first_failure;
  const std::vector<PeerCompileResult> results = compile_in_parallel(
      host.environment(), plan.jobs, compile,
      [&](std::size_t /*index*/, const PeerCompileResult& result) {
        if (!result.compiled && !result.refused && failed++ == 0) first_failure = result.error;
        if (observer != nullptr) observer->compile_progress(++done, plan.jobs.size());
      },
      stop);
  for (const auto& [key, index] : plan.index) built[key] = results[index];
  if (failed > 0 && observer != nullptr && (stop == nullptr || !stop->load())) {
    // Not the candidates' failures: their runs build them, as without building ahead.
    observer->note("humming: " + std::to_string(failed) + " of " + std::to_string(plan.jobs.size()) +
                   " kernels were not built ahead (first: " + first_failure + "); their runs build them");
  }
  return built;
}

}  // namespace

double humming_run_timeout_s(const HummingTuneOptions& options, bool built_ahead) {
  return std::max(options.tune.timeout_s, built_ahead ? kHummingBuiltTimeoutS : kHummingMinTimeoutS);
}

std::string build_key(const ProviderId& provider, const Problem& problem, const nlohmann::json& job_config) {
  return provider.text() + " " + std::to_string(problem.n) + "," + std::to_string(problem.k) + " " + job_config.dump();
}

search::Budget humming_budget(const HummingTuneOptions& options, std::size_t candidates) {
  search::Budget budget = tune::problem_budget(options.tune, candidates);
  const bool capped = budget.max_evaluations != search::Budget{}.max_evaluations || options.tune.budget_fraction;
  if (!capped) budget.max_evaluations = options.default_evaluations;
  return budget;
}

HummingBuildPlan plan_humming_builds(const HummingTuneOptions& options, const tune::TuneTarget& target, PeerHost& host,
                                     db::Store& store, const std::string& source_hash) {
  HummingBuildPlan plan;
  const auto add = [&](const ProviderId& provider, const Problem& problem, const nlohmann::json& job_config) {
    const std::string key = build_key(provider, problem, job_config);
    if (plan.index.count(key) != 0) return;
    plan.index[key] = plan.jobs.size();
    plan.jobs.push_back({provider, PeerProblem{problem.m, problem.n, problem.k, options.measure.seed, 0}, job_config});
  };
  const auto entry_ok = [](const nlohmann::json& entry) {
    return entry.is_array() && entry.size() == 3 && entry[0].is_number() && entry[1].is_number() && entry[2].is_object();
  };
  std::map<std::string, nlohmann::json> lists;  // "provider N,K" -> Humming's rules' list for the layer
  for (const Problem& problem : options.tune.problems) {
    const ProviderId provider = humming_provider(problem.format, options.peer);
    const std::string layer = provider.text() + " N=" + std::to_string(problem.n) + " K=" + std::to_string(problem.k);
    auto list = lists.find(layer);
    if (list == lists.end()) {
      nlohmann::json configs = nlohmann::json::array();
      try {
        configs = host.heuristic_configs(provider, {problem.m, problem.n, problem.k, options.measure.seed, 0});
      } catch (const Error& error) {
        plan.notes.push_back(layer + ": Humming's rules were not listed ahead (" + std::string(error.what()) +
                             "); its pick is built when it first runs");
      }
      list = lists.emplace(layer, configs).first;
      for (const nlohmann::json& entry : configs) {
        if (entry_ok(entry)) add(provider, problem, {{"tuning_config", entry[2]}});
      }
    }
    // Humming's pick for this M: the entry with m_lo < M <= m_hi.
    std::optional<KernelConfig> pick;
    for (const nlohmann::json& entry : list->second) {
      if (entry_ok(entry) && entry[0].get<double>() < static_cast<double>(problem.m) &&
          static_cast<double>(problem.m) <= entry[1].get<double>()) {
        pick = humming_heuristic({{"heuristic", entry[2]}});
        break;
      }
    }
    const std::vector<KernelConfig> candidates =
        humming_candidates(problem, target.limits, options.tune.space == "full", pick);
    const std::size_t planned = std::min(candidates.size(), humming_budget(options, candidates.size()).max_evaluations);
    const std::optional<db::ProblemId> problem_id =
        store.find_problem({problem.format.to_string(), problem.m, problem.n, problem.k});
    for (std::size_t i = 0; i < planned; ++i) {
      if (problem_id && !options.tune.retune) {
        const std::optional<db::ConfigId> config_id = store.find_config(tune::config_record(candidates[i], source_hash));
        if (config_id && stored_result(store, *problem_id, *config_id, target.gpu_key(), l2_mode_of(options))) continue;
      }
      add(provider, problem, humming_job_config(candidates[i]));
    }
  }
  return plan;
}

tune::TuneReport run_humming_tune(const HummingTuneOptions& options, const tune::TuneTarget& target,
                                  const std::filesystem::path& database, PeerHost& host, tune::TuneObserver* observer,
                                  const std::atomic<bool>* stop) {
  std::string why_not;
  if (!humming_available(host, &why_not, options.peer)) QTUNE_INPUT_ERROR("--family humming: " + why_not);
  const std::string version = humming_info(host, options.peer)->version;
  search::make_strategy(options.tune.strategy, options.tune.strategy_options);  // an unknown name fails before any write
  db::Store store = db::Store::open(database);
  tune::TuneReport totals;
  totals.gpu = target.gpu_key();
  totals.problems = options.tune.problems.size();
  totals.run = store.insert_run(humming_run_info(options, target, version));
  const Clock::time_point started = Clock::now();

  const auto budget_of = [&](std::size_t candidates) { return humming_budget(options, candidates); };
  std::map<std::string, PeerCompileResult> built;
  if (options.build_ahead) built = build_ahead(options, target, host, store, "humming " + version, observer, stop);
  if (observer != nullptr) {
    // The expected evaluations per problem: the cap, else the budget's share of a curated space's few hundred.
    constexpr std::size_t kCuratedSize = 300;
    const std::size_t per_problem = std::min(budget_of(kCuratedSize).max_evaluations, kCuratedSize);
    observer->measuring_started(options.tune.problems.size(), options.tune.problems.size() * (per_problem + 1));
  }

  for (const Problem& problem : options.tune.problems) {
    if (stop != nullptr && stop->load()) {
      totals.interrupted = true;
      break;
    }
    const Clock::time_point problem_start = Clock::now();
    tune::ProblemReport report;
    report.problem = problem;
    report.problem_id = store.upsert_problem({problem.format.to_string(), problem.m, problem.n, problem.k});
    if (observer != nullptr) observer->problem_started(report);
    ProblemContext context{options, target, host, store, totals.run, target.gpu_key(), "humming " + version,
                           humming_provider(problem.format, options.peer), report.problem_id, report, observer, stop, {},
                           &built};

    std::optional<KernelConfig> heuristic;
    const search::Evaluation picked = evaluate(context, std::nullopt, "heuristic", search::Fidelity::Full, &heuristic);
    report.heuristic = heuristic;
    if (picked.valid) report.heuristic_us = picked.time_us;

    search::SpaceEnumeration space;
    const std::vector<KernelConfig> candidates =
        humming_candidates(problem, target.limits, options.tune.space == "full", heuristic, &space);
    report.space_total = space.total;
    report.after_static_rules = space.candidates.size();
    report.after_compile = candidates.size();
    report.pruned_pre_compile = space.removed_by_rule;
    for (const auto& [rule, count] : space.removed_by_rule) {
      store.set_pruning_count({totals.run, report.problem_id, db::PruningStage::PreCompile, rule, static_cast<std::int64_t>(count)});
    }
    std::vector<search::Candidate> searched;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      searched.push_back({i, search::HummingSpace::cost_features(candidates[i], problem, target.limits)});
    }
    const auto strategy = search::make_strategy(options.tune.strategy, options.tune.strategy_options);
    HummingObjective objective(context, candidates, strategy->name());
    const search::SearchOutcome outcome = strategy->run(searched, objective, budget_of(candidates.size()));
    report.evaluations = outcome.history.size();
    decide_winner(context, totals);
    report.interrupted = stop != nullptr && stop->load();
    report.seconds = seconds_since(problem_start);
    totals.measured += report.measured;
    totals.reused += report.reused;
    totals.invalid += report.invalid;
    if (observer != nullptr) observer->problem_finished(report);
    totals.reports.push_back(std::move(report));
    if (totals.reports.back().interrupted) {
      totals.interrupted = true;
      break;
    }
  }
  totals.measure_seconds = seconds_since(started);
  store.finish_run(totals.run, totals.interrupted ? db::RunStatus::Interrupted : db::RunStatus::Completed);
  return totals;
}

}  // namespace qtune::peers

#include "tuner/tune/search_eval.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "search/gpu_profile.hpp"
#include "search/space.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/tuner.hpp"

namespace qtune::tune {

namespace {


double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

struct StoredCandidate {
  db::ConfigId config_id{};
  KernelConfig config;
  bool passed = false;
  bool failed = false;
  std::optional<double> median_us;
  std::vector<double> samples_us;
  std::vector<double> features;
  bool valid() const { return passed && !failed && median_us.has_value(); }
};

struct StoredProblem {
  ReplayProblem info;
  std::vector<StoredCandidate> candidates;  // by config id
};

// Answers from the store: Full is the stored median, Short the median of a random subset of the raw samples.
class ReplayObjective final : public search::Objective {
 public:
  ReplayObjective(const StoredProblem& problem, std::size_t short_samples, std::uint64_t seed)
      : problem_(problem), short_samples_(short_samples), random_(seed) {}
  search::Evaluation evaluate(const search::Candidate& candidate, search::Fidelity fidelity) override {
    const StoredCandidate& stored = problem_.candidates.at(candidate.id);
    if (!stored.valid()) return {};
    if (fidelity == search::Fidelity::Full || stored.samples_us.size() <= short_samples_) return {true, *stored.median_us};
    std::vector<double> subset;
    std::uniform_int_distribution<size_t> pick(0, stored.samples_us.size() - 1);
    for (size_t i = 0; i < short_samples_; ++i) subset.push_back(stored.samples_us[pick(random_)]);
    return {true, median_of(subset)};
  }

 private:
  const StoredProblem& problem_;
  std::size_t short_samples_;
  std::mt19937_64 random_;
};

ArchLimits limits_for_gpu(const std::string& gpu, const std::vector<db::RunRecord>& runs) {
  try {
    const std::vector<search::GpuProfile> profiles = search::load_gpu_profiles();
    if (const search::GpuProfile* profile = search::find_gpu_profile(profiles, gpu)) return limits_of_profile(*profile);
  } catch (const InputError&) {
    // No configs directory: fall back to what the runs recorded.
  }
  ArchLimits limits;
  for (const db::RunRecord& run : runs) {
    if (run.gpu_key() != gpu || run.sm == 0) continue;
    try {
      limits = ArchLimits::for_sm(run.sm);
    } catch (const InputError&) {
      limits.sm = run.sm;
    }
    if (run.sm_count > 0) limits.sm_count = run.sm_count;
    return limits;
  }
  return ArchLimits::for_sm(90);
}

}  // namespace

SearchEvalReport run_search_eval(db::Store& store, const SearchEvalOptions& options) {
  if (!(options.budget_fraction > 0 && options.budget_fraction <= 1)) {
    QTUNE_INPUT_ERROR("--budget-fraction: must be in (0, 1], got " + std::to_string(options.budget_fraction));
  }
  if (!(options.tolerance >= 0)) QTUNE_INPUT_ERROR("--tolerance: must not be negative");
  if (options.repeats < 1) QTUNE_INPUT_ERROR("--repeats: must be at least 1");
  if (options.strategies.empty()) QTUNE_INPUT_ERROR("--strategy: no strategy given");
  for (const std::string& name : options.strategies) search::make_strategy(name, options.strategy_options);
  const KernelFamily& family = find_family(options.family);

  std::map<db::ProblemId, db::ProblemRecord> problem_records;
  for (const db::ProblemRecord& record : store.list_problems()) problem_records[record.id] = record;
  const std::map<db::ConfigId, KernelConfig> configs = db::kernel_configs_of_family(store, family.name());
  const std::vector<db::RunRecord> runs = store.list_runs();
  std::set<std::string> gpus;
  for (const db::RunRecord& run : runs) {
    if (!run.gpu_key().empty() && (!options.gpu || run.gpu_key() == *options.gpu)) gpus.insert(run.gpu_key());
  }

  // Every stored candidate of every (problem, GPU), in config id order.
  std::vector<StoredProblem> stored_problems;
  for (const std::string& gpu : gpus) {
    const ArchLimits limits = limits_for_gpu(gpu, runs);
    std::map<db::ProblemId, std::map<db::ConfigId, StoredCandidate>> by_problem;
    for (const db::VerificationRecord& verification : store.list_verifications(db::RowFilter{.gpu = gpu})) {
      if (!configs.count(verification.config)) continue;
      StoredCandidate& candidate = by_problem[verification.problem][verification.config];
      (verification.status == db::VerificationStatus::Passed ? candidate.passed : candidate.failed) = true;
    }
    for (const db::MeasurementRecord& measurement : store.list_measurements(db::RowFilter{.gpu = gpu})) {
      if (!configs.count(measurement.config)) continue;
      const std::string& phase = measurement.phase;
      if (phase.size() >= 6 && phase.compare(phase.size() - 6, 6, "-short") == 0) continue;
      StoredCandidate& candidate = by_problem[measurement.problem][measurement.config];
      if (measurement.status != db::MeasurementStatus::Ok || !measurement.stats) {
        candidate.failed = true;
        continue;
      }
      candidate.median_us = measurement.stats->median_us;  // the latest measurement wins (records come in id order)
      candidate.samples_us = measurement.samples_us;
    }
    for (auto& [problem_id, candidates] : by_problem) {
      const auto record = problem_records.find(problem_id);
      if (record == problem_records.end()) continue;
      StoredProblem stored;
      stored.info.problem_id = problem_id;
      stored.info.gpu = gpu;
      try {
        stored.info.problem = Problem{FormatSpec::parse(record->second.format), record->second.m, record->second.n,
                                      record->second.k, false};
      } catch (const InputError&) {
        continue;
      }
      stored.info.optimum_us = std::numeric_limits<double>::infinity();
      for (auto& [config_id, candidate] : candidates) {
        candidate.config_id = config_id;
        candidate.config = configs.at(config_id);
        try {
          candidate.features = search::cost_features(family, candidate.config, stored.info.problem, limits);
        } catch (const Error&) {
          continue;
        }
        if (candidate.valid()) {
          ++stored.info.valid_candidates;
          if (*candidate.median_us < stored.info.optimum_us) {
            stored.info.optimum_us = *candidate.median_us;
            stored.info.optimum_config = candidate.config.to_string();
          }
        }
        stored.candidates.push_back(std::move(candidate));
      }
      stored.info.candidates = stored.candidates.size();
      if (stored.info.valid_candidates < std::max<std::size_t>(options.min_candidates, 1)) continue;
      stored.info.budget = std::max<std::size_t>(
          1, static_cast<std::size_t>(std::ceil(options.budget_fraction * static_cast<double>(stored.info.candidates) - 1e-9)));
      stored_problems.push_back(std::move(stored));
    }
  }
  if (stored_problems.empty()) {
    QTUNE_INPUT_ERROR("--db: no (problem, GPU) with at least " + std::to_string(options.min_candidates) +
                      " verified, measured candidates of the " + family.name() + " family to replay" +
                      (options.gpu ? " on " + *options.gpu : std::string{}));
  }

  SearchEvalReport report;
  for (const StoredProblem& stored : stored_problems) report.problems.push_back(stored.info);

  for (const std::string& name : options.strategies) {
    StrategySummary summary;
    summary.strategy = name;
    std::vector<double> regrets;
    double evaluations = 0;
    double fractions = 0;
    for (std::size_t p = 0; p < stored_problems.size(); ++p) {
      const StoredProblem& stored = stored_problems[p];
      std::vector<search::Candidate> candidates;
      for (std::size_t i = 0; i < stored.candidates.size(); ++i) candidates.push_back({i, stored.candidates[i].features});
      for (int repeat = 0; repeat < options.repeats; ++repeat) {
        const std::uint64_t seed = (options.seed + 1000003ULL * static_cast<std::uint64_t>(repeat)) ^
                                   fnv1a(problem_key(stored.info.problem) + "|" + stored.info.gpu);
        search::StrategyOptions strategy_options = options.strategy_options;
        strategy_options.seed = seed;
        if (name == "model") {
          // Leave one problem out: the prior never contains the problem being replayed (on any GPU).
          for (const StoredProblem& other : stored_problems) {
            if (other.info.problem_id == stored.info.problem_id) continue;
            for (const StoredCandidate& candidate : other.candidates) {
              if (candidate.valid()) strategy_options.prior.push_back({candidate.features, *candidate.median_us});
            }
          }
          if (strategy_options.prior.size() > options.prior_limit) {
            std::mt19937_64 random(seed);
            std::shuffle(strategy_options.prior.begin(), strategy_options.prior.end(), random);
            strategy_options.prior.resize(options.prior_limit);
          }
        }
        const std::unique_ptr<search::Strategy> strategy = search::make_strategy(name, strategy_options);
        ReplayObjective objective(stored, options.short_samples, seed ^ 0x9e3779b97f4a7c15ULL);
        search::Budget budget;
        budget.max_evaluations = stored.info.budget;
        const search::SearchOutcome outcome = strategy->run(candidates, objective, budget);

        ReplayResult result;
        result.strategy = name;
        result.problem = p;
        result.repeat = repeat;
        result.evaluations = outcome.history.size();
        result.best_us = outcome.best_time_us;
        const double limit = stored.info.optimum_us * (1 + options.tolerance);
        if (outcome.best_id) {
          result.regret = outcome.best_time_us / stored.info.optimum_us - 1;
          result.within_tolerance = outcome.best_time_us <= limit;
          regrets.push_back(result.regret);
        } else {
          ++summary.nothing_found;
        }
        const std::vector<double> best = outcome.best_after_each_evaluation();
        for (std::size_t i = 0; i < best.size(); ++i) {
          if (best[i] <= limit) {
            result.evaluations_to_tolerance = i + 1;
            break;
          }
        }
        ++summary.replays;
        if (result.within_tolerance) ++summary.within_tolerance;
        evaluations += static_cast<double>(result.evaluations);
        fractions += static_cast<double>(result.evaluations) / static_cast<double>(stored.info.candidates);
        report.results.push_back(result);
      }
    }
    summary.fraction_within = static_cast<double>(summary.within_tolerance) / static_cast<double>(summary.replays);
    summary.mean_evaluations = evaluations / static_cast<double>(summary.replays);
    summary.mean_budget_fraction = fractions / static_cast<double>(summary.replays);
    if (!regrets.empty()) {
      double sum = 0;
      for (double regret : regrets) sum += regret;
      summary.mean_regret = sum / static_cast<double>(regrets.size());
      summary.median_regret = median_of(regrets);
      summary.max_regret = *std::max_element(regrets.begin(), regrets.end());
    }
    report.summaries.push_back(summary);
  }
  return report;
}

}  // namespace qtune::tune

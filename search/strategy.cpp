#include "search/strategy.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::search {

std::vector<double> SearchOutcome::best_after_each_evaluation() const {
  std::vector<double> best;
  best.reserve(history.size());
  double running = std::numeric_limits<double>::infinity();
  for (const auto& record : history) {
    if (record.fidelity == Fidelity::Full && record.result.valid) running = std::min(running, record.result.time_us);
    best.push_back(running);
  }
  return best;
}

namespace {

using Clock = std::chrono::steady_clock;

// 0 .. count - 1 in the order a generator seeded with `seed` shuffles them to.
std::vector<size_t> shuffled_indices(size_t count, uint64_t seed) {
  std::vector<size_t> indices(count);
  std::iota(indices.begin(), indices.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(indices.begin(), indices.end(), rng);
  return indices;
}

// Wraps an objective with the budget and the bookkeeping every strategy needs.
class BudgetedRun {
 public:
  BudgetedRun(Objective& objective, const Budget& budget) : objective_(objective), budget_(budget), start_(Clock::now()) {}

  bool exhausted() const {
    if (outcome_.history.size() >= budget_.max_evaluations) return true;
    return std::chrono::duration<double>(Clock::now() - start_).count() >= budget_.max_seconds;
  }

  // Evaluates unless the budget is spent; returns nullopt when it is.
  std::optional<Evaluation> evaluate(const Candidate& candidate, Fidelity fidelity) {
    if (exhausted()) {
      outcome_.budget_exhausted = true;
      return std::nullopt;
    }
    Evaluation result = objective_.evaluate(candidate, fidelity);
    outcome_.history.push_back({candidate.id, fidelity, result});
    if (fidelity == Fidelity::Full && result.valid && result.time_us < outcome_.best_time_us) {
      outcome_.best_time_us = result.time_us;
      outcome_.best_id = candidate.id;
    }
    return result;
  }

  SearchOutcome finish() { return std::move(outcome_); }

 private:
  Objective& objective_;
  Budget budget_;
  Clock::time_point start_;
  SearchOutcome outcome_;
};

class ExhaustiveStrategy : public Strategy {
 public:
  std::string name() const override { return "exhaustive"; }
  SearchOutcome run(std::span<const Candidate> candidates, Objective& objective, const Budget& budget) override {
    BudgetedRun run(objective, budget);
    for (const auto& candidate : candidates) {
      if (!run.evaluate(candidate, Fidelity::Full)) break;
    }
    return run.finish();
  }
};

class RandomStrategy : public Strategy {
 public:
  explicit RandomStrategy(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "random"; }
  SearchOutcome run(std::span<const Candidate> candidates, Objective& objective, const Budget& budget) override {
    const std::vector<size_t> order = shuffled_indices(candidates.size(), seed_);
    BudgetedRun run(objective, budget);
    for (size_t index : order) {
      if (!run.evaluate(candidates[index], Fidelity::Full)) break;
    }
    return run.finish();
  }

 private:
  uint64_t seed_;
};

// Successive halving: a short measurement of every candidate (in random order), keep the best 1/eta, repeat;
// the last round's survivors get full measurements. Short rounds stop early if the budget would not leave
// room for the final full measurements.
class HalvingStrategy : public Strategy {
 public:
  HalvingStrategy(uint64_t seed, size_t eta) : seed_(seed), eta_(std::max<size_t>(eta, 2)) {}
  std::string name() const override { return "halving"; }
  SearchOutcome run(std::span<const Candidate> candidates, Objective& objective, const Budget& budget) override {
    std::vector<size_t> alive = shuffled_indices(candidates.size(), seed_);
    BudgetedRun run(objective, budget);
    const size_t final_round = std::max<size_t>(1, eta_);
    size_t remaining_budget = budget.max_evaluations;
    // With a tight evaluation budget, only sample as many candidates as the rounds can afford.
    if (remaining_budget != std::numeric_limits<size_t>::max() && alive.size() > 0) {
      // Rounds cost n + n/eta + ... + final <= n * eta/(eta-1) + final.
      double affordable = (static_cast<double>(remaining_budget) - final_round) * (eta_ - 1.0) / eta_;
      size_t first_round = static_cast<size_t>(std::max(affordable, static_cast<double>(final_round)));
      if (first_round < alive.size()) alive.resize(first_round);
    }
    while (alive.size() > final_round) {
      std::vector<std::pair<double, size_t>> scored;
      for (size_t index : alive) {
        auto result = run.evaluate(candidates[index], Fidelity::Short);
        if (!result) break;
        if (result->valid) scored.emplace_back(result->time_us, index);
      }
      std::sort(scored.begin(), scored.end());
      size_t keep = std::max(final_round, (alive.size() + eta_ - 1) / eta_);
      if (scored.size() > keep) scored.resize(keep);
      alive.clear();
      for (const auto& entry : scored) alive.push_back(entry.second);
      if (run.exhausted()) break;
    }
    for (size_t index : alive) {
      if (!run.evaluate(candidates[index], Fidelity::Full)) break;
    }
    return run.finish();
  }

 private:
  uint64_t seed_;
  size_t eta_;
};

// Model-guided: ridge regression on log(time) over (prior + measured) observations proposes the candidates
// predicted fastest; a random share of the budget explores first when there is no prior.
class ModelGuidedStrategy : public Strategy {
 public:
  explicit ModelGuidedStrategy(StrategyOptions options) : options_(std::move(options)) {}
  std::string name() const override { return "model"; }
  SearchOutcome run(std::span<const Candidate> candidates, Objective& objective, const Budget& budget) override {
    BudgetedRun run(objective, budget);
    std::vector<bool> evaluated(candidates.size(), false);
    std::vector<std::vector<double>> train_x;
    std::vector<double> train_y;
    for (const auto& prior : options_.prior) {
      train_x.push_back(prior.features);
      train_y.push_back(prior.time_us);
    }
    const size_t prior_count = train_x.size();
    auto record = [&](size_t index) {
      auto result = run.evaluate(candidates[index], Fidelity::Full);
      if (!result) return false;
      evaluated[index] = true;
      // Invalid candidates teach the model they are slow, so it stops proposing their neighbours.
      double penalty = worst_time_ * 4;
      train_x.push_back(candidates[index].features);
      train_y.push_back(result->valid ? result->time_us : penalty);
      if (result->valid) worst_time_ = std::max(worst_time_, result->time_us);
      return true;
    };

    size_t evaluation_cap = std::min(budget.max_evaluations, candidates.size());
    size_t exploration = prior_count > 0 ? 1 : std::max<size_t>(2, static_cast<size_t>(
                                                                       options_.initial_random_fraction * evaluation_cap));
    const std::vector<size_t> order = shuffled_indices(candidates.size(), options_.seed);
    if (prior_count == 0) {
      for (size_t i = 0; i < std::min(exploration, order.size()); ++i) {
        if (!record(order[i])) return run.finish();
      }
    }
    std::unique_ptr<CostModel> model = make_cost_model(options_.cost_model, options_.ridge_lambda);
    while (true) {
      size_t unevaluated = static_cast<size_t>(std::count(evaluated.begin(), evaluated.end(), false));
      if (unevaluated == 0 || run.exhausted()) break;
      fit_weighted(*model, train_x, train_y, prior_count);
      std::vector<std::pair<double, size_t>> ranked;
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (!evaluated[i]) ranked.emplace_back(model->trained() ? model->predict_us(candidates[i].features) : 0.0, i);
      }
      std::sort(ranked.begin(), ranked.end());
      size_t batch = std::min(options_.batch_size, ranked.size());
      for (size_t b = 0; b < batch; ++b) {
        if (!record(ranked[b].second)) return run.finish();
      }
    }
    return run.finish();
  }

 private:
  // Measured points of this problem count more than the prior from other problems.
  void fit_weighted(CostModel& model, const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                    size_t prior_count) const {
    if (x.size() < 2) return;
    std::vector<double> weights(x.size(), 1.0);
    if (prior_count > 0) std::fill(weights.begin() + static_cast<std::ptrdiff_t>(prior_count), weights.end(), 3.0);
    model.fit(x, y, weights);
  }

  StrategyOptions options_;
  double worst_time_ = 1.0;
};

}  // namespace

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = {"exhaustive", "random", "halving", "model"};
  return names;
}

std::unique_ptr<Strategy> make_strategy(std::string_view name, const StrategyOptions& options) {
  if (name == "exhaustive") return std::make_unique<ExhaustiveStrategy>();
  if (name == "random") return std::make_unique<RandomStrategy>(options.seed);
  if (name == "halving") return std::make_unique<HalvingStrategy>(options.seed, options.halving_eta);
  if (name == "model") return std::make_unique<ModelGuidedStrategy>(options);
  QTUNE_INPUT_ERROR("strategy: unknown strategy " + quote_input(name) +
                    "' (expected exhaustive, random, halving or model)");
}

}  // namespace qtune::search

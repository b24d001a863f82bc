#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "kernels/error.hpp"
#include "search/strategy.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune::search {
namespace {

using test_support::expect_input_error;

// A synthetic objective with a known optimum at (x, y) = (7, 3) on a 16 x 12 grid; some candidates are invalid.
class BowlObjective : public Objective {
 public:
  Evaluation evaluate(const Candidate& candidate, Fidelity fidelity) override {
    ++calls[fidelity];
    double x = candidate.features[0], y = candidate.features[1];
    if (static_cast<int>(x) == 0 && static_cast<int>(y) == 0) return {false, 0};  // a "crashing" config
    double time = 10.0 + 0.5 * (x - 7) * (x - 7) + 0.8 * (y - 3) * (y - 3);
    // Short measurements are noisier but keep the ordering of clearly different candidates.
    if (fidelity == Fidelity::Short) time *= 1.0 + 0.001 * std::sin(x * 13 + y * 7);
    return {true, time};
  }
  std::map<Fidelity, int> calls;
};

StrategyOptions seeded(uint64_t seed) {
  StrategyOptions options;
  options.seed = seed;
  return options;
}

Budget evaluations(size_t count) {
  Budget budget;
  budget.max_evaluations = count;
  return budget;
}

std::vector<Candidate> grid() {
  std::vector<Candidate> candidates;
  for (int x = 0; x < 16; ++x)
    for (int y = 0; y < 12; ++y) candidates.push_back({candidates.size(), {double(x), double(y)}});
  return candidates;
}

size_t optimum_id() { return 7 * 12 + 3; }

// One strategy's search of the grid with a fresh bowl objective, which keeps its call counts for the test.
class StrategySearch : public ::testing::Test {
 protected:
  SearchOutcome search(std::string_view name, const StrategyOptions& options = {}, const Budget& budget = {}) {
    return make_strategy(name, options)->run(candidates_, objective_, budget);
  }

  const std::vector<Candidate> candidates_ = grid();
  BowlObjective objective_;
};

TEST_F(StrategySearch, ExhaustiveFindsTheOptimumAndEvaluatesEverything) {
  const SearchOutcome outcome = search("exhaustive");
  ASSERT_TRUE(outcome.best_id);
  EXPECT_EQ(*outcome.best_id, optimum_id());
  EXPECT_DOUBLE_EQ(outcome.best_time_us, 10.0);
  EXPECT_EQ(outcome.history.size(), candidates_.size());
}

TEST(Strategy, BudgetInEvaluationsIsRespected) {
  auto candidates = grid();
  for (const auto& name : strategy_names()) {
    BowlObjective objective;
    auto outcome = make_strategy(name)->run(candidates, objective, evaluations(20));
    EXPECT_LE(outcome.history.size(), 20u) << name;
    EXPECT_GT(outcome.history.size(), 0u) << name;
  }
}

TEST_F(StrategySearch, BudgetInSecondsStopsEarly) {
  const SearchOutcome outcome = search("exhaustive", {}, Budget{std::numeric_limits<size_t>::max(), 0.0});
  EXPECT_TRUE(outcome.history.empty());
  EXPECT_FALSE(outcome.best_id);
}

TEST_F(StrategySearch, RandomWithFullBudgetFindsTheOptimumInAnotherOrder) {
  const SearchOutcome outcome = search("random", seeded(42));
  ASSERT_TRUE(outcome.best_id);
  EXPECT_EQ(*outcome.best_id, optimum_id());
  EXPECT_NE(outcome.history.front().id, 0u);  // shuffled
}

TEST_F(StrategySearch, SuccessiveHalvingSpendsShortRunsOnManyAndFullRunsOnFew) {
  const SearchOutcome outcome = search("halving", seeded(3));
  ASSERT_TRUE(outcome.best_id);
  EXPECT_EQ(*outcome.best_id, optimum_id());
  EXPECT_EQ(objective_.calls[Fidelity::Short], int(candidates_.size()) + 64 + 22 + 8);
  EXPECT_LE(objective_.calls[Fidelity::Full], 3);
}

TEST_F(StrategySearch, ModelGuidedFindsTheOptimumWithFewEvaluations) {
  const size_t budget = candidates_.size() * 15 / 100;
  const SearchOutcome outcome = search("model", seeded(5), evaluations(budget));
  ASSERT_TRUE(outcome.best_id);
  EXPECT_LE(outcome.best_time_us, 10.0 * 1.02);
  EXPECT_LE(outcome.history.size(), budget);
}

TEST_F(StrategySearch, ModelGuidedUsesThePriorToStartNearTheOptimum) {
  StrategyOptions options = seeded(9);
  // Prior from a "similar problem": the same bowl, slightly shifted in time.
  for (const auto& candidate : candidates_) {
    double x = candidate.features[0], y = candidate.features[1];
    options.prior.push_back({candidate.features, 12.0 + 0.5 * (x - 7) * (x - 7) + 0.8 * (y - 3) * (y - 3)});
  }
  const SearchOutcome outcome = search("model", options, evaluations(4));
  ASSERT_TRUE(outcome.best_id);
  EXPECT_EQ(*outcome.best_id, optimum_id());
}

TEST(Strategy, UnknownNameIsAnInputErrorNamingTheField) {
  expect_input_error([&] { make_strategy("annealing"); }, {"strategy"});
}

TEST_F(StrategySearch, BestAfterEachEvaluationIsMonotone) {
  const SearchOutcome outcome = search("random", seeded(1), evaluations(50));
  auto curve = outcome.best_after_each_evaluation();
  ASSERT_EQ(curve.size(), 50u);
  for (size_t i = 1; i < curve.size(); ++i) EXPECT_LE(curve[i], curve[i - 1]);
}

TEST(RidgeCostModel, FitsAQuadraticInLogSpace) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int a = 0; a < 10; ++a)
    for (int b = 0; b < 10; ++b) {
      x.push_back({double(a), double(b)});
      y.push_back(std::exp(0.1 * a * a - 0.2 * a * b + 0.05 * b + 1.0));
    }
  RidgeCostModel model(1e-9);
  model.fit(x, y);
  EXPECT_NEAR(model.predict_us({3, 4}), std::exp(0.9 - 2.4 + 0.2 + 1.0), 1e-3);
}

}  // namespace
}  // namespace qtune::search

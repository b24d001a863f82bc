#pragma once
// `qtune search-eval`: replays search strategies offline against a database of exhaustive results. For every
// (problem, GPU) with stored measurements, each strategy searches the stored candidates with an objective that looks
// the answers up (Full: the stored median; Short: the median of a random subset of the stored raw samples), under a
// budget of a fraction of the candidates; the model strategy's prior comes from the OTHER problems only
// (leave-one-problem-out). The report says how often the best found is within a tolerance of the exhaustive optimum.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "search/strategy.hpp"

namespace qtune::tune {

struct SearchEvalOptions {
  std::vector<std::string> strategies = {"model", "halving", "random"};
  double budget_fraction = 0.15;  // evaluations = ceil(fraction x candidates), at least 1
  double tolerance = 0.02;        // "found" = best found <= optimum x (1 + tolerance)
  std::optional<std::string> gpu; // only this GPU key (profile or device name)
  std::string family = "mma";
  std::size_t min_candidates = 8;  // problems with fewer valid stored candidates are left out
  std::size_t prior_limit = 4000;  // model prior: at most this many observations (a seeded random subset)
  int repeats = 1;                 // seeds per (strategy, problem); randomised strategies vary between them
  std::uint64_t seed = 1;
  std::size_t short_samples = 5;   // raw samples a Short evaluation takes the median of
  search::StrategyOptions strategy_options;  // batch size, eta, ... (seed and prior are set per replay)
};

struct ReplayProblem {
  db::ProblemId problem_id{};
  Problem problem;
  std::string gpu;
  std::size_t candidates = 0;        // stored candidates (valid and invalid)
  std::size_t valid_candidates = 0;
  double optimum_us = 0;             // the best stored median
  std::string optimum_config;
  std::size_t budget = 0;            // evaluations each strategy gets
};

struct ReplayResult {
  std::string strategy;
  std::size_t problem = 0;  // index into SearchEvalReport::problems
  int repeat = 0;
  std::size_t evaluations = 0;  // used (<= budget)
  double best_us = std::numeric_limits<double>::infinity();
  double regret = std::numeric_limits<double>::infinity();  // best / optimum - 1
  bool within_tolerance = false;
  std::optional<std::size_t> evaluations_to_tolerance;  // first evaluation count reaching the tolerance
};

struct StrategySummary {
  std::string strategy;
  std::size_t replays = 0;
  std::size_t within_tolerance = 0;
  double fraction_within = 0;
  double mean_regret = 0;    // over replays that found a valid candidate
  double median_regret = 0;
  double max_regret = 0;
  std::size_t nothing_found = 0;  // replays without any valid Full evaluation
  double mean_evaluations = 0;
  double mean_budget_fraction = 0;  // evaluations used / candidates
};

struct SearchEvalReport {
  std::vector<ReplayProblem> problems;
  std::vector<ReplayResult> results;
  std::vector<StrategySummary> summaries;  // in options.strategies order
};

// Throws InputError for an unknown strategy, a fraction outside (0, 1], a negative tolerance or no problem to replay.
SearchEvalReport run_search_eval(db::Store& store, const SearchEvalOptions& options);

}  // namespace qtune::tune

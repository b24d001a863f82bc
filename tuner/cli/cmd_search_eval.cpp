// `qtune search-eval`: replays search strategies offline against a database of exhaustive results and reports how
// often each finds a configuration within a tolerance of the exhaustive optimum after a fraction of the evaluations.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"
#include "reports/table.hpp"
#include "search/cost_model.hpp"
#include "tuner/cli/commands.hpp"
#include "tuner/tune/problem_set.hpp"
#include "tuner/tune/search_eval.hpp"

namespace qtune::cli {

namespace {

struct SearchEvalCommandOptions {
  std::string db_path = "qtune.db";
  std::string strategies = "model,halving,random";
  double budget_fraction = 0.15;
  double tolerance = 0.02;
  std::string gpu;
  std::string family = "mma";
  std::size_t min_candidates = 8;
  std::size_t prior_limit = 4000;
  int repeats = 1;
  std::uint64_t seed = 1;
  bool per_problem = false;
  std::string cost_model = "trees";
  std::string output = "table";
};

void run(const SearchEvalCommandOptions& options) {
  const reports::OutputStyle style = reports::parse_output_style(options.output);
  tune::SearchEvalOptions eval;
  eval.strategies.clear();
  std::stringstream stream(options.strategies);
  std::string name;
  while (std::getline(stream, name, ',')) {
    if (name.empty()) QTUNE_INPUT_ERROR("--strategy: empty name in '" + options.strategies + "'");
    eval.strategies.push_back(name);
  }
  eval.budget_fraction = options.budget_fraction;
  eval.tolerance = options.tolerance;
  if (!options.gpu.empty()) eval.gpu = options.gpu;
  eval.family = options.family;
  eval.min_candidates = options.min_candidates;
  eval.prior_limit = options.prior_limit;
  eval.repeats = options.repeats;
  eval.seed = options.seed;
  eval.strategy_options.cost_model = options.cost_model;
  search::make_cost_model(options.cost_model);  // an unknown name fails here, naming the field

  db::Store store = db::Store::open_read_only(options.db_path);
  store.require_readable();
  const tune::SearchEvalReport report = tune::run_search_eval(store, eval);

  if (options.per_problem) {
    reports::Table table({"strategy", "gpu", "problem", "candidates", "budget", "optimum_us", "best_us", "regret", "within",
                          "evals_to_tolerance"});
    for (const tune::ReplayResult& result : report.results) {
      const tune::ReplayProblem& problem = report.problems[result.problem];
      table.add_row({result.strategy, problem.gpu, tune::problem_key(problem.problem), std::to_string(problem.candidates),
                     std::to_string(problem.budget), fixed(problem.optimum_us, 3),
                     result.best_us < 1e300 ? fixed(result.best_us, 3) : "", result.regret < 1e300 ? fixed(result.regret, 4) : "",
                     result.within_tolerance ? "yes" : "no",
                     result.evaluations_to_tolerance ? std::to_string(*result.evaluations_to_tolerance) : ""});
    }
    table.print(std::cout, style);
    if (style != reports::OutputStyle::Text) return;
    std::cout << "\n";
  }
  reports::Table table({"strategy", "replays", "within_tolerance", "fraction_within", "mean_regret", "median_regret",
                        "max_regret", "nothing_found", "mean_evaluations", "evaluated_fraction"});
  for (const tune::StrategySummary& summary : report.summaries) {
    table.add_row({summary.strategy, std::to_string(summary.replays), std::to_string(summary.within_tolerance),
                   fixed(summary.fraction_within, 3), fixed(summary.mean_regret, 4), fixed(summary.median_regret, 4),
                   fixed(summary.max_regret, 4), std::to_string(summary.nothing_found), fixed(summary.mean_evaluations, 1),
                   fixed(summary.mean_budget_fraction, 3)});
  }
  table.print(std::cout, style);
  if (style == reports::OutputStyle::Text) {
    std::cout << report.problems.size() << " (problem, GPU) pairs replayed; budget " << fixed(options.budget_fraction * 100, 1)
              << "% of each problem's candidates; within = best found <= optimum x " << fixed(1 + options.tolerance, 3)
              << "; the model's prior leaves the replayed problem out\n";
  }
}

}  // namespace

void add_search_eval_command(CLI::App& app) {
  auto options = std::make_shared<SearchEvalCommandOptions>();
  CLI::App* command = app.add_subcommand(
      "search-eval", "replay search strategies against a database of exhaustive results (best found vs the optimum)");
  command->add_option("--db", options->db_path, "database file (default: $QTUNE_DB, else ./qtune.db)")->envname("QTUNE_DB");
  command->add_option("--strategy", options->strategies, "comma-separated strategies: model, halving, random, exhaustive")
      ->capture_default_str();
  command->add_option("--cost-model", options->cost_model, "the model strategy's cost model: trees or ridge")->capture_default_str();
  command->add_option("--budget-fraction", options->budget_fraction, "evaluations per problem as a fraction of its candidates")
      ->check(real_in(0, 1, true))
      ->capture_default_str();
  command->add_option("--tolerance", options->tolerance, "relative distance to the optimum that counts as found")
      ->check(real_in(0, 10))
      ->capture_default_str();
  command->add_option("--gpu", options->gpu, "only this GPU (profile or device name as stored)");
  command->add_option("--family", options->family, "kernel family")->capture_default_str();
  command->add_option("--min-candidates", options->min_candidates, "skip problems with fewer verified, measured candidates")
      ->check(integer_in(1, 1000000000))
      ->capture_default_str();
  command->add_option("--prior-limit", options->prior_limit, "at most this many prior observations for the model strategy")
      ->check(integer_in(0, 1000000000))
      ->capture_default_str();
  command->add_option("--repeats", options->repeats, "seeds per strategy and problem")
      ->check(integer_in(1, 10000))
      ->capture_default_str();
  command->add_option("--seed", options->seed, "base seed")->check(integer_in(0, kMaxSeed))->capture_default_str();
  command->add_flag("--per-problem", options->per_problem, "also list every replay");
  command->add_option("--output", options->output, "table, json or csv")->capture_default_str();
  command->callback([options] { run(*options); });
}

}  // namespace qtune::cli

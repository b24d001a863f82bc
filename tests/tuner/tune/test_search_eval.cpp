// search-eval on a synthetic database of exhaustive results with a known optimum per problem.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "search/space.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"
#include "tuner/cli/cli.hpp"
#include "tuner/tune/restricted_family.hpp"
#include "tuner/tune/search_eval.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

std::map<std::string, std::vector<int>> eval_space() {
  return {{"bm", {16, 32, 64}}, {"bn", {64, 128, 256}}, {"bk", {128, 256}}, {"wm", {1, 2}}, {"wn", {2, 4}},
          {"wk", {1}},          {"stages", {3, 4}},     {"split", {1, 2, 4}}, {"raster", {0}}};
}

// log(time) is linear in the cost features (what the ridge model can represent) plus a problem-size term, so
// other problems teach the model where this one's optimum is.
double synthetic_time_us(const std::vector<double>& features) {
  // log2_m, log2_n, log2_k, log2_ctas, waves, wave_efficiency, m_tile_efficiency, log2_bytes_per_flop, then params.
  const std::vector<double> weights = {0.05, 0.5, 0.5, -0.02, 0.03, -0.4, -0.6, 0.0,  // problem and launch features
                                       0.1, -0.15, 0.05, 0.02, -0.1, 0.0, -0.12, 0.08, 0.0};  // bm bn bk wm wn wk stages split raster
  double log_time = -8.0;
  for (size_t i = 0; i < features.size() && i < weights.size(); ++i) log_time += weights[i] * features[i];
  return std::exp(log_time) * 1e3;
}

struct SyntheticDb {
  std::map<std::string, double> optimum_by_problem;
  std::map<std::string, std::string> optimum_config;
  std::map<std::string, std::size_t> candidates_by_problem;
};

SyntheticDb make_synthetic_db(const fs::path& path) {
  db::Store store = db::Store::open(path);
  db::RunInfo run_info;
  run_info.kind = "tune";
  run_info.tool_version = "test";
  run_info.git_sha = "test";
  run_info.gpu_name = "NVIDIA H200";
  run_info.gpu_profile = "h200";
  run_info.sm = 90;
  run_info.sm_count = 132;
  const db::RunId run = store.insert_run(run_info);
  const TuneTarget target = h200_target();
  const RestrictedFamily family(find_family("mma"), eval_space());
  SyntheticDb truth;
  auto transaction = store.transaction();
  for (const Problem& problem :
       build_problem_set({FormatSpec::parse("w4a16-int4-ch")}, {{4096, 4096}, {8192, 4096}, {4096, 8192}}, {1, 16, 128})) {
    const std::string key = problem_key(problem);
    const db::ProblemId problem_id = store.upsert_problem({problem.format.to_string(), problem.m, problem.n, problem.k});
    const search::SpaceEnumeration space = search::enumerate_space(family, problem, target.limits);
    double optimum = 1e300;
    size_t index = 0;
    for (const KernelConfig& config : space.candidates) {
      const db::ConfigId config_id = store.upsert_config(
          db::KernelConfig{db::ConfigKind::Kernel, "mma", config.to_json().at("params").dump(), "synthetic"});
      const double time = synthetic_time_us(search::cost_features(family, config, problem, target.limits));
      // Every 17th candidate computes wrong results, and would be by far the fastest: it must not be the optimum.
      const bool broken = index++ % 17 == 5;
      db::Verification verification{run, problem_id, config_id, broken ? db::VerificationStatus::Failed : db::VerificationStatus::Passed,
                                    std::nullopt, std::nullopt, std::nullopt, ""};
      store.insert_verification(verification);
      db::Measurement measurement;
      measurement.run = run;
      measurement.problem = problem_id;
      measurement.config = config_id;
      measurement.phase = "exhaustive";
      const double stored_time = broken ? time / 100 : time;
      db::TimingStats stats;
      stats.median_us = stats.p10_us = stats.p90_us = stats.min_us = stats.max_us = stats.mean_us = stored_time;
      stats.ci_low_us = stats.ci_high_us = stored_time;
      measurement.stats = stats;
      for (int s = 0; s < 15; ++s) measurement.samples_us.push_back(stored_time * (1 + 0.002 * (s % 5 - 2)));
      store.insert_measurement(measurement);
      if (!broken && time < optimum) {
        optimum = time;
        truth.optimum_config[key] = config.to_string();
      }
    }
    truth.optimum_by_problem[key] = optimum;
    truth.candidates_by_problem[key] = space.candidates.size();
  }
  transaction.commit();
  return truth;
}

TEST(SearchEval, FindsTheKnownOptimaAndReportsPerStrategy) {
  TempDir dir;
  const SyntheticDb truth = make_synthetic_db(dir / "exhaustive.db");
  db::Store store = db::Store::open_read_only(dir / "exhaustive.db");

  SearchEvalOptions options;
  options.strategies = {"exhaustive", "random", "halving", "model"};
  options.budget_fraction = 1.0;
  SearchEvalReport full = run_search_eval(store, options);
  ASSERT_EQ(full.problems.size(), 9u);
  for (const ReplayProblem& problem : full.problems) {
    const std::string key = problem_key(problem.problem);
    EXPECT_EQ(problem.gpu, "h200");
    EXPECT_DOUBLE_EQ(problem.optimum_us, truth.optimum_by_problem.at(key)) << key;
    EXPECT_EQ(problem.optimum_config, truth.optimum_config.at(key)) << key;
    EXPECT_EQ(problem.candidates, truth.candidates_by_problem.at(key));
    EXPECT_LT(problem.valid_candidates, problem.candidates);
    EXPECT_EQ(problem.budget, problem.candidates);
  }
  ASSERT_EQ(full.summaries.size(), 4u);
  // With every evaluation allowed, exhaustive and random search see everything and find every optimum exactly.
  for (const StrategySummary& summary : full.summaries) {
    if (summary.strategy != "exhaustive" && summary.strategy != "random") continue;
    EXPECT_EQ(summary.replays, 9u) << summary.strategy;
    EXPECT_DOUBLE_EQ(summary.fraction_within, 1.0) << summary.strategy;
    EXPECT_DOUBLE_EQ(summary.max_regret, 0.0) << summary.strategy;
  }

  options.strategies = {"model", "halving", "random"};
  options.budget_fraction = 0.15;
  options.tolerance = 0.02;
  options.repeats = 2;
  const SearchEvalReport budgeted = run_search_eval(store, options);
  ASSERT_EQ(budgeted.results.size(), 3u * 9u * 2u);
  for (const ReplayResult& result : budgeted.results) {
    const ReplayProblem& problem = budgeted.problems[result.problem];
    EXPECT_LE(result.evaluations, problem.budget) << result.strategy;
    EXPECT_EQ(problem.budget, static_cast<std::size_t>(std::ceil(0.15 * static_cast<double>(problem.candidates) - 1e-9)));
    if (std::isfinite(result.best_us)) {
      EXPECT_GE(result.best_us, problem.optimum_us * (1 - 1e-12)) << "nothing beats the optimum";
      EXPECT_NEAR(result.regret, result.best_us / problem.optimum_us - 1, 1e-12);
    }
  }
  const StrategySummary& model = budgeted.summaries.at(0);
  EXPECT_EQ(model.strategy, "model");
  EXPECT_EQ(model.replays, 18u);
  // The times follow the model's own form, and the other problems' measurements are its prior: it must nearly always
  // get within 2% of the optimum with 15% of the evaluations.
  EXPECT_GE(model.fraction_within, 0.9) << "mean regret " << model.mean_regret;
  EXPECT_LE(model.mean_budget_fraction, 0.15 + 1.0 / 40);
}

TEST(SearchEval, RefusesBadOptionsAndEmptyDatabases) {
  TempDir dir;
  make_synthetic_db(dir / "q.db");
  db::Store store = db::Store::open_read_only(dir / "q.db");
  SearchEvalOptions options;
  options.budget_fraction = 0;
  EXPECT_THROW(run_search_eval(store, options), InputError);
  options = SearchEvalOptions{};
  options.strategies = {"annealing"};
  EXPECT_THROW(run_search_eval(store, options), InputError);
  options = SearchEvalOptions{};
  options.gpu = "a100";  // nothing measured there
  EXPECT_THROW(run_search_eval(store, options), InputError);
}

TEST(SearchEvalCommand, PrintsJsonAndFailsCleanlyOnAnEmptyDatabase) {
  TempDir dir;
  make_synthetic_db(dir / "q.db");
  std::vector<std::string> arguments = {"qtune", "search-eval", "--db", (dir / "q.db").string(), "--strategy", "model,random",
                                        "--output", "json"};
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  ::testing::internal::CaptureStdout();
  const int status = cli::run_cli(static_cast<int>(argv.size()), argv.data());
  const std::string output = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(status, 0) << output;
  const nlohmann::json rows = nlohmann::json::parse(output);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("strategy"), "model");
  EXPECT_EQ(rows[0].at("replays"), 9);

  { db::Store empty = db::Store::open(dir / "empty.db"); }
  std::vector<std::string> empty_arguments = {"qtune", "search-eval", "--db", (dir / "empty.db").string()};
  std::vector<char*> empty_argv;
  for (std::string& argument : empty_arguments) empty_argv.push_back(argument.data());
  EXPECT_EQ(cli::run_cli(static_cast<int>(empty_argv.size()), empty_argv.data()), 2);
}

}  // namespace
}  // namespace qtune::tune

// The tuner's orchestration against the fake compiler and backend: what it stores, what it skips on a rerun, how
// a stop request and a crash are handled, and that invalid candidates never win.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <map>
#include <set>
#include <string>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "search/space.hpp"
#include "search/winner.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"
#include "tuner/tune/restricted_family.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

bool fake_fails(const KernelConfig& c) { return c.get("bn") == 64 && c.get("split") == 2 && c.get("stages") == 3; }
bool fake_crashes(const KernelConfig& c) {
  return c.get("bn") == 64 && c.get("wn") == 4 && c.get("stages") == 4 && c.get("split") == 1;
}
bool fake_no_compile(const KernelConfig& c) {
  return c.get("bm") == 32 && c.get("wn") == 2 && c.get("split") == 2 && c.get("stages") == 3;
}
bool fake_spills(const KernelConfig& c) { return c.get("bm") == 32 && c.get("bn") == 128 && c.get("stages") == 4; }

// What the fakes make of one problem: the best valid time (the heuristic included) and the post-compile counts.
struct Expected {
  double best_us = 1e300;
  std::size_t spills = 0;
  std::size_t compile_failed = 0;
};
Expected expected_for(const Problem& problem, const TuneTarget& target) {
  const RestrictedFamily family(find_family("mma"), small_space());
  const search::SpaceEnumeration space = search::enumerate_space(family, problem, target.limits);
  Expected expected;
  for (const KernelConfig& config : space.candidates) {
    if (fake_no_compile(config)) {
      ++expected.compile_failed;
    } else if (fake_spills(config)) {
      ++expected.spills;
    } else if (!fake_fails(config) && !fake_crashes(config)) {
      expected.best_us = std::min(expected.best_us, fake_time_us(problem, config));
    }
  }
  const KernelConfig heuristic = family.default_config(problem, target.limits);
  if (!fake_no_compile(heuristic) && !fake_fails(heuristic) && !fake_crashes(heuristic)) {
    expected.best_us = std::min(expected.best_us, fake_time_us(problem, heuristic));
  }
  return expected;
}

TEST(Tuner, ExhaustiveTuneStoresEverythingAndTheTrueBest) {
  TempDir dir;
  const TuneOptions options = small_options();
  FakeBackend backend;
  const TuneReport report = run_fake_tune(options, dir / "q.db", backend);
  EXPECT_FALSE(report.interrupted);
  EXPECT_EQ(report.problems, options.problems.size());
  EXPECT_EQ(report.winners, options.problems.size());
  EXPECT_GT(report.instantiations, 0u);
  // Instantiations do not depend on M, N or K: each failing configuration is compiled, and fails, once.
  std::set<std::string> failing;
  for (const Problem& problem : options.problems) {
    const RestrictedFamily family(find_family("mma"), small_space());
    for (const KernelConfig& config : search::enumerate_space(family, problem, h200_target().limits).candidates) {
      if (fake_no_compile(config)) failing.insert(config.to_string());
    }
  }
  EXPECT_EQ(report.compile_failures, failing.size());
  EXPECT_GT(failing.size(), 0u);

  db::Store store = db::Store::open(dir / "q.db");
  EXPECT_TRUE(store.check().empty());
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, db::RunStatus::Completed);
  EXPECT_EQ(runs[0].kind, "tune");
  EXPECT_EQ(runs[0].gpu_profile, "h200");
  EXPECT_EQ(store.list_compiles().size(), report.instantiations);

  const TuneTarget target = h200_target();
  std::size_t pruned_after_compile = 0;
  std::size_t pruned_before_compile = 0;
  for (const ProblemReport& problem : report.reports) {
    SCOPED_TRACE(problem_key(problem.problem));
    ASSERT_TRUE(problem.winner.has_value());
    const Expected expected = expected_for(problem.problem, target);
    // The winner is the fastest valid candidate: the fake's times differ by far more than the tie tolerance.
    EXPECT_NEAR(problem.winner_us, expected.best_us, 1e-9);
    EXPECT_TRUE(problem.heuristic.has_value());
    auto post = [&](const std::string& rule) {
      auto found = problem.pruned_post_compile.find(rule);
      return found == problem.pruned_post_compile.end() ? std::size_t{0} : found->second;
    };
    EXPECT_EQ(post("spills"), expected.spills);
    EXPECT_EQ(post("compile-failed"), expected.compile_failed);
    pruned_after_compile += expected.spills + expected.compile_failed;
    pruned_before_compile += problem.space_total - problem.after_static_rules;
    EXPECT_EQ(problem.after_static_rules - problem.after_compile, expected.spills + expected.compile_failed);

    // Stored pruning counts equal the report's, for both stages.
    std::map<std::string, std::int64_t> pre;
    std::map<std::string, std::int64_t> post_stored;
    for (const db::PruningCount& count : store.list_pruning_counts(db::RowFilter{.problem = problem.problem_id})) {
      (count.stage == db::PruningStage::PreCompile ? pre : post_stored)[count.rule] = count.count;
    }
    for (const auto& [rule, count] : problem.pruned_pre_compile) EXPECT_EQ(pre[rule], static_cast<std::int64_t>(count)) << rule;
    EXPECT_EQ(post_stored["spills"], static_cast<std::int64_t>(expected.spills));

    // The heuristic was measured with its own phase.
    const auto measurements = store.list_measurements(db::RowFilter{.problem = problem.problem_id});
    EXPECT_EQ(std::count_if(measurements.begin(), measurements.end(), [](const auto& m) { return m.phase == "heuristic"; }), 1);
    // Raw samples are stored.
    for (const auto& measurement : measurements) {
      if (measurement.status == db::MeasurementStatus::Ok) {
        EXPECT_EQ(measurement.samples_us.size(), 21u);
      }
    }
  }
  EXPECT_GT(pruned_after_compile, 0u) << "the small space should exercise post-compile pruning";
  EXPECT_GT(pruned_before_compile, 0u) << "the small space should exercise the static rules";
  // Each (problem, config) measured once; failures stored as such.
  for (const auto& [key, count] : measurement_keys(store)) EXPECT_EQ(count, 1) << std::get<0>(key) << " " << std::get<1>(key);
  const auto verifications = store.list_verifications();
  EXPECT_GT(std::count_if(verifications.begin(), verifications.end(),
                          [](const auto& v) { return v.status == db::VerificationStatus::Failed; }),
            0);
  EXPECT_GT(std::count_if(verifications.begin(), verifications.end(),
                          [](const auto& v) { return v.status == db::VerificationStatus::Crashed; }),
            0);
}

TEST(Tuner, InvalidCandidatesNeverWinEvenWhenFastest) {
  TempDir dir;
  TuneOptions options = small_options({16});
  // The candidates that fail verification or crash would be ten times faster than anything else.
  FakeBackend backend([](const Problem& problem, const KernelConfig& config) {
    const double time = fake_time_us(problem, config);
    return config.get("bn") == 64 && (config.get("split") == 2 || config.get("wn") == 4) ? time / 10 : time;
  });
  const TuneReport report = run_fake_tune(options, dir / "q.db", backend);
  db::Store store = db::Store::open(dir / "q.db");
  EXPECT_TRUE(store.check().empty());
  for (const ProblemReport& problem : report.reports) {
    ASSERT_TRUE(problem.winner.has_value());
    const KernelConfig& winner = *problem.winner;
    EXPECT_FALSE(fake_fails(winner) || fake_crashes(winner)) << winner.to_string();
    // The fast valid bn=64 candidates do win.
    EXPECT_EQ(winner.get("bn"), 64) << winner.to_string();
  }
}

TEST(Tuner, RerunSkipsFinalProblemsAndMeasuresNothing) {
  TempDir dir;
  const TuneOptions options = small_options();
  FakeBackend first;
  run_fake_tune(options, dir / "q.db", first);
  ASSERT_GT(first.calls.load(), 0u);

  FakeBackend second;
  const TuneReport again = run_fake_tune(options, dir / "q.db", second);
  EXPECT_EQ(second.calls.load(), 0u);
  EXPECT_EQ(again.skipped_final, options.problems.size());

  // --retune searches again, answered entirely from the store, and keeps the winners.
  db::Store store = db::Store::open(dir / "q.db");
  const auto winners_before = winner_map(store);
  TuneOptions retune = options;
  retune.retune = true;
  FakeBackend third;
  const TuneReport replayed = run_fake_tune(retune, dir / "q.db", third);
  EXPECT_EQ(third.calls.load(), 0u);
  EXPECT_EQ(replayed.skipped_final, 0u);
  EXPECT_GT(replayed.reused, 0u);
  EXPECT_EQ(winner_map(store), winners_before);
  for (const auto& [key, count] : measurement_keys(store)) EXPECT_EQ(count, 1);

  // A complete exhaustive search is final for any other search of the same space too.
  TuneOptions random = options;
  random.strategy = "random";
  random.budget.max_evaluations = 5;
  FakeBackend fourth;
  const TuneReport other = run_fake_tune(random, dir / "q.db", fourth);
  EXPECT_EQ(other.skipped_final, options.problems.size());
  EXPECT_EQ(fourth.calls.load(), 0u);
}

TEST(Tuner, ABudgetedWinnerIsNotFinalForAnotherSearch) {
  TempDir dir;
  TuneOptions random = small_options({16});
  random.strategy = "random";
  random.budget.max_evaluations = 5;
  FakeBackend first;
  run_fake_tune(random, dir / "q.db", first);
  EXPECT_LE(first.calls.load(), 6u * random.problems.size());  // five by the strategy plus the heuristic

  // The same budgeted search again is final...
  FakeBackend same;
  EXPECT_EQ(run_fake_tune(random, dir / "q.db", same).skipped_final, random.problems.size());
  EXPECT_EQ(same.calls.load(), 0u);

  // ...an exhaustive one is not: it measures only what the random search left out.
  TuneOptions exhaustive = small_options({16});
  FakeBackend second;
  const TuneReport report = run_fake_tune(exhaustive, dir / "q.db", second);
  EXPECT_EQ(report.skipped_final, 0u);
  FakeBackend reference;
  run_fake_tune(exhaustive, dir / "reference.db", reference);
  EXPECT_EQ(first.calls.load() + second.calls.load(), reference.calls.load());
  db::Store store = db::Store::open(dir / "q.db");
  db::Store reference_store = db::Store::open(dir / "reference.db");
  for (const auto& [key, count] : measurement_keys(store)) EXPECT_EQ(count, 1);
  EXPECT_EQ(winner_map(store), winner_map(reference_store));
}

TEST(Tuner, ChangedKernelSourcesAreMeasuredAgain) {
  TempDir dir;
  TuneOptions options = small_options({1});
  FakeBackend first;
  run_fake_tune(options, dir / "q.db", first);
  options.source_hash = "test-sources-b";
  FakeBackend second;
  const TuneReport report = run_fake_tune(options, dir / "q.db", second);
  EXPECT_EQ(report.skipped_final, 0u);
  EXPECT_EQ(second.calls.load(), first.calls.load());
  db::Store store = db::Store::open(dir / "q.db");
  for (const auto& [key, count] : measurement_keys(store)) EXPECT_EQ(count, 1);  // new hash, new config rows
  EXPECT_EQ(store.list_winners("h200").size(), options.problems.size());
}

TEST(Tuner, StopRequestEndsCleanlyAndTheRerunCompletes) {
  TempDir dir;
  const TuneOptions options = small_options();
  FakeBackend reference;
  run_fake_tune(options, dir / "reference.db", reference);

  std::atomic<bool> stop{false};
  FakeBackend interrupted;
  // Ctrl-C arrives during the 20th job and kills the worker too: that crash is not the candidate's and is dropped.
  interrupted.on_call = [&](FakeBackend& backend) {
    if (backend.calls.load() == 20) {
      stop = true;
      backend.crash_all = true;
    }
  };
  const TuneReport report = run_fake_tune(options, dir / "q.db", interrupted, &stop);
  EXPECT_TRUE(report.interrupted);
  EXPECT_EQ(interrupted.calls.load(), 20u);
  {
    db::Store store = db::Store::open(dir / "q.db");
    EXPECT_EQ(store.list_runs().at(0).status, db::RunStatus::Interrupted);
    EXPECT_EQ(store.list_verifications().size(), 19u) << "19 jobs answered before the stop";
    for (const auto& verification : store.list_verifications()) {
      EXPECT_EQ(verification.message.find("signal 2"), std::string::npos) << "the Ctrl-C crash was stored";
    }
  }
  FakeBackend rerun;
  const TuneReport completed = run_fake_tune(options, dir / "q.db", rerun);
  EXPECT_FALSE(completed.interrupted);
  EXPECT_EQ(rerun.calls.load() + 19, reference.calls.load()) << "the rerun measures exactly what was missing";
  db::Store store = db::Store::open(dir / "q.db");
  db::Store reference_store = db::Store::open(dir / "reference.db");
  EXPECT_EQ(measurement_keys(store), measurement_keys(reference_store));
  EXPECT_EQ(winner_map(store), winner_map(reference_store));
  EXPECT_TRUE(store.check().empty());
}

TEST(Tuner, SeveralSlotsShareTheProblems) {
  TempDir dir;
  const TuneOptions options = small_options();
  FakeBackend one;
  run_fake_tune(options, dir / "one.db", one);
  FakeBackend three;
  const TuneReport report = run_fake_tune(options, dir / "three.db", three, nullptr, 3);
  EXPECT_EQ(three.calls.load(), one.calls.load());
  EXPECT_EQ(report.winners, options.problems.size());
  db::Store a = db::Store::open(dir / "one.db");
  db::Store b = db::Store::open(dir / "three.db");
  EXPECT_EQ(measurement_keys(a), measurement_keys(b));
  EXPECT_EQ(winner_map(a), winner_map(b));
}

TEST(Tuner, BudgetedStrategiesStayWithinBudget) {
  for (const std::string strategy : {"random", "halving", "model"}) {
    SCOPED_TRACE(strategy);
    TempDir dir;
    TuneOptions options = small_options({128});
    options.strategy = strategy;
    options.budget.max_evaluations = 20;  // halving needs room for short rounds before its final three
    FakeBackend backend;
    const TuneReport report = run_fake_tune(options, dir / "q.db", backend);
    for (const ProblemReport& problem : report.reports) {
      EXPECT_LE(problem.evaluations, 20u);
      EXPECT_LE(problem.measured, 21u);  // the heuristic besides the budget
      EXPECT_LT(problem.evaluations, problem.after_compile) << "the budget should bind";
      EXPECT_TRUE(problem.winner.has_value());
    }
    if (strategy == "halving") {
      EXPECT_GT(backend.short_calls.load(), 0u);
    }
    db::Store store = db::Store::open(dir / "q.db");
    for (const auto& [key, count] : measurement_keys(store)) EXPECT_EQ(count, 1);
  }
}

TEST(Tuner, ABudgetFractionCapsEachProblemAtItsShareOfTheCandidates) {
  TempDir dir;
  TuneOptions options = small_options({1, 128});
  options.strategy = "model";
  options.budget_fraction = 0.2;
  FakeBackend backend;
  const TuneReport report = run_fake_tune(options, dir / "q.db", backend);
  ASSERT_FALSE(report.reports.empty());
  for (const ProblemReport& problem : report.reports) {
    const auto share = static_cast<std::size_t>(std::ceil(0.2 * static_cast<double>(problem.after_compile)));
    EXPECT_EQ(problem.evaluations, share) << problem.problem.to_string();
    EXPECT_EQ(problem_budget(options, problem.after_compile).max_evaluations, share);
    EXPECT_TRUE(problem.winner.has_value());
    EXPECT_GE(problem.seconds, 0.0);
  }
  options.budget.max_evaluations = 2;  // the smaller of the two caps binds
  EXPECT_EQ(problem_budget(options, 100).max_evaluations, 2u);
  options.budget_fraction = 1.5;
  EXPECT_THROW(run_fake_tune(options, dir / "q2.db", backend), InputError);
}

TEST(Tuner, ATableSelectionIsMeasuredInItsOwnPhaseAndCanWin) {
  TempDir dir;
  TuneOptions options = small_options({1, 16});
  options.strategy = "random";
  options.budget.max_evaluations = 1;  // the search alone would rarely find the table's pick
  // Outside the searched space (bn=32): a pick the search never sees, measured all the same.
  const KernelConfig pick = KernelConfig::parse("bm=16,bn=32,bk=128,wm=1,wn=2,wk=1,stages=3,split=1,raster=0");
  std::atomic<int> asked{0};
  options.table_selection = [&](const Problem&, const ArchLimits&) -> std::optional<KernelConfig> {
    ++asked;
    return pick;
  };
  FakeBackend backend;
  const TuneReport report = run_fake_tune(options, dir / "q.db", backend);
  EXPECT_EQ(asked.load(), static_cast<int>(options.problems.size()));
  db::Store store = db::Store::open(dir / "q.db");
  for (const ProblemReport& problem : report.reports) {
    SCOPED_TRACE(problem_key(problem.problem));
    ASSERT_TRUE(problem.table.has_value());
    EXPECT_EQ(*problem.table, pick);
    ASSERT_TRUE(problem.table_us.has_value());
    EXPECT_NEAR(*problem.table_us, fake_time_us(problem.problem, pick), 1e-9);
    // Eligible as a winner: the winner is never slower than the measured table pick.
    ASSERT_TRUE(problem.winner.has_value());
    EXPECT_LE(problem.winner_us, *problem.table_us * (1 + options.tie_tolerance));
    const auto measurements = store.list_measurements(db::RowFilter{.problem = problem.problem_id});
    EXPECT_EQ(std::count_if(measurements.begin(), measurements.end(), [](const auto& m) { return m.phase == "table"; }), 1);
  }
}

// Families are tuned one after another into the same store (tune --family mma,wgmma): a problem's winner is the
// fastest over both, and a family that is slower for a problem leaves the other family's winner in place.
TEST(Tuner, AnotherFamilysFasterWinnerIsKept) {
  TempDir dir;
  TuneOptions mma = small_options({1, 128});
  FakeBackend mma_backend;
  const TuneReport first = run_fake_tune(mma, dir / "q.db", mma_backend);
  // The wgmma "kernels" take twice the mma optimum at M = 1 and half of it at M = 128.
  std::map<std::string, double> mma_best;
  for (const ProblemReport& problem : first.reports) {
    ASSERT_TRUE(problem.winner.has_value());
    mma_best[problem_key(problem.problem)] = problem.winner_us;
  }
  const auto wgmma_time = [&](const Problem& problem, const KernelConfig& config) {
    const double factor = problem.m == 1 ? 2.0 : 0.5;
    return mma_best.at(problem_key(problem)) * factor * (1.0 + 0.01 * config.get("stages"));
  };
  FakeBackend wgmma_backend(wgmma_time);
  TuneOptions wgmma = small_options({1, 128});
  wgmma.family = "wgmma";
  wgmma.parameter_values = {{"bn", {64, 128}}, {"bk", {128}}, {"stages", {3, 4}}, {"split", {1}}, {"raster", {0}}};
  const TuneReport second = run_fake_tune(wgmma, dir / "q.db", wgmma_backend);
  db::Store store = db::Store::open(dir / "q.db");
  for (const ProblemReport& problem : second.reports) {
    SCOPED_TRACE(problem_key(problem.problem));
    ASSERT_TRUE(problem.winner.has_value());
    const auto winner = store.get_winner(problem.problem_id, second.gpu);
    ASSERT_TRUE(winner.has_value());
    const auto config = store.get_config(winner->config);
    ASSERT_TRUE(config.has_value());
    if (problem.problem.m == 1) {
      EXPECT_EQ(problem.winner->family, "mma");
      EXPECT_EQ(config->family, "mma");
      EXPECT_NEAR(winner->median_us, mma_best.at(problem_key(problem.problem)), 1e-9);
      EXPECT_EQ(problem.winner_reason.rfind("kept: the mma winner is faster", 0), 0u) << problem.winner_reason;
    } else {
      EXPECT_EQ(problem.winner->family, "wgmma");
      EXPECT_EQ(config->family, "wgmma");
      EXPECT_LT(winner->median_us, mma_best.at(problem_key(problem.problem)));
    }
  }
  // Run again, each family's search has covered every problem: nothing is re-tuned, whichever family won.
  FakeBackend mma_again;
  const TuneReport third = run_fake_tune(mma, dir / "q.db", mma_again);
  EXPECT_EQ(third.skipped_final, mma.problems.size()) << "the M = 128 problem, won by wgmma, was searched by mma already";
  FakeBackend wgmma_again(wgmma_time);
  const TuneReport fourth = run_fake_tune(wgmma, dir / "q.db", wgmma_again);
  EXPECT_EQ(fourth.skipped_final, wgmma.problems.size());
  // A different search of the same family is not final where the other family won.
  TuneOptions wider = mma;
  wider.parameter_values["stages"] = {3, 4, 5};
  FakeBackend mma_wider;
  const TuneReport fifth = run_fake_tune(wider, dir / "q.db", mma_wider);
  EXPECT_EQ(fifth.skipped_final, 0u);
}

TEST(Tuner, RefusesBadOptions) {
  TempDir dir;
  TuneOptions options = small_options({1});
  FakeBackend backend;
  options.strategy = "annealing";
  EXPECT_THROW(run_fake_tune(options, dir / "q.db", backend), InputError);
  options = small_options({1});
  options.parameter_values["bq"] = {1};
  EXPECT_THROW(run_fake_tune(options, dir / "q.db", backend), InputError);
  options = small_options({1});
  options.parameter_values["bm"] = {24};
  EXPECT_THROW(run_fake_tune(options, dir / "q.db", backend), InputError);
}

}  // namespace
}  // namespace qtune::tune

// The tie rule as the tuner stores winners: within the noise the incumbent (the previous winner) stays, else the
// simplest candidate; a clearly faster candidate replaces it.
#include <gtest/gtest.h>

#include "db/store.hpp"
#include "search/winner.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

// Two candidates only: split=1 (simpler) and split=2.
TuneOptions two_candidates() {
  TuneOptions options;
  options.problems = build_problem_set({FormatSpec::parse("w4a16-int4-ch")}, {{4096, 4096}}, {16});
  options.parameter_values = {{"bm", {16}}, {"bn", {128}}, {"bk", {128}}, {"wm", {1}}, {"wn", {4}},
                              {"wk", {1}},  {"stages", {4}}, {"split", {1, 2}}, {"raster", {0}}};
  options.source_hash = "tie-a";
  return options;
}

// Times by split; anything else (the heuristic) is far slower.
FakeBackend::TimeFunction times(double split1, double split2) {
  return [=](const Problem&, const KernelConfig& config) {
    if (config.params == std::map<std::string, int>{{"bm", 16}, {"bn", 128}, {"bk", 128}, {"wm", 1}, {"wn", 4},
                                                    {"wk", 1}, {"stages", 4}, {"split", config.get("split")}, {"raster", 0},
                                                    {"gscale", 0}}) {
      return config.get("split") == 1 ? split1 : split2;
    }
    return 1000.0;
  };
}

struct StoredWinner {
  int split = 0;
  std::string reason;
  double median_us = 0;
};

StoredWinner stored_winner(const fs::path& database) {
  db::Store store = db::Store::open(database);
  const auto winners = store.list_winners("h200");
  EXPECT_EQ(winners.size(), 1u);
  if (winners.empty()) return {};
  const auto config = store.get_config(winners[0].config);
  const KernelConfig parsed = KernelConfig::from_json(
      nlohmann::json{{"family", config->family}, {"params", nlohmann::json::parse(config->params_json)}});
  return {parsed.get("split"), winners[0].reason, winners[0].median_us};
}

TEST(WinnerStorage, TiesKeepTheSimplestThenTheIncumbent) {
  ASSERT_LT(search::config_complexity(KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0")),
            search::config_complexity(KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0")));
  TempDir dir;
  const fs::path database = dir / "q.db";
  TuneOptions options = two_candidates();

  // 1. No incumbent; split=2 is 0.4% faster, within the 1% noise: the simpler split=1 wins.
  FakeBackend first(times(10.04, 10.00));
  run_fake_tune(options, database, first);
  StoredWinner winner = stored_winner(database);
  EXPECT_EQ(winner.split, 1);
  EXPECT_EQ(winner.reason, "simplest within noise");
  EXPECT_DOUBLE_EQ(winner.median_us, 10.04);

  // 2. New kernel sources (so everything is measured again) and split=2 clearly faster: it wins...
  options.source_hash = "tie-b";
  FakeBackend second(times(11.0, 10.0));
  run_fake_tune(options, database, second);
  winner = stored_winner(database);
  EXPECT_EQ(winner.split, 2);
  EXPECT_EQ(winner.reason, "fastest");

  // 3. ...then split=1 is 0.5% faster, within the noise: the incumbent split=2 stays although it is not the simplest.
  options.source_hash = "tie-c";
  FakeBackend third(times(10.00, 10.05));
  run_fake_tune(options, database, third);
  winner = stored_winner(database);
  EXPECT_EQ(winner.split, 2);
  EXPECT_EQ(winner.reason, "incumbent within noise");
  EXPECT_DOUBLE_EQ(winner.median_us, 10.05);

  // 4. Beyond the noise the faster candidate takes over.
  options.source_hash = "tie-d";
  FakeBackend fourth(times(9.0, 10.05));
  run_fake_tune(options, database, fourth);
  winner = stored_winner(database);
  EXPECT_EQ(winner.split, 1);
  EXPECT_EQ(winner.reason, "fastest");

  db::Store store = db::Store::open(database);
  EXPECT_TRUE(store.check().empty());
}

TEST(WinnerStorage, NoWinnerWhenNothingIsValid) {
  TempDir dir;
  TuneOptions options = two_candidates();
  FakeBackend backend;
  backend.crash_all = true;
  const TuneReport report = run_fake_tune(options, dir / "q.db", backend);
  ASSERT_EQ(report.reports.size(), 1u);
  EXPECT_FALSE(report.reports[0].winner.has_value());
  EXPECT_EQ(report.winners, 0u);
  db::Store store = db::Store::open(dir / "q.db");
  EXPECT_TRUE(store.list_winners().empty());
  // Crashes are stored and the candidates never run again: a rerun measures nothing.
  FakeBackend rerun;
  run_fake_tune(options, dir / "q.db", rerun);
  EXPECT_EQ(rerun.calls.load(), 0u);
}

}  // namespace
}  // namespace qtune::tune

// Merging shard databases: every row arrives once, ids are remapped, shared problems and configs are not doubled,
// and merging the same shard again changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"
#include "tests/db/db_test_support.hpp"

namespace qtune::db {
namespace {

using test_support::expect_input_error;
using testing::TempDir;
namespace fs = std::filesystem;

// What one shard wrote, to compare against the merged file by content rather than by id.
struct ShardContent {
  std::set<std::string> run_uuids;
};

// Fills a shard as a tuning worker would: its own run, some problems shared with other shards, some configs shared.
ShardContent fill_shard(Store& store, int shard, int shard_count, const std::string& gpu_profile) {
  RunInfo info = testing::sample_run(gpu_profile);
  info.shard = std::to_string(shard) + "/" + std::to_string(shard_count);
  const RunId run = store.insert_run(info);
  for (int m : {1, 16, 256}) {
    // Problem N differs per shard; problem M=16 with N=4096 is in every shard.
    const ProblemId own = store.upsert_problem(Problem{"w4a16-int4-g128", m, 1024 * (shard + 1) * 8, 8192});
    const ProblemId shared = store.upsert_problem(Problem{"w4a16-int4-g128", 16, 4096, 4096});
    for (int tile : {64, 128, 256}) {
      const ConfigId config = store.upsert_config(testing::kernel_config(tile));
      CompileResult compile;
      compile.run = run;
      compile.config = config;
      compile.arch = "sm_90a";
      compile.registers = 100 + tile / 64 + shard;
      store.insert_compile(compile);
      for (const ProblemId problem : {own, shared}) {
        store.insert_verification(testing::passed(run, problem, config));
        store.insert_measurement(testing::ok_measurement(run, problem, config, 10.0 + tile / 64.0 + shard * 0.5 + m));
      }
    }
    const ConfigId best = *store.find_config(testing::kernel_config(64));
    store.set_winner(Winner{run, own, best, 11.0 + shard * 0.5 + m, "fastest"});
    store.set_pruning_count(PruningCount{run, own, PruningStage::PreCompile, "shared_memory", 5 + shard});
  }
  const ProblemId shared = *store.find_problem(Problem{"w4a16-int4-g128", 16, 4096, 4096});
  store.set_winner(Winner{run, shared, *store.find_config(testing::kernel_config(64)), 20.0 - shard, "fastest"});
  store.upsert_external_result(ExternalResult{"marlin", "v1", shared, gpu_profile, 30.0, ""});
  store.finish_run(run, RunStatus::Completed);
  return ShardContent{{store.get_run(run)->uuid}};
}

// A content key for every measurement, independent of ids: (run uuid, problem, config params, median).
std::multiset<std::tuple<std::string, std::string, std::string, double>> measurement_keys(Store& store) {
  std::map<std::int64_t, std::string> run_uuid;
  for (const auto& run : store.list_runs()) run_uuid[id_value(run.id)] = run.uuid;
  std::map<std::int64_t, std::string> problem_text;
  for (const auto& problem : store.list_problems()) {
    problem_text[id_value(problem.id)] = problem.format + ":" + std::to_string(problem.m) + "x" + std::to_string(problem.n) + "x" +
                                          std::to_string(problem.k);
  }
  std::map<std::int64_t, std::string> config_text;
  for (const auto& config : store.list_configs()) config_text[id_value(config.id)] = config.family + config.params_json;
  std::multiset<std::tuple<std::string, std::string, std::string, double>> keys;
  for (const auto& measurement : store.list_measurements()) {
    keys.emplace(run_uuid.at(id_value(measurement.run)), problem_text.at(id_value(measurement.problem)),
                 config_text.at(id_value(measurement.config)), measurement.stats->median_us);
  }
  return keys;
}

std::map<std::string, std::int64_t> counts(Store& store) {
  std::map<std::string, std::int64_t> result;
  for (const auto& count : store.table_counts()) result[count.table] = count.rows;
  return result;
}

TEST(Merge, ShardsCombineWithoutLossOrDuplication) {
  TempDir dir;
  const int shard_count = 3;
  std::vector<fs::path> shards;
  std::map<std::string, std::int64_t> expected_rows;
  std::multiset<std::tuple<std::string, std::string, std::string, double>> expected_measurements;
  for (int shard = 0; shard < shard_count; ++shard) {
    shards.push_back(dir / ("shard" + std::to_string(shard) + ".db"));
    Store store = Store::open(shards.back());
    fill_shard(store, shard, shard_count, "h200");
    for (const auto& [table, rows] : counts(store)) expected_rows[table] += rows;
    const auto keys = measurement_keys(store);
    expected_measurements.insert(keys.begin(), keys.end());
  }

  Store merged = Store::open(dir / "merged.db");
  for (const auto& shard : shards) {
    const MergeSummary summary = merged.merge(shard);
    EXPECT_EQ(summary.runs_added, 1);
    EXPECT_EQ(summary.runs_already_present, 0);
    EXPECT_EQ(summary.measurements_added, 3 * 3 * 2);
    EXPECT_EQ(summary.compiles_added, 9);
    EXPECT_EQ(summary.verifications_added, 18);
    EXPECT_EQ(summary.pruning_counts_changed, 3);
  }
  const auto rows = counts(merged);
  // Row-per-run tables add up exactly.
  for (const char* table : {"runs", "compiles", "verifications", "measurements", "pruning_counts"}) {
    EXPECT_EQ(rows.at(table), expected_rows.at(table)) << table;
  }
  // Problems and configs are deduplicated: each shard has 3 own problems + 1 shared, and the same 3 configs.
  EXPECT_EQ(rows.at("problems"), 3 * shard_count + 1);
  EXPECT_EQ(rows.at("kernel_configs"), 3);
  // One winner per (problem, gpu): each shard's own 3, plus one for the shared problem, the fastest (shard 2's 18 us).
  EXPECT_EQ(rows.at("winners"), 3 * shard_count + 1);
  const ProblemId shared = *merged.find_problem(Problem{"w4a16-int4-g128", 16, 4096, 4096});
  EXPECT_DOUBLE_EQ(merged.get_winner(shared, "h200")->median_us, 18.0);
  EXPECT_EQ(rows.at("external_results"), 1);
  EXPECT_EQ(measurement_keys(merged), expected_measurements);
  for (const auto& run : merged.list_runs()) EXPECT_EQ(run.status, RunStatus::Completed);
  EXPECT_TRUE(merged.check().empty());

  // Every merged row points at rows of the merged file with the right content: a winner's run is its shard's run.
  for (const auto& winner : merged.list_winners()) {
    const auto run = merged.get_run(winner.run);
    ASSERT_TRUE(run.has_value());
    EXPECT_EQ(run->gpu_key(), winner.gpu);
    EXPECT_FALSE(merged.list_verifications(RowFilter{.run = winner.run, .problem = winner.problem, .config = winner.config}).empty());
  }

  // Merging a shard again changes nothing.
  const auto bytes_of_counts = counts(merged);
  const MergeSummary again = merged.merge(shards[1]);
  EXPECT_EQ(again.runs_added, 0);
  EXPECT_EQ(again.runs_already_present, 1);
  EXPECT_EQ(again.problems_added, 0);
  EXPECT_EQ(again.configs_added, 0);
  EXPECT_EQ(again.compiles_added, 0);
  EXPECT_EQ(again.verifications_added, 0);
  EXPECT_EQ(again.measurements_added, 0);
  EXPECT_EQ(again.winners_changed, 0);
  EXPECT_EQ(again.pruning_counts_changed, 0);
  EXPECT_EQ(again.external_results_added, 0);
  EXPECT_EQ(counts(merged), bytes_of_counts);
  EXPECT_EQ(measurement_keys(merged), expected_measurements);
}

TEST(Merge, ShardMergedWhileRunningGetsItsLaterRows) {
  TempDir dir;
  const auto shard_file = dir / "shard.db";
  Store shard = Store::open(shard_file);
  const auto [run, problem, config] = testing::insert_sample_measurement(shard);

  Store merged = Store::open(dir / "merged.db");
  EXPECT_EQ(merged.merge(shard_file).measurements_added, 1);
  EXPECT_EQ(merged.list_runs()[0].status, RunStatus::Running);

  shard.insert_measurement(testing::ok_measurement(run, problem, config, 11));
  shard.finish_run(run, RunStatus::Interrupted);
  const MergeSummary later = merged.merge(shard_file);
  EXPECT_EQ(later.runs_added, 0);
  EXPECT_EQ(later.runs_already_present, 1);
  EXPECT_EQ(later.measurements_added, 1);
  EXPECT_EQ(merged.list_measurements().size(), 2u);
  EXPECT_EQ(merged.list_runs()[0].status, RunStatus::Interrupted);
}

TEST(Merge, IdsAreRemappedIntoANonEmptyTarget) {
  TempDir dir;
  Store target = Store::open(dir / "target.db");
  // The target already has rows with ids 1.. so copied rows must get new ids.
  const RunId own_run = target.insert_run(testing::sample_run("a100"));
  const ProblemId own_problem = target.upsert_problem(Problem{"w8a8-int8", 64, 1024, 1024});
  const ConfigId own_config = target.upsert_config(testing::kernel_config(32, "other"));
  target.insert_measurement(testing::ok_measurement(own_run, own_problem, own_config, 3));

  const auto shard_file = dir / "shard.db";
  {
    Store shard = Store::open(shard_file);
    const RunId run = shard.insert_run(testing::sample_run("h200"));
    const ProblemId problem = shard.upsert_problem(Problem{"w4a16-int4-g128", 1, 8192, 8192});
    const ConfigId config = shard.upsert_config(testing::kernel_config(128));
    shard.insert_verification(testing::passed(run, problem, config));
    shard.insert_measurement(testing::ok_measurement(run, problem, config, 10));
    shard.set_winner(Winner{run, problem, config, 10, "fastest"});
  }
  target.merge(shard_file);
  const auto problem = target.find_problem(Problem{"w4a16-int4-g128", 1, 8192, 8192});
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(*problem, own_problem);
  const auto winner = target.get_winner(*problem, "h200");
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(target.get_config(winner->config)->params_json, canonical_params(testing::kernel_config(128).params_json));
  EXPECT_EQ(target.get_run(winner->run)->gpu_profile, "h200");
  const auto measurements = target.list_measurements(RowFilter{.problem = *problem});
  ASSERT_EQ(measurements.size(), 1u);
  EXPECT_EQ(measurements[0].samples_us, testing::ok_measurement(RunId{}, ProblemId{}, ConfigId{}, 10).samples_us);
  EXPECT_TRUE(target.check().empty());
}

TEST(Merge, RefusesItselfMissingAndOlderFiles) {
  TempDir dir;
  Store target = Store::open(dir / "target.db");
  EXPECT_THROW(target.merge(dir / "target.db"), InputError);
  EXPECT_THROW(target.merge(dir / "missing.db"), InputError);
  {
    Connection connection(dir / "old.db", OpenMode::ReadWriteCreate);
    migrate(connection, 1);
  }
  expect_input_error([&] { target.merge(dir / "old.db"); }, {"qtune db init"});
  EXPECT_TRUE(target.list_runs().empty());
}

TEST(Merge, ASourceWithBrokenReferencesIsRefused) {
  TempDir dir;
  const auto shard_file = dir / "shard.db";
  {
    Store shard = Store::open(shard_file);
    shard.insert_run(testing::sample_run());
  }
  {
    // A compile of a config that does not exist: it could not be mapped, so merging would silently lose it.
    Connection raw(shard_file, OpenMode::ReadWrite);
    raw.execute("PRAGMA foreign_keys = OFF");
    raw.execute("INSERT INTO compiles (run_id, config_id, arch, status) VALUES (1, 999, 'sm_90a', 'ok')");
  }
  Store target = Store::open(dir / "target.db");
  expect_input_error([&] { target.merge(shard_file); }, {"qtune db check"});
  EXPECT_TRUE(target.list_runs().empty());
}

TEST(Merge, AFailedMergeLeavesTheTargetUnchanged) {
  TempDir dir;
  const auto shard_file = dir / "shard.db";
  {
    Store shard = Store::open(shard_file);
    testing::insert_sample_measurement(shard);
  }
  {
    // A row that breaks a CHECK constraint (written with checks off), so the copy fails half-way through.
    Connection raw(shard_file, OpenMode::ReadWrite);
    raw.execute("PRAGMA ignore_check_constraints = ON");
    raw.execute("INSERT INTO measurements (run_id, problem_id, config_id, status, median_us) VALUES (1, 1, 1, 'ok', -5)");
  }
  Store target = Store::open(dir / "target.db");
  target.insert_run(testing::sample_run());
  EXPECT_THROW(target.merge(shard_file), LibraryError);
  EXPECT_EQ(target.list_runs().size(), 1u);
  EXPECT_TRUE(target.list_problems().empty());
  EXPECT_TRUE(target.list_configs().empty());
  EXPECT_TRUE(target.list_measurements().empty());
  EXPECT_FALSE(target.connection().in_transaction());
  // The failed source was detached: a later merge of a good file works.
  const auto good_file = dir / "good.db";
  {
    Store good = Store::open(good_file);
    good.insert_run(testing::sample_run());
  }
  EXPECT_EQ(target.merge(good_file).runs_added, 1);
}

}  // namespace
}  // namespace qtune::db

// Every insert and query of the store, the rules it enforces, and all-or-nothing transactions (also across a kill).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/db/db_test_support.hpp"

namespace qtune::db {
namespace {

using testing::TempDir;

class StoreTest : public ::testing::Test {
 protected:
  TempDir dir_;
  Store store_ = Store::open(dir_ / "store.db");
};

TEST_F(StoreTest, RunRoundTrip) {
  RunInfo info = testing::sample_run();
  info.shard = "2/8";
  const RunId id = store_.insert_run(info);
  const auto run = store_.get_run(id);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->uuid.size(), 36u);
  EXPECT_EQ(run->uuid[14], '4');  // random (version 4) uuid
  EXPECT_EQ(run->status, RunStatus::Running);
  EXPECT_FALSE(run->finished_at.has_value());
  EXPECT_EQ(run->started_at.size(), std::string("2025-01-01T00:00:00.000Z").size());
  EXPECT_EQ(run->tool_version, info.tool_version);
  EXPECT_EQ(run->git_sha, info.git_sha);
  EXPECT_EQ(run->cuda_version, info.cuda_version);
  EXPECT_EQ(run->driver_version, info.driver_version);
  EXPECT_EQ(run->host, info.host);
  EXPECT_EQ(run->gpu_name, info.gpu_name);
  EXPECT_EQ(run->gpu_uuid, info.gpu_uuid);
  EXPECT_EQ(run->gpu_profile, "h200");
  EXPECT_EQ(run->sm, 90);
  EXPECT_EQ(run->sm_count, 132);
  EXPECT_EQ(run->sm_clock_mhz, 1980);
  EXPECT_EQ(run->mem_clock_mhz, 2619);
  EXPECT_EQ(run->command_line, info.command_line);
  EXPECT_EQ(run->shard, "2/8");
  EXPECT_EQ(run->notes, "test");
  EXPECT_EQ(run->gpu_key(), "h200");

  store_.finish_run(id, RunStatus::Completed);
  const auto finished = store_.get_run(id);
  EXPECT_EQ(finished->status, RunStatus::Completed);
  EXPECT_TRUE(finished->finished_at.has_value());
  EXPECT_THROW(store_.finish_run(RunId{999}, RunStatus::Failed), Error);

  EXPECT_EQ(store_.find_run(run->uuid)->id, id);
  EXPECT_FALSE(store_.find_run("no-such-uuid").has_value());
  EXPECT_FALSE(store_.get_run(RunId{999}).has_value());

  RunInfo given = testing::sample_run("");
  given.uuid = "fixed-uuid";
  given.started_at = "2024-05-01T10:00:00.000Z";
  const RunId second = store_.insert_run(given);
  EXPECT_EQ(store_.get_run(second)->uuid, "fixed-uuid");
  EXPECT_EQ(store_.get_run(second)->started_at, "2024-05-01T10:00:00.000Z");
  EXPECT_EQ(store_.get_run(second)->gpu_key(), "NVIDIA H200");  // no profile: the device name
  EXPECT_THROW(store_.insert_run(given), LibraryError);          // the uuid is unique
  EXPECT_EQ(store_.list_runs().size(), 2u);
}

TEST_F(StoreTest, RunNeedsToolVersionAndSha) {
  RunInfo info = testing::sample_run();
  info.git_sha.clear();
  EXPECT_THROW(store_.insert_run(info), Error);
  EXPECT_TRUE(store_.list_runs().empty());
}

TEST_F(StoreTest, ProblemsAreUniqueByFormatAndShape) {
  const Problem problem{"w4a16-int4-g128", 16, 8192, 8192};
  const ProblemId first = store_.upsert_problem(problem);
  EXPECT_EQ(store_.upsert_problem(problem), first);
  const ProblemId other = store_.upsert_problem(Problem{"w4a16-int4-g128", 32, 8192, 8192});
  EXPECT_NE(other, first);
  EXPECT_EQ(store_.find_problem(problem), first);
  EXPECT_FALSE(store_.find_problem(Problem{"w8a8-fp8", 16, 8192, 8192}).has_value());
  const auto record = store_.get_problem(first);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(static_cast<const Problem&>(*record), problem);
  EXPECT_EQ(store_.list_problems().size(), 2u);
  EXPECT_THROW(store_.upsert_problem(Problem{"w4a16-int4-g128", 0, 1, 1}), Error);
  EXPECT_THROW(store_.upsert_problem(Problem{"", 1, 1, 1}), Error);
}

TEST_F(StoreTest, ConfigParamsAreCanonical) {
  KernelConfig config;
  config.family = "mma";
  config.params_json = R"({ "tile_n": 128, "stages": 3, "tile_m": 64 })";
  config.source_hash = "abc";
  const ConfigId id = store_.upsert_config(config);
  KernelConfig reordered = config;
  reordered.params_json = R"({"tile_m":64,"stages":3,"tile_n":128})";
  EXPECT_EQ(store_.upsert_config(reordered), id);
  EXPECT_EQ(store_.get_config(id)->params_json, R"({"stages":3,"tile_m":64,"tile_n":128})");
  EXPECT_EQ(store_.find_config(reordered), id);

  KernelConfig rebuilt = config;
  rebuilt.source_hash = "def";  // the same parameters built from other sources are another configuration
  EXPECT_NE(store_.upsert_config(rebuilt), id);
  KernelConfig baseline;
  baseline.kind = ConfigKind::Baseline;
  baseline.family = "cublaslt-bf16";
  baseline.params_json = R"({"algo": 3})";
  const ConfigId baseline_id = store_.upsert_config(baseline);
  EXPECT_EQ(store_.get_config(baseline_id)->kind, ConfigKind::Baseline);
  EXPECT_EQ(store_.list_configs().size(), 3u);

  KernelConfig broken = config;
  broken.params_json = "{tile_n: 128";
  EXPECT_THROW(store_.upsert_config(broken), InputError);
  broken.params_json = "[1, 2]";
  EXPECT_THROW(store_.upsert_config(broken), InputError);
  EXPECT_EQ(canonical_params(R"({"b": [1, 2], "a": {"y": 1, "x": 2}})"), R"({"a":{"x":2,"y":1},"b":[1,2]})");
}

TEST_F(StoreTest, CompileRoundTripAndFilter) {
  const RunId run = store_.insert_run(testing::sample_run());
  const ConfigId config = store_.upsert_config(testing::kernel_config(128));
  const ConfigId other = store_.upsert_config(testing::kernel_config(256));
  CompileResult compile;
  compile.run = run;
  compile.config = config;
  compile.format = "w4a16-int4-g128";
  compile.arch = "sm_90a";
  compile.cache_key = "f00d";
  compile.cache_hit = true;
  compile.compile_seconds = 0.75;
  compile.registers = 168;
  compile.spill_store_bytes = 0;
  compile.spill_load_bytes = 4;
  compile.shared_bytes = 98304;
  compile.stack_bytes = 16;
  compile.status = CompileStatus::Ok;
  const CompileId id = store_.insert_compile(compile);
  CompileResult failed;
  failed.run = run;
  failed.config = other;
  failed.arch = "sm_90a";
  failed.status = CompileStatus::Failed;
  failed.message = "error: identifier \"x\" is undefined";
  store_.insert_compile(failed);

  const auto all = store_.list_compiles();
  ASSERT_EQ(all.size(), 2u);
  const CompileRecord& record = all[0];
  EXPECT_EQ(record.id, id);
  EXPECT_EQ(record.run, run);
  EXPECT_EQ(record.config, config);
  EXPECT_EQ(record.format, "w4a16-int4-g128");
  EXPECT_EQ(record.arch, "sm_90a");
  EXPECT_EQ(record.cache_key, "f00d");
  EXPECT_TRUE(record.cache_hit);
  EXPECT_DOUBLE_EQ(*record.compile_seconds, 0.75);
  EXPECT_EQ(record.registers, 168);
  EXPECT_EQ(record.spill_store_bytes, 0);
  EXPECT_EQ(record.spill_load_bytes, 4);
  EXPECT_EQ(record.shared_bytes, 98304);
  EXPECT_EQ(record.stack_bytes, 16);
  EXPECT_EQ(record.status, CompileStatus::Ok);
  EXPECT_FALSE(record.created_at.empty());
  EXPECT_EQ(all[1].status, CompileStatus::Failed);
  EXPECT_EQ(all[1].message, failed.message);
  EXPECT_FALSE(all[1].registers.has_value());

  EXPECT_EQ(store_.list_compiles(RowFilter{.config = other}).size(), 1u);
  EXPECT_EQ(store_.list_compiles(RowFilter{.gpu = "h200"}).size(), 2u);
  EXPECT_TRUE(store_.list_compiles(RowFilter{.gpu = "a100"}).empty());
  compile.config = ConfigId{999};
  EXPECT_THROW(store_.insert_compile(compile), LibraryError);  // foreign key
}

TEST_F(StoreTest, VerificationRoundTrip) {
  const RunId run = store_.insert_run(testing::sample_run());
  const ProblemId problem = store_.upsert_problem(Problem{"w8a8-fp8-ch", 64, 4096, 4096});
  const ConfigId config = store_.upsert_config(testing::kernel_config(128));
  Verification verification = testing::passed(run, problem, config);
  const VerificationId id = store_.insert_verification(verification);
  verification.status = VerificationStatus::Crashed;
  verification.max_rel_error.reset();
  verification.message = "illegal address";
  store_.insert_verification(verification);

  const auto all = store_.list_verifications(RowFilter{.problem = problem});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, id);
  EXPECT_EQ(all[0].status, VerificationStatus::Passed);
  EXPECT_DOUBLE_EQ(*all[0].max_rel_error, 1.5e-3);
  EXPECT_DOUBLE_EQ(*all[0].max_abs_error, 2e-2);
  EXPECT_DOUBLE_EQ(*all[0].tolerance, 1e-2);
  EXPECT_EQ(all[1].status, VerificationStatus::Crashed);
  EXPECT_FALSE(all[1].max_rel_error.has_value());
  EXPECT_EQ(all[1].message, "illegal address");
  EXPECT_TRUE(store_.list_verifications(RowFilter{.run = RunId{42}}).empty());
}

TEST_F(StoreTest, MeasurementRoundTripKeepsEverySampleExactly) {
  const auto [run, problem, config] = testing::insert_sample_rows(store_);
  Measurement measurement = testing::ok_measurement(run, problem, config, 21.75);
  measurement.samples_us.push_back(std::nextafter(21.75, 100.0));  // exactness down to the last bit
  measurement.samples_us.push_back(std::numeric_limits<double>::denorm_min());
  measurement.sample_count = 400;  // more taken than kept
  measurement.l2_mode = L2Mode::Warm;
  measurement.throttled = true;
  measurement.phase = "halving-2";
  const MeasurementId id = store_.insert_measurement(measurement);

  const auto all = store_.list_measurements();
  ASSERT_EQ(all.size(), 1u);
  const MeasurementRecord& record = all[0];
  EXPECT_EQ(record.id, id);
  EXPECT_EQ(record.run, run);
  EXPECT_EQ(record.problem, problem);
  EXPECT_EQ(record.config, config);
  EXPECT_EQ(record.status, MeasurementStatus::Ok);
  ASSERT_TRUE(record.stats.has_value());
  const TimingStats expected = testing::stats_around(21.75);
  EXPECT_EQ(record.stats->median_us, expected.median_us);
  EXPECT_EQ(record.stats->p10_us, expected.p10_us);
  EXPECT_EQ(record.stats->p90_us, expected.p90_us);
  EXPECT_EQ(record.stats->min_us, expected.min_us);
  EXPECT_EQ(record.stats->max_us, expected.max_us);
  EXPECT_EQ(record.stats->mean_us, expected.mean_us);
  EXPECT_EQ(record.stats->stddev_us, expected.stddev_us);
  EXPECT_EQ(record.stats->ci_low_us, expected.ci_low_us);
  EXPECT_EQ(record.stats->ci_high_us, expected.ci_high_us);
  EXPECT_EQ(record.samples_us, measurement.samples_us);
  EXPECT_EQ(record.sample_count, 400);
  EXPECT_EQ(record.l2_mode, L2Mode::Warm);
  EXPECT_EQ(record.sm_clock_mhz, 1980);
  EXPECT_EQ(record.mem_clock_mhz, 2619);
  EXPECT_EQ(record.temperature_c, 51.5);
  EXPECT_EQ(record.power_w, 612.25);
  EXPECT_TRUE(record.throttled);
  EXPECT_EQ(record.phase, "halving-2");

  // Stored as little-endian float64: 8 bytes a sample.
  Statement length = store_.connection().prepare("SELECT length(samples) FROM measurements");
  ASSERT_TRUE(length.step());
  EXPECT_EQ(length.column_int(0), static_cast<std::int64_t>(8 * measurement.samples_us.size()));

  Measurement crashed;
  crashed.run = run;
  crashed.problem = problem;
  crashed.config = config;
  crashed.status = MeasurementStatus::Crashed;
  crashed.message = "worker killed by SIGSEGV";
  store_.insert_measurement(crashed);
  const auto both = store_.list_measurements(RowFilter{.run = run, .problem = problem, .config = config, .gpu = "h200"});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_FALSE(both[1].stats.has_value());
  EXPECT_TRUE(both[1].samples_us.empty());
  EXPECT_EQ(both[1].sample_count, 0);
  EXPECT_EQ(both[1].message, crashed.message);
}

TEST_F(StoreTest, ImpossibleMeasurementsAreRefused) {
  const auto [run, problem, config] = testing::insert_sample_rows(store_);
  Measurement no_stats = testing::ok_measurement(run, problem, config, 10);
  no_stats.stats.reset();
  EXPECT_THROW(store_.insert_measurement(no_stats), Error);
  Measurement unordered = testing::ok_measurement(run, problem, config, 10);
  unordered.stats->p90_us = 5;
  EXPECT_THROW(store_.insert_measurement(unordered), Error);
  Measurement nan = testing::ok_measurement(run, problem, config, 10);
  nan.samples_us[2] = std::nan("");
  EXPECT_THROW(store_.insert_measurement(nan), Error);
  Measurement too_few = testing::ok_measurement(run, problem, config, 10);
  too_few.sample_count = 2;
  EXPECT_THROW(store_.insert_measurement(too_few), Error);
  EXPECT_TRUE(store_.list_measurements().empty());
}

TEST_F(StoreTest, WinnerNeedsAPassedVerificationOnThatGpu) {
  const RunId run = store_.insert_run(testing::sample_run("h200"));
  const RunId other_gpu_run = store_.insert_run(testing::sample_run("a100"));
  const ProblemId problem = store_.upsert_problem(Problem{"w4a16-int4-g128", 1, 8192, 8192});
  const ConfigId good = store_.upsert_config(testing::kernel_config(128));
  const ConfigId bad = store_.upsert_config(testing::kernel_config(256));
  const ConfigId unverified = store_.upsert_config(testing::kernel_config(64));

  store_.insert_verification(testing::passed(run, problem, good));
  store_.insert_verification(testing::passed(run, problem, bad));
  store_.insert_verification(testing::failed(run, problem, bad));
  store_.insert_verification(testing::passed(other_gpu_run, problem, unverified));  // verified, but on another GPU

  EXPECT_THROW(store_.set_winner(Winner{run, problem, bad, 9.0, "fastest"}), Error);
  EXPECT_THROW(store_.set_winner(Winner{run, problem, unverified, 9.0, "fastest"}), Error);
  EXPECT_FALSE(store_.get_winner(problem, "h200").has_value());

  store_.set_winner(Winner{run, problem, good, 10.0, "fastest"});
  auto winner = store_.get_winner(problem, "h200");
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(winner->config, good);
  EXPECT_EQ(winner->run, run);
  EXPECT_EQ(winner->gpu, "h200");
  EXPECT_DOUBLE_EQ(winner->median_us, 10.0);
  EXPECT_EQ(winner->reason, "fastest");
  EXPECT_FALSE(winner->decided_at.empty());

  // A later decision replaces it: one winner per (problem, GPU).
  store_.set_winner(Winner{run, problem, good, 9.5, "re-measured"});
  EXPECT_DOUBLE_EQ(store_.get_winner(problem, "h200")->median_us, 9.5);
  store_.set_winner(Winner{other_gpu_run, problem, unverified, 20.0, "fastest"});
  EXPECT_EQ(store_.list_winners().size(), 2u);
  EXPECT_EQ(store_.list_winners(std::string("a100")).size(), 1u);
  EXPECT_EQ(store_.list_winners(std::string("a100"))[0].config, unverified);
}

TEST_F(StoreTest, BaselinesNeverWin) {
  const RunId run = store_.insert_run(testing::sample_run());
  const ProblemId problem = store_.upsert_problem(Problem{"w8a8-fp8-tensor", 128, 8192, 8192});
  KernelConfig baseline;
  baseline.kind = ConfigKind::Baseline;
  baseline.family = "cublaslt-fp8";
  const ConfigId id = store_.upsert_config(baseline);
  store_.insert_verification(testing::passed(run, problem, id));
  EXPECT_THROW(store_.set_winner(Winner{run, problem, id, 5.0, "fastest"}), Error);
}

TEST_F(StoreTest, BestMeasurementSkipsFailedVerificationsBaselinesAndOtherGpus) {
  const RunId run = store_.insert_run(testing::sample_run("h200"));
  const RunId a100 = store_.insert_run(testing::sample_run("a100"));
  const ProblemId problem = store_.upsert_problem(Problem{"w4a16-int4-g128", 8, 8192, 8192});
  const ConfigId slow = store_.upsert_config(testing::kernel_config(64));
  const ConfigId wrong = store_.upsert_config(testing::kernel_config(128));
  const ConfigId fast = store_.upsert_config(testing::kernel_config(256));
  KernelConfig baseline_config;
  baseline_config.kind = ConfigKind::Baseline;
  baseline_config.family = "cublaslt-f16";
  const ConfigId baseline = store_.upsert_config(baseline_config);

  store_.insert_verification(testing::failed(run, problem, wrong));
  store_.insert_measurement(testing::ok_measurement(run, problem, slow, 30));
  store_.insert_measurement(testing::ok_measurement(run, problem, wrong, 5));      // fastest, but wrong
  store_.insert_measurement(testing::ok_measurement(run, problem, baseline, 6));   // a baseline
  store_.insert_measurement(testing::ok_measurement(a100, problem, fast, 4));      // another GPU
  store_.insert_measurement(testing::ok_measurement(run, problem, fast, 12));
  Measurement warm = testing::ok_measurement(run, problem, slow, 7);
  warm.l2_mode = L2Mode::Warm;
  store_.insert_measurement(warm);

  const auto best = store_.best_measurement(problem, "h200");
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->config, fast);
  EXPECT_DOUBLE_EQ(best->stats->median_us, 12);
  EXPECT_EQ(store_.best_measurement(problem, "h200", L2Mode::Warm)->config, slow);
  EXPECT_EQ(store_.best_measurement(problem, "a100")->config, fast);
  EXPECT_FALSE(store_.best_measurement(problem, "l40s").has_value());
}

TEST_F(StoreTest, PruningCountsAreSetNotAdded) {
  const RunId run = store_.insert_run(testing::sample_run());
  const ProblemId problem = store_.upsert_problem(Problem{"w4a16-int4-g128", 1, 8192, 8192});
  store_.set_pruning_count(PruningCount{run, problem, PruningStage::PreCompile, "shared_memory", 12});
  store_.set_pruning_count(PruningCount{run, problem, PruningStage::PostCompile, "spills", 3});
  store_.set_pruning_count(PruningCount{run, problem, PruningStage::PreCompile, "shared_memory", 14});  // a resumed run recounts
  const auto counts = store_.list_pruning_counts(RowFilter{.run = run});
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].stage, PruningStage::PreCompile);
  EXPECT_EQ(counts[0].rule, "shared_memory");
  EXPECT_EQ(counts[0].count, 14);
  EXPECT_EQ(counts[1].stage, PruningStage::PostCompile);
  EXPECT_EQ(counts[1].count, 3);
  EXPECT_THROW(store_.set_pruning_count(PruningCount{run, problem, PruningStage::PreCompile, "", 1}), Error);
}

TEST_F(StoreTest, ExternalResultsUpsertByKey) {
  const ProblemId problem = store_.upsert_problem(Problem{"w4a16-int4-g128", 16, 8192, 8192});
  const ExternalResultId id = store_.upsert_external_result(ExternalResult{"marlin", "v0.6", problem, "h200", 25.0, ""});
  EXPECT_EQ(store_.upsert_external_result(ExternalResult{"marlin", "v0.6", problem, "h200", 24.0, "rerun"}), id);
  store_.upsert_external_result(ExternalResult{"humming", "", problem, "h200", 22.0, ""});
  const auto results = store_.list_external_results(problem);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].id, id);
  EXPECT_DOUBLE_EQ(results[0].time_us, 24.0);
  EXPECT_EQ(results[0].notes, "rerun");
  EXPECT_EQ(results[1].source, "humming");
  EXPECT_THROW(store_.upsert_external_result(ExternalResult{"x", "", problem, "h200", -1.0, ""}), Error);
  EXPECT_THROW(store_.upsert_external_result(ExternalResult{"x", "", ProblemId{999}, "h200", 1.0, ""}), LibraryError);
}

TEST_F(StoreTest, TableCountsAndRunSummaries) {
  const auto [run, problem, config] = testing::insert_sample_rows(store_);
  store_.insert_verification(testing::passed(run, problem, config));
  store_.insert_measurement(testing::ok_measurement(run, problem, config, 10));
  store_.insert_measurement(testing::ok_measurement(run, problem, config, 11));
  store_.set_winner(Winner{run, problem, config, 10, "fastest"});
  std::map<std::string, std::int64_t> counts;
  for (const auto& count : store_.table_counts()) counts[count.table] = count.rows;
  EXPECT_EQ(counts.size(), 13u);  // schema version 4 added moe_problems, moe_results, moe_winners
  EXPECT_EQ(counts["runs"], 1);
  EXPECT_EQ(counts["run_processes"], 1);
  EXPECT_EQ(counts["measurements"], 2);
  EXPECT_EQ(counts["winners"], 1);
  EXPECT_EQ(counts["compiles"], 0);
  const auto summaries = store_.run_summaries();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].measurements, 2);
  EXPECT_EQ(summaries[0].verifications, 1);
  EXPECT_EQ(summaries[0].winners, 1);
  EXPECT_EQ(summaries[0].compiles, 0);
}

TEST_F(StoreTest, AnErrorInsideATransactionLeavesNothing) {
  try {
    auto transaction = store_.transaction();
    const auto [run, problem, config] = testing::insert_sample_measurement(store_);
    store_.insert_measurement(testing::ok_measurement(run, problem, ConfigId{12345}, 10));  // foreign key fails
    transaction.commit();
    FAIL() << "the foreign key violation was accepted";
  } catch (const LibraryError& error) {
    EXPECT_NE(std::string(error.what()).find("FOREIGN KEY"), std::string::npos) << error.what();
  }
  for (const auto& count : store_.table_counts()) EXPECT_EQ(count.rows, 0) << count.table;
  EXPECT_FALSE(store_.connection().in_transaction());
}

TEST_F(StoreTest, NestedTransactionRollsBackOnlyItsPart) {
  auto outer = store_.transaction();
  store_.upsert_problem(Problem{"kept", 1, 1, 1});
  {
    auto inner = store_.transaction();
    store_.upsert_problem(Problem{"dropped", 1, 1, 1});
  }  // not committed: rolled back to the savepoint
  outer.commit();
  const auto problems = store_.list_problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].format, "kept");
}

TEST_F(StoreTest, CommittedTransactionPersists) {
  {
    auto transaction = store_.transaction();
    store_.insert_run(testing::sample_run());
    store_.upsert_problem(Problem{"f", 1, 2, 3});
    transaction.commit();
    EXPECT_THROW(transaction.commit(), Error);
  }
  Store reopened = Store::open(store_.path());
  EXPECT_EQ(reopened.list_runs().size(), 1u);
  EXPECT_EQ(reopened.list_problems().size(), 1u);
}

// A process killed in the middle of a transaction (as Ctrl-C or a crash would) leaves nothing of it behind,
// and what it committed before survives.
TEST(StoreCrash, KilledWriterLeavesOnlyCommittedUnits) {
  TempDir dir;
  const auto file = dir / "crash.db";
  { Store store = Store::open(file); }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Store store = Store::open(file);
    const auto [run, problem, config] = testing::insert_sample_measurement(store);  // committed on its own
    auto transaction = store.transaction();
    for (int i = 0; i < 50; ++i) store.insert_measurement(testing::ok_measurement(run, problem, config, 20 + i));
    store.upsert_problem(Problem{"never-committed", 1, 1, 1});
    kill(getpid(), SIGKILL);
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  Store store = Store::open(file);
  EXPECT_EQ(store.list_runs().size(), 1u);
  const auto measurements = store.list_measurements();
  ASSERT_EQ(measurements.size(), 1u);
  EXPECT_DOUBLE_EQ(measurements[0].stats->median_us, 10);
  EXPECT_FALSE(store.find_problem(Problem{"never-committed", 1, 1, 1}).has_value());
  // The killed run is still marked running: check says its process is gone, and the next run marks it interrupted.
  const auto findings = store.check();
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_NE(findings[0].find("run #1 is marked running, but its process (pid " + std::to_string(child)), std::string::npos) << findings[0];
  store.insert_run(testing::sample_run());
  EXPECT_EQ(store.list_runs()[0].status, RunStatus::Interrupted);
  EXPECT_TRUE(store.check().empty());
}

TEST(StoreConcurrency, TwoConnectionsShareOneFile) {
  TempDir dir;
  Store first = Store::open(dir / "shared.db");
  Store second = Store::open(dir / "shared.db");
  const RunId run = first.insert_run(testing::sample_run());
  const ProblemId problem = second.upsert_problem(Problem{"w4a16-int4-g128", 1, 8192, 8192});
  const ConfigId config = first.upsert_config(testing::kernel_config(128));
  second.insert_measurement(testing::ok_measurement(run, problem, config, 10));
  EXPECT_EQ(first.list_measurements().size(), 1u);
}

// Tuning workers (one per GPU) open the same new file at once: one creates the schema, all of them write.
TEST(StoreConcurrency, ThreadsOpeningANewFileAtOnce) {
  TempDir dir;
  const auto file = dir / "workers.db";
  constexpr int kWorkers = 4;
  constexpr int kRunsEach = 20;
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int worker = 0; worker < kWorkers; ++worker) {
    workers.emplace_back([&, worker] {
      try {
        Store store = Store::open(file);
        for (int i = 0; i < kRunsEach; ++i) {
          auto transaction = store.transaction();
          const RunId run = store.insert_run(testing::sample_run());
          const ProblemId problem = store.upsert_problem(Problem{"w4a16-int4-g128", 1 + i, 8192, 8192});
          const ConfigId config = store.upsert_config(testing::kernel_config(64 * (1 + worker % 2)));
          store.insert_measurement(testing::ok_measurement(run, problem, config, 10 + worker));
          transaction.commit();
        }
      } catch (const std::exception& error) {
        ADD_FAILURE() << "worker " << worker << ": " << error.what();
        ++failures;
      }
    });
  }
  for (auto& worker : workers) worker.join();
  ASSERT_EQ(failures.load(), 0);
  Store store = Store::open(file);
  EXPECT_EQ(store.list_runs().size(), static_cast<std::size_t>(kWorkers * kRunsEach));
  EXPECT_EQ(store.list_measurements().size(), static_cast<std::size_t>(kWorkers * kRunsEach));
  EXPECT_EQ(store.list_problems().size(), static_cast<std::size_t>(kRunsEach));
  EXPECT_EQ(store.list_configs().size(), 2u);
  EXPECT_TRUE(store.check().empty());
}

TEST(StoreEnums, TextsMatchTheSchema) {
  EXPECT_EQ(to_string(RunStatus::Interrupted), "interrupted");
  EXPECT_EQ(to_string(ConfigKind::Baseline), "baseline");
  EXPECT_EQ(to_string(CompileStatus::Invalid), "invalid");
  EXPECT_EQ(to_string(VerificationStatus::Crashed), "crashed");
  EXPECT_EQ(to_string(MeasurementStatus::Timeout), "timeout");
  EXPECT_EQ(to_string(L2Mode::Warm), "warm");
  EXPECT_EQ(to_string(PruningStage::PostCompile), "post_compile");
}

}  // namespace
}  // namespace qtune::db

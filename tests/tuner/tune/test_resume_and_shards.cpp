// Resume after the tuning process is killed outright (fork + SIGKILL mid-run), and sharded tunes merged back
// together: in both, no measurement is lost or duplicated, and the winners equal those of one uninterrupted run.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include "db/store.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

size_t count_verifications(const fs::path& database) {
  std::error_code error;
  if (!fs::exists(database, error)) return 0;
  try {
    db::Store store = db::Store::open_read_only(database);
    return store.list_verifications().size();
  } catch (const std::exception&) {
    return 0;  // not created yet, or still being migrated by the child
  }
}

TEST(TuneResume, KillMidRunLosesNothingAndTheRerunDuplicatesNothing) {
  TempDir dir;
  const TuneOptions options = small_options();
  FakeBackend reference_backend;
  run_fake_tune(options, dir / "reference.db", reference_backend);
  const size_t total_jobs = reference_backend.calls.load();
  ASSERT_GT(total_jobs, 40u);

  const fs::path database = dir / "killed.db";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child tunes slowly until it is killed; it must never get to finish.
    try {
      FakeBackend slow(fake_time_us, std::chrono::milliseconds(15));
      run_fake_tune(options, database, slow);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  // Kill it outright once a good share of the jobs is stored, in the middle of the next one.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  size_t stored = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    stored = count_verifications(database);
    if (stored >= total_jobs / 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before it was killed (exit status " << WEXITSTATUS(status) << ")";
  ASSERT_GE(stored, total_jobs / 3);

  // What the killed run committed is intact.
  std::set<std::int64_t> before_ids;
  size_t before_verifications = 0;
  {
    db::Store store = db::Store::open(database);
    EXPECT_EQ(store.list_runs().at(0).status, db::RunStatus::Running);  // it never got to say otherwise
    const auto findings = store.check();  // but its process is gone, and check says so
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_NE(findings[0].find("run #1 is marked running, but its process (pid " + std::to_string(child) + " on "), std::string::npos)
        << findings[0];
    for (const auto& measurement : store.list_measurements()) before_ids.insert(db::id_value(measurement.id));
    before_verifications = store.list_verifications().size();
    ASSERT_LT(before_verifications, total_jobs);
  }

  FakeBackend rerun_backend;
  const TuneReport report = run_fake_tune(options, database, rerun_backend);
  EXPECT_FALSE(report.interrupted);
  EXPECT_EQ(rerun_backend.calls.load() + before_verifications, total_jobs)
      << "the rerun must measure exactly the (problem, config) pairs the killed run had not stored";

  db::Store store = db::Store::open(database);
  db::Store reference = db::Store::open(dir / "reference.db");
  EXPECT_EQ(store.list_runs().at(0).status, db::RunStatus::Interrupted);  // marked by the rerun
  EXPECT_TRUE(store.check().empty());
  std::set<std::int64_t> after_ids;
  for (const auto& measurement : store.list_measurements()) after_ids.insert(db::id_value(measurement.id));
  for (std::int64_t id : before_ids) EXPECT_TRUE(after_ids.count(id)) << "measurement #" << id << " was lost";
  const auto keys = measurement_keys(store);
  for (const auto& [key, count] : keys) EXPECT_EQ(count, 1) << std::get<0>(key) << " " << std::get<1>(key) << " duplicated";
  EXPECT_EQ(keys, measurement_keys(reference));
  EXPECT_EQ(winner_map(store), winner_map(reference));
  EXPECT_EQ(winner_map(store).size(), options.problems.size());
}

TEST(TuneShards, ShardsAreDisjointAndTheirMergeEqualsOneRun) {
  TempDir dir;
  const TuneOptions all = small_options();
  FakeBackend whole_backend;
  run_fake_tune(all, dir / "whole.db", whole_backend);

  const int shards = 3;
  size_t shard_jobs = 0;
  std::set<std::string> seen;
  for (int index = 0; index < shards; ++index) {
    TuneOptions part = all;
    part.shard = Shard{index, shards};
    part.problems = select_shard(all.problems, part.shard);
    for (const Problem& problem : part.problems) EXPECT_TRUE(seen.insert(problem_key(problem)).second);
    FakeBackend backend;
    run_fake_tune(part, dir / ("shard" + std::to_string(index) + ".db"), backend);
    shard_jobs += backend.calls.load();
    db::Store store = db::Store::open(dir / ("shard" + std::to_string(index) + ".db"));
    EXPECT_EQ(store.list_runs().at(0).shard, std::to_string(index) + "/" + std::to_string(shards));
  }
  EXPECT_EQ(seen.size(), all.problems.size());
  EXPECT_EQ(shard_jobs, whole_backend.calls.load());

  db::Store merged = db::Store::open(dir / "merged.db");
  size_t measurements = 0;
  for (int index = 0; index < shards; ++index) {
    const db::MergeSummary summary = merged.merge(dir / ("shard" + std::to_string(index) + ".db"));
    measurements += static_cast<size_t>(summary.measurements_added);
  }
  // Merging a shard twice adds nothing.
  const db::MergeSummary again = merged.merge(dir / "shard0.db");
  EXPECT_EQ(again.measurements_added, 0);
  EXPECT_EQ(again.winners_changed, 0);

  db::Store whole = db::Store::open(dir / "whole.db");
  EXPECT_EQ(measurements, whole.list_measurements().size());
  EXPECT_EQ(merged.list_measurements().size(), whole.list_measurements().size());
  EXPECT_EQ(merged.list_verifications().size(), whole.list_verifications().size());
  const auto keys = measurement_keys(merged);
  for (const auto& [key, count] : keys) EXPECT_EQ(count, 1) << std::get<0>(key) << " " << std::get<1>(key);
  EXPECT_EQ(keys, measurement_keys(whole));
  EXPECT_EQ(winner_map(merged), winner_map(whole));
  EXPECT_TRUE(merged.check().empty());

  // A rerun of the whole set on the merged file finds every winner final.
  FakeBackend after_merge;
  const TuneReport report = run_fake_tune(all, dir / "merged.db", after_merge);
  EXPECT_EQ(after_merge.calls.load(), 0u);
  EXPECT_EQ(report.skipped_final, all.problems.size());
}

}  // namespace
}  // namespace qtune::tune

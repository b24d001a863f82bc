// `qtune compile` as a library call (tuner/tune/compile_run.hpp): NVRTC builds a configuration for sm_90a without a
// GPU, and the run and its compile rows land in the store.
#include <gtest/gtest.h>

#include <string>

#include "db/store.hpp"
#include "kernels/family.hpp"
#include "tests/common/temp_dir.hpp"
#include "tuner/tune/compile_run.hpp"

namespace qtune::tune {
namespace {

// Counts the progress callbacks the compile makes.
class CountingObserver final : public TuneObserver {
 public:
  void compile_progress(std::size_t done, std::size_t total) override {
    ++calls;
    last_done = done;
    last_total = total;
  }
  int calls = 0;
  std::size_t last_done = 0;
  std::size_t last_total = 0;
};

CompileRunRequest heuristic_request(const test_support::TempDir& dir) {
  CompileRunRequest request;
  request.family = &find_family("mma");
  request.problem = Problem{FormatSpec::parse("w4a16-int4-g128"), 16, 8192, 8192, false};
  request.arch = "sm_90a";
  request.sm = 90;
  request.configs = {request.family->default_config(request.problem, ArchLimits::for_sm(90))};
  request.compiler.threads = 1;
  request.compiler.cache_directory = dir / "cache";
  request.command_line = "qtune compile --arch sm_90a";
  return request;
}

TEST(RunCompile, CompilesOneConfigWithNvrtcAndStoresItsResources) {
  test_support::TempDir dir;
  const CompileRunRequest request = heuristic_request(dir);
  db::Store store = db::Store::open(dir / "q.db");
  CountingObserver progress;
  const CompileOutcome outcome = run_compile(request, &store, progress);

  ASSERT_EQ(outcome.rows.size(), 1u);
  const CompileRow& row = outcome.rows[0];
  ASSERT_TRUE(row.ok) << row.error;
  EXPECT_EQ(row.config, request.configs[0]);
  ASSERT_TRUE(row.kernel.has_value());
  EXPECT_GT(row.kernel->resources.registers, 0);
  EXPECT_TRUE(row.kernel->cubin.empty());  // dropped once read
  EXPECT_FALSE(row.kernel->from_cache);
  EXPECT_GT(progress.calls, 0);
  EXPECT_EQ(progress.last_done, 1u);
  EXPECT_EQ(progress.last_total, 1u);

  ASSERT_TRUE(outcome.run.has_value());
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, *outcome.run);
  EXPECT_EQ(runs[0].kind, "compile");
  EXPECT_EQ(runs[0].status, db::RunStatus::Completed);
  EXPECT_EQ(runs[0].sm, 90);
  EXPECT_EQ(runs[0].command_line, "qtune compile --arch sm_90a");
  const auto compiles = store.list_compiles();
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_EQ(compiles[0].status, db::CompileStatus::Ok);
  EXPECT_EQ(compiles[0].arch, "sm_90a");
  EXPECT_EQ(compiles[0].format, request.problem.format.to_string());
  ASSERT_TRUE(compiles[0].registers.has_value());
  EXPECT_EQ(*compiles[0].registers, row.kernel->resources.registers);
}

TEST(RunCompile, WithoutAStoreItOnlyCompilesAndTheSecondTimeHitsTheCache) {
  test_support::TempDir dir;
  const CompileRunRequest request = heuristic_request(dir);
  TuneObserver quiet;
  const CompileOutcome first = run_compile(request, nullptr, quiet);
  EXPECT_FALSE(first.run.has_value());
  ASSERT_TRUE(first.rows.at(0).ok) << first.rows[0].error;
  const CompileOutcome second = run_compile(request, nullptr, quiet);
  ASSERT_TRUE(second.rows.at(0).ok) << second.rows[0].error;
  EXPECT_TRUE(second.rows[0].kernel->from_cache);
  EXPECT_EQ(second.rows[0].kernel->resources.registers, first.rows[0].kernel->resources.registers);
}

TEST(RunCompile, NoFamilyIsAnError) {
  TuneObserver quiet;
  EXPECT_THROW(run_compile(CompileRunRequest{}, nullptr, quiet), Error);
}

}  // namespace
}  // namespace qtune::tune

// kernel-sweep's library on the CPU: every valid configuration is compiled here and measured through the measuring
// backend (the worker in `qtune kernel-sweep`), never in this process; invalid and uncompilable ones never reach
// it. And `tune --family`'s loop over families (family_runs.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include "tests/common/expect_error.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"
#include "tuner/tune/family_runs.hpp"
#include "tuner/tune/sweep.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

const char* const kGood = "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0";
const char* const kWrong = "bm=16,bn=64,bk=128,wm=1,wn=2,wk=1,stages=3,split=2,raster=0";         // FakeBackend: wrong
const char* const kNoCompile = "bm=32,bn=128,bk=128,wm=1,wn=2,wk=1,stages=3,split=2,raster=0";    // FakeCompiler: fails
const char* const kInvalid = "bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=99,split=1,raster=0";

SweepOptions explicit_sweep() {
  SweepOptions options;
  options.format = FormatSpec::parse("w4a16-int4-ch");
  options.n = 4096;
  options.k = 4096;
  options.m_values = {32};
  options.include_default = false;
  for (const char* text : {kGood, kWrong, kNoCompile, kInvalid}) options.configs.push_back(KernelConfig::parse(text, "mma"));
  return options;
}

TEST(Sweep, MeasuresEveryValidCompiledConfigurationThroughTheBackend) {
  FakeCompiler compiler;
  FakeBackend backend;
  std::size_t progress_rows = 0;
  const std::vector<SweepRow> rows =
      run_sweep(explicit_sweep(), h200_target(), compiler, backend, [&](const SweepRow&) { ++progress_rows; });
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(progress_rows, 4u);
  EXPECT_EQ(compiler.compiled.load(), 3u);  // the invalid one is not compiled
  EXPECT_EQ(backend.calls.load(), 2u);      // neither is the one that failed to compile measured

  const SweepRow& good = rows[0];
  EXPECT_TRUE(good.measured) << good.error;
  EXPECT_TRUE(good.verified);
  EXPECT_EQ(good.verification, "PASS (fake)");
  const double expected_us = fake_time_us(Problem{explicit_sweep().format, 32, 4096, 4096, false}, good.config);
  EXPECT_DOUBLE_EQ(good.measurement.median_us, expected_us);
  EXPECT_NEAR(good.tflops, 2.0 * 32 * 4096 * 4096 / (expected_us * 1e-6) / 1e12, 1e-9);
  EXPECT_GT(good.gbps, 0);
  EXPECT_EQ(good.registers, 96);  // from the compile step

  EXPECT_FALSE(rows[1].measured);
  EXPECT_EQ(rows[1].error.rfind("verification failed: ", 0), 0u) << rows[1].error;
  EXPECT_EQ(rows[2].error.rfind("compile failed: ", 0), 0u) << rows[2].error;
  EXPECT_EQ(rows[3].error.rfind("invalid: ", 0), 0u) << rows[3].error;
}

TEST(Sweep, CuratedRangesWithTheDefaultFirst) {
  SweepOptions options = explicit_sweep();
  options.configs.clear();
  options.include_default = true;
  options.max_configs = 5;
  options.m_values = {1, 256};
  FakeCompiler compiler;
  FakeBackend backend;
  const std::vector<SweepRow> rows = run_sweep(options, h200_target(), compiler, backend);
  std::map<int64_t, int> per_m;
  for (const SweepRow& row : rows) ++per_m[row.m];
  EXPECT_GE(per_m[1], 5);
  EXPECT_LE(per_m[1], 6);  // at most max_configs, and the default when it is not among them
  EXPECT_GE(per_m[256], 5);
  const auto first_of = [&](int64_t m) {
    return *std::find_if(rows.begin(), rows.end(), [&](const SweepRow& row) { return row.m == m; });
  };
  EXPECT_TRUE(first_of(1).is_default);
  EXPECT_TRUE(first_of(256).is_default);
}

TEST(Sweep, RefusesAFormatTheFamilyDoesNotRun) {
  SweepOptions options = explicit_sweep();
  options.family = "wgmma";
  options.format = FormatSpec::parse("w8a8-int8-ch");  // int8 activations: not the wgmma family's (it widens fp8 ones)
  FakeCompiler compiler;
  FakeBackend backend;
  EXPECT_THROW(run_sweep(options, h200_target(), compiler, backend), UnsupportedError);
  EXPECT_EQ(backend.calls.load(), 0u);
}

TEST(Sweep, TheCandidateTimeoutCoversTheMeasurement) {
  EXPECT_GT(sweep_candidate_timeout_s(0.3), 0.3 * 3);  // warm-up and throttle retries included
  EXPECT_GT(sweep_candidate_timeout_s(10), 30);
}

// The fakes as the tuner's services.
struct FakeServices {
  FakeServices() {
    services.compiler = &compiler;
    services.backends = borrow(backend);
  }
  FakeCompiler compiler;
  FakeBackend backend;
  TuneServices services;
};

class CountingFamilies final : public FamilyRunObserver {
 public:
  void family_started(std::size_t, const KernelFamily& family, std::size_t problems) override {
    started.push_back(family.name() + ":" + std::to_string(problems));
  }
  void family_finished(std::size_t, const TuneReport&) override { ++finished; }
  std::vector<std::string> started;
  int finished = 0;
};

TEST(FamilyRuns, EachFamilyWithProblemsIsItsOwnRun) {
  TempDir dir;
  FakeServices fakes;
  const TuneOptions options = small_options({16});
  const std::vector<const KernelFamily*> families = {&find_family("mma"), &find_family("wgmma")};
  CountingFamilies observer;
  const FamilyRuns runs = run_tune_families(options, families, {options.problems, {}}, h200_target(), dir.path() / "q.db",
                                            fakes.services, nullptr, &observer, nullptr);
  ASSERT_EQ(runs.reports.size(), 1u);  // wgmma had no problems
  EXPECT_FALSE(runs.interrupted);
  EXPECT_EQ(observer.started, (std::vector<std::string>{"mma:2", "wgmma:0"}));
  EXPECT_EQ(observer.finished, 1);
  EXPECT_EQ(runs.reports[0].winners, 2u);
}

TEST(FamilyRuns, AnInterruptedRunEndsTheLoop) {
  TempDir dir;
  FakeServices fakes;
  const TuneOptions options = small_options({16});
  const std::atomic<bool> stop{true};
  CountingFamilies observer;
  const FamilyRuns runs = run_tune_families(options, {&find_family("mma"), &find_family("mma")},
                                            {options.problems, options.problems}, h200_target(), dir.path() / "q.db",
                                            fakes.services, nullptr, &observer, &stop);
  EXPECT_TRUE(runs.interrupted);
  EXPECT_EQ(runs.reports.size(), 1u);
  EXPECT_EQ(observer.started.size(), 1u);
}

TEST(FamilyRuns, AParameterNoFamilyHasIsBadInput) {
  TempDir dir;
  FakeServices fakes;
  TuneOptions options = small_options({16});
  options.dry_run = true;
  options.parameter_values["no_such_knob"] = {1};
  test_support::expect_input_error(
      [&] {
        run_tune_families(options, {&find_family("mma")}, {options.problems}, h200_target(), dir.path() / "q.db", fakes.services,
                          nullptr, nullptr, nullptr);
      },
      {"--param", "no_such_knob"});
}

TEST(FamilyRuns, FamiliesToTune) {
  const std::vector<FormatSpec> formats = {FormatSpec::parse("w4a16-int4-ch")};
  const std::vector<const KernelFamily*> automatic = families_to_tune("auto", formats, 90);
  ASSERT_FALSE(automatic.empty());
  EXPECT_EQ(automatic.front()->name(), "mma");
  EXPECT_EQ(families_to_tune("auto", formats, 80).size(), 1u);  // only mma runs on sm_80
  EXPECT_EQ(families_to_tune("wgmma,mma", formats, 90).front()->name(), "wgmma");
  test_support::expect_input_error([&] { families_to_tune("mma,nope", formats, 90); }, {"--family", "nope"});
}

}  // namespace
}  // namespace qtune::tune

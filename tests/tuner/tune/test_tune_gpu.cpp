// GPU: an end-to-end tune of a small problem set through NVRTC and the measuring worker process (this test binary
// serves as the worker: tests/common/test_main.cpp runs it as `test_tuner __worker --fd N`).
#include <gtest/gtest.h>

#include "db/store.hpp"
#include "kernels/error.hpp"
#include "tests/tuner/tune/tune_test_support.hpp"
#include "tuner/tune/devices.hpp"
#include "tuner/tune/worker_backend.hpp"
#include "tuner/tune/worker_jobs.hpp"

namespace qtune::tune {
namespace {

using namespace qtune::tune::testing;

// The worker started from this binary must know the tuner's jobs: register them at startup, in parent and worker.
const bool tune_jobs_registered = [] {
  register_worker_jobs();
  return true;
}();

std::optional<TuneTarget> local_target(std::string& why_not) {
  try {
    return resolve_target("auto", "0", false);
  } catch (const NoGpuError& error) {
    why_not = error.what();
    return std::nullopt;
  }
}

TEST(TuneGpu, EndToEndTuneStoresVerifiedWinners) {
  ASSERT_TRUE(tune_jobs_registered);
  std::string why_not;
  const std::optional<TuneTarget> target = local_target(why_not);
  if (!target) GTEST_SKIP() << "no GPU: " << why_not;
  if (!find_family("mma").supports(FormatSpec::parse("w4a16-int4-ch"), target->limits.sm).supported) {
    GTEST_SKIP() << "the mma family does not run on sm_" << target->limits.sm;
  }

  TempDir dir;
  TuneOptions options;
  options.problems = build_problem_set({FormatSpec::parse("w4a16-int4-ch")}, {{4096, 4096}}, {1, 16});
  // A handful of candidates around the heuristic keeps the test short.
  options.parameter_values = {{"bm", {16}}, {"bn", {64, 128}}, {"bk", {256}}, {"wm", {1}}, {"wn", {4}},
                              {"wk", {1}},  {"stages", {3, 4}}, {"split", {1, 4}}, {"raster", {0}}};
  options.timeout_s = 60;
  jit::CompilerSettings settings;
  settings.cache_directory = dir / "cache";
  NvrtcInstantiationCompiler compiler(settings);
  TuneServices services;
  services.compiler = &compiler;
  services.slots = 1;
  services.backends = [&](int) -> std::unique_ptr<MeasuringBackend> {
    WorkerBackendOptions backend_options;
    backend_options.cache_directory = dir / "cache";
    backend_options.measure.full_fidelity.time_budget_s = 0.2;
    backend_options.measure.full_fidelity.max_warmup_s = 0.05;
    return std::make_unique<WorkerBackend>(backend_options);
  };
  const TuneReport report = run_tune(options, *target, dir / "q.db", services);
  EXPECT_FALSE(report.interrupted);
  EXPECT_EQ(report.winners, 2u);
  for (const ProblemReport& problem : report.reports) {
    SCOPED_TRACE(problem_key(problem.problem));
    ASSERT_TRUE(problem.winner.has_value());
    EXPECT_GT(problem.winner_us, 0.5);
    ASSERT_TRUE(problem.heuristic_us.has_value());
    EXPECT_LE(problem.winner_us, *problem.heuristic_us * 1.01);  // the heuristic is measured too: never clearly better
    EXPECT_EQ(problem.invalid, 0u) << "a correct kernel failed verification or crashed";
  }
  db::Store store = db::Store::open(dir / "q.db");
  EXPECT_TRUE(store.check().empty());
  EXPECT_EQ(store.list_winners(target->gpu_key()).size(), 2u);
  for (const auto& measurement : store.list_measurements()) {
    EXPECT_EQ(measurement.status, db::MeasurementStatus::Ok) << measurement.message;
    EXPECT_EQ(measurement.l2_mode, db::L2Mode::Cold);
    EXPECT_GE(measurement.samples_us.size(), 20u);
  }
  for (const auto& verification : store.list_verifications()) {
    EXPECT_EQ(verification.status, db::VerificationStatus::Passed) << verification.message;
  }
  // A rerun finds every winner final and measures nothing.
  const TuneReport again = run_tune(options, *target, dir / "q.db", services);
  EXPECT_EQ(again.skipped_final, 2u);
  EXPECT_EQ(again.measured, 0u);
}

}  // namespace
}  // namespace qtune::tune

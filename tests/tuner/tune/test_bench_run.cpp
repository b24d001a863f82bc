// `qtune bench` as a library call (tuner/tune/bench_run.hpp): its targets and its storage of an outcome, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "db/store.hpp"
#include "tests/common/temp_dir.hpp"
#include "tuner/tune/bench_run.hpp"

namespace qtune::tune {
namespace {

using baselines::BaselineKind;
using baselines::TargetResult;
using baselines::VariantResult;

BenchRequest f16_request() {
  BenchRequest request;
  request.kinds = {BaselineKind::F16};
  request.n = 4096;
  request.k = 1024;
  request.m_values = {16, 32, 64};
  return request;
}

VariantResult measured_variant(const std::string& label, int algorithm, double median_us) {
  VariantResult variant;
  variant.label = label;
  variant.params = {{"algo", algorithm}};
  variant.verify.passed = true;
  variant.verify.rel_error = 1e-4;
  variant.verify.tolerance = 1e-2;
  variant.verify.message = "PASS";
  measure::Measurement measurement;
  measurement.median_us = median_us;  // every statistic of two equal samples
  measurement.p10_us = measurement.p90_us = measurement.min_us = measurement.max_us = median_us;
  measurement.mean_us = measurement.ci_low_us = measurement.ci_high_us = median_us;
  measurement.samples_us = {median_us, median_us};
  measurement.repetitions = 2;
  measurement.stop_reason = "converged";
  variant.measurement = measurement;
  return variant;
}

TEST(BenchTargets, ABaselineIsStoredUnderItsOwnFormatUnlessOneIsGiven) {
  BenchRequest request = f16_request();
  const BenchTarget own = make_baseline_target(BaselineKind::F16, request);
  EXPECT_EQ(own.label, "cublaslt-f16");
  EXPECT_EQ(own.job, baselines::kBenchBaselineJob);
  EXPECT_EQ(own.problem_format, "f16");
  EXPECT_EQ(own.config_family, "cublaslt-f16");
  EXPECT_EQ(own.config_kind, db::ConfigKind::Baseline);
  EXPECT_EQ(make_baseline_target(BaselineKind::BF16, request).problem_format, "bf16");

  request.format = FormatSpec::parse("w4a16-int4-g128");
  EXPECT_EQ(make_baseline_target(BaselineKind::F16, request).problem_format, request.format->to_string());
}

TEST(BenchTargets, TheJobParamsCarryTheRequest) {
  BenchRequest request = f16_request();
  request.top_k = 5;
  request.seed = 42;
  const BenchTarget target = make_baseline_target(BaselineKind::F16, request);
  const nlohmann::json params = target.job_params({16, 4096, 1024}, std::nullopt);
  const baselines::BenchBaselineRequest job = baselines::request_from_job_params(params);
  EXPECT_EQ(job.kind, BaselineKind::F16);
  EXPECT_EQ(job.problem.m, 16);
  EXPECT_EQ(job.problem.n, 4096);
  EXPECT_EQ(job.seed, 42u);
  EXPECT_EQ(job.baseline.top_k, 5);
  EXPECT_FALSE(job.pinned.has_value());
}

TEST(StoreBench, StoresOneRunWithEachAlgorithmOfEachSupportedRow) {
  test_support::TempDir dir;
  BenchRequest request = f16_request();
  BenchOutcome outcome;
  outcome.targets.push_back(make_baseline_target(BaselineKind::F16, request));
  outcome.context.device = {{"name", "NVIDIA H200"}, {"uuid", "GPU-1"}, {"compute_capability_major", 9},
                            {"compute_capability_minor", 0}, {"sm_count", 132}};
  outcome.context.bandwidth_source = "measured: 4000 GB/s";

  BenchRow measured;  // two algorithms timed, the second won
  measured.target = &outcome.targets[0];
  measured.problem = {16, 4096, 1024};
  TargetResult result;
  result.supported = true;
  result.notes = "run-off: h1 won";
  result.variants = {measured_variant("h0", 1, 12.0), measured_variant("h1", 2, 10.0)};
  result.variants[0].verify.passed = false;  // failed its check: nothing timed is stored for it
  result.variants[0].measurement.reset();
  result.best = 1;
  measured.result = result;
  BenchRow unsupported = measured;
  unsupported.problem.m = 32;
  unsupported.result->supported = false;
  BenchRow failed;
  failed.target = &outcome.targets[0];
  failed.problem = {64, 4096, 1024};
  failed.failure = "crashed: signal 11";
  outcome.rows = {measured, unsupported, failed};

  {
    db::Store store = db::Store::open(dir / "bench.db");
    store_bench(store, request, outcome, "qtune bench --baseline cublaslt-f16");
  }
  db::Store store = db::Store::open_read_only(dir / "bench.db");
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kind, "bench");
  EXPECT_EQ(runs[0].status, db::RunStatus::Completed);
  EXPECT_EQ(runs[0].gpu_name, "NVIDIA H200");
  EXPECT_EQ(runs[0].sm, 90);
  EXPECT_EQ(runs[0].command_line, "qtune bench --baseline cublaslt-f16");
  EXPECT_EQ(runs[0].notes, "copy bandwidth: measured: 4000 GB/s");

  const auto problems = store.list_problems();  // the unsupported and the failed row store nothing
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].format, "f16");
  EXPECT_EQ(problems[0].m, 16);
  EXPECT_EQ(store.list_configs().size(), 2u);
  const auto verifications = store.list_verifications();
  ASSERT_EQ(verifications.size(), 2u);
  const auto passed = std::count_if(verifications.begin(), verifications.end(),
                                    [](const auto& v) { return v.status == db::VerificationStatus::Passed; });
  EXPECT_EQ(passed, 1);
  const auto measurements = store.list_measurements();
  ASSERT_EQ(measurements.size(), 1u);
  EXPECT_EQ(measurements[0].status, db::MeasurementStatus::Ok);
  EXPECT_EQ(measurements[0].phase, baselines::kBestOfTopKPhase);
  EXPECT_EQ(measurements[0].message, "run-off: h1 won");
  ASSERT_TRUE(measurements[0].stats.has_value());
  EXPECT_EQ(measurements[0].stats->median_us, 10.0);
}

TEST(StoreBench, APinnedWinnerAndAFailedLaunchAreStoredAsSuch) {
  test_support::TempDir dir;
  BenchRequest request = f16_request();
  request.measure.warm_l2 = true;
  BenchOutcome outcome;
  outcome.targets.push_back(make_baseline_target(BaselineKind::F16, request));
  BenchRow row;
  row.target = &outcome.targets[0];
  row.problem = {16, 4096, 1024};
  TargetResult result;
  result.supported = true;
  result.variants = {measured_variant("h3", 3, 9.0), measured_variant("h4", 4, 9.5)};
  result.variants[1].measurement.reset();  // verified, but the launch threw
  result.variants[1].error = "launch failed";
  result.best = 0;
  result.pin = baselines::PinOutcome::Pinned;
  row.result = result;
  outcome.rows = {row};

  {
    db::Store store = db::Store::open(dir / "bench.db");
    store_bench(store, request, outcome, "qtune bench");
  }
  db::Store store = db::Store::open_read_only(dir / "bench.db");
  const auto runs = store.list_runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].gpu_name, "");  // no device learned
  auto measurements = store.list_measurements();
  ASSERT_EQ(measurements.size(), 2u);
  std::sort(measurements.begin(), measurements.end(),
            [](const auto& a, const auto& b) { return a.status < b.status; });
  EXPECT_EQ(measurements[0].status, db::MeasurementStatus::Ok);
  EXPECT_EQ(measurements[0].phase, baselines::kPinnedPhase);
  EXPECT_EQ(measurements[1].status, db::MeasurementStatus::Failed);
  EXPECT_EQ(measurements[1].phase, baselines::kTopKPhase);
  EXPECT_EQ(measurements[1].l2_mode, db::L2Mode::Warm);  // a failed one has no measurement to take it from
  EXPECT_EQ(measurements[1].message, "launch failed");
}

}  // namespace
}  // namespace qtune::tune

// The CPU side of measuring baselines: choosing the best algorithm, the JSON that crosses the worker boundary,
// the worker job's parameters, and the arithmetic of a benchmark row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/error.hpp"
#include "tuner/baselines/baseline_bench.hpp"

namespace qtune::baselines {
namespace {

VariantResult variant(bool passed, std::optional<double> median_us) {
  VariantResult result;
  result.verify.passed = passed;
  if (median_us) {
    result.measurement = measure::Measurement{};
    result.measurement->median_us = *median_us;
  }
  return result;
}

TEST(BestVariant, IsTheFastestVerifiedMeasurement) {
  EXPECT_EQ(best_variant_index({}), -1);
  EXPECT_EQ(best_variant_index({variant(true, 12.0), variant(true, 9.0), variant(true, 11.0)}), 1);
  // A faster but unverified (or unmeasured) algorithm never wins.
  EXPECT_EQ(best_variant_index({variant(true, 12.0), variant(false, 1.0), variant(true, std::nullopt)}), 0);
  EXPECT_EQ(best_variant_index({variant(false, 1.0), variant(true, std::nullopt)}), -1);
  // Ties keep cuBLASLt's earlier choice.
  EXPECT_EQ(best_variant_index({variant(true, 5.0), variant(true, 5.0)}), 0);
}

TEST(ResultJson, RoundTripsATargetResult) {
  TargetResult result;
  result.target = "cublaslt-fp8-block128";
  result.problem = {17, 4096, 8192};
  result.executed_m = 20;
  result.supported = true;
  result.notes = "M padded from 17 to 20";
  VariantResult timed = variant(true, 42.5);
  timed.label = "h0 algo=66";
  timed.params = {{"algo_id", 66}, {"tile", "128x128"}};
  timed.verify.rel_error = 1.5e-3;
  timed.verify.tolerance = 1e-2;
  timed.verify.rows_checked = 17;
  timed.verify.message = "passed";
  timed.measurement->p10_us = 41.0;
  timed.measurement->samples_us = {42.0, 42.5, 43.0};
  VariantResult failed = variant(false, std::nullopt);
  failed.label = "h1 algo=31";
  failed.verify.rel_error = std::numeric_limits<double>::infinity();  // NaN in the output
  failed.error = "not timed: verification failed";
  result.variants = {timed, failed};
  result.best = 0;
  result.device = {{"name", "NVIDIA H200"}};

  const nlohmann::json json = result;
  const std::string text = json.dump();  // must be valid JSON despite the infinite error
  const TargetResult back = nlohmann::json::parse(text).get<TargetResult>();
  EXPECT_EQ(back.target, result.target);
  EXPECT_EQ(back.problem, result.problem);
  EXPECT_EQ(back.executed_m, 20);
  EXPECT_EQ(back.notes, result.notes);
  ASSERT_EQ(back.variants.size(), 2u);
  EXPECT_EQ(back.best, 0);
  ASSERT_NE(back.best_variant(), nullptr);
  EXPECT_EQ(back.best_variant()->label, "h0 algo=66");
  EXPECT_EQ(back.variants[0].params.at("tile"), "128x128");
  ASSERT_TRUE(back.variants[0].measurement.has_value());
  EXPECT_DOUBLE_EQ(back.variants[0].measurement->median_us, 42.5);
  EXPECT_EQ(back.variants[0].measurement->samples_us.size(), 3u);
  EXPECT_DOUBLE_EQ(back.variants[0].verify.rel_error, 1.5e-3);
  EXPECT_EQ(back.variants[0].verify.rows_checked, 17);
  EXPECT_FALSE(back.variants[1].measurement.has_value());
  EXPECT_TRUE(std::isinf(back.variants[1].verify.rel_error));
  EXPECT_FALSE(back.variants[1].verify.passed);
  EXPECT_EQ(back.device.at("name"), "NVIDIA H200");
}

TEST(ResultJson, UnsupportedResultKeepsItsReason) {
  TargetResult result;
  result.target = "cublaslt-fp8-outer";
  result.problem = {1, 64, 64};
  result.unsupported_reason = "fp8 tensor cores need sm_89 or newer; this GPU is sm_80";
  const TargetResult back = nlohmann::json(result).get<TargetResult>();
  EXPECT_FALSE(back.supported);
  EXPECT_EQ(back.unsupported_reason, result.unsupported_reason);
  EXPECT_EQ(back.best_variant(), nullptr);
}

TEST(JobParams, RoundTripEveryField) {
  BenchBaselineRequest request;
  request.kind = BaselineKind::Fp8Outer;
  request.problem = {16, 5120, 13824};
  request.seed = 99;
  request.baseline.top_k = 3;
  request.baseline.workspace_bytes = 1 << 20;
  request.baseline.max_verify_rows = 8;
  request.baseline.fp8_output = OutputType::F16;
  request.measure.warm_l2 = true;
  request.measure.time_budget_s = 0.25;
  request.measure.min_repetitions = 30;
  const BenchBaselineRequest back = request_from_job_params(to_job_params(request));
  EXPECT_EQ(back.kind, BaselineKind::Fp8Outer);
  EXPECT_EQ(back.problem, request.problem);
  EXPECT_EQ(back.seed, 99u);
  EXPECT_EQ(back.baseline.top_k, 3);
  EXPECT_EQ(back.baseline.workspace_bytes, size_t{1} << 20);
  EXPECT_EQ(back.baseline.max_verify_rows, 8);
  EXPECT_EQ(back.baseline.fp8_output, OutputType::F16);
  EXPECT_TRUE(back.measure.warm_l2);
  EXPECT_DOUBLE_EQ(back.measure.time_budget_s, 0.25);
  EXPECT_EQ(back.measure.min_repetitions, 30);
}

TEST(JobParams, ScreenTimeTravelsAndIsChecked) {
  BenchBaselineRequest request;
  request.problem = {16, 512, 512};
  request.runoff.screen_time_s = 0.04;
  EXPECT_DOUBLE_EQ(request_from_job_params(to_job_params(request)).runoff.screen_time_s, 0.04);
  nlohmann::json params = to_job_params(request);
  params["runoff"]["screen_time_s"] = -0.5;
  try {
    request_from_job_params(params);
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("runoff.screen_time_s"), std::string::npos) << error.what();
  }
  params["runoff"]["screen_time_s"] = kMaxScreenTimeS * 2;
  EXPECT_THROW(request_from_job_params(params), InputError);
}

// Screening keeps what makes the ranking fair (device, L2 mode, flush, confidence target) and drops what only the
// final number needs (minimum time beyond the screen, stability blocks, throttle retries, clock-dip retries).
TEST(Screening, OptionsAreShortAndKeepTheComparison) {
  measure::MeasureOptions full = measure::benchmark_measure_options();
  full.device = 3;
  full.l2_flush = measure::L2Flush::Write;
  full.target_relative_ci = 0.02;
  const measure::MeasureOptions screen = screening_options(full, 0.05);
  EXPECT_EQ(screen.device, 3);
  EXPECT_EQ(screen.l2_flush, measure::L2Flush::Write);
  EXPECT_FALSE(screen.warm_l2);
  EXPECT_DOUBLE_EQ(screen.target_relative_ci, 0.02);
  EXPECT_DOUBLE_EQ(screen.min_measure_s, 0.05);
  EXPECT_DOUBLE_EQ(screen.time_budget_s, 0.1);
  EXPECT_LE(screen.max_warmup_s, 0.0125 + 1e-12);
  EXPECT_LE(screen.min_warmup_s, screen.max_warmup_s);
  EXPECT_EQ(screen.stability_blocks, 0);
  EXPECT_EQ(screen.throttle_retries, 0);
  EXPECT_EQ(screen.clock_dip_fraction, 0);
  EXPECT_NO_THROW(measure::validate(screen));
  EXPECT_THROW(screening_options(full, 0), InputError);
  EXPECT_THROW(screening_options(full, kMaxScreenTimeS + 1), InputError);
}

TEST(JobParams, BadFieldsAreInputErrorsNamingThem) {
  nlohmann::json params = to_job_params(BenchBaselineRequest{});
  params["baseline"] = "cublaslt-fp64";
  try {
    request_from_job_params(params);
    FAIL() << "no InputError";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("baseline"), std::string::npos) << error.what();
  }
  params = to_job_params(BenchBaselineRequest{BaselineKind::F16, {4, 8, 8}, 1, {}, {}, {}, {}});
  params["top_k"] = 0;
  EXPECT_THROW(request_from_job_params(params), InputError);
  params["top_k"] = "many";
  EXPECT_THROW(request_from_job_params(params), InputError);
  params = to_job_params(BenchBaselineRequest{BaselineKind::F16, {4, 8, 8}, 1, {}, {}, {}, {}});
  params["m"] = 0;
  EXPECT_THROW(request_from_job_params(params), InputError);
  params = to_job_params(BenchBaselineRequest{BaselineKind::F16, {4, 8, 8}, 1, {}, {}, {}, {}});
  params["measure"]["min_repetitions"] = -1;
  EXPECT_THROW(request_from_job_params(params), InputError);
}

TEST(RowMetrics, BandwidthThroughputAndPercentages) {
  TrafficModel traffic;
  traffic.activation_bytes = 0.25e9;
  traffic.weight_bytes = 0.5e9;
  traffic.output_bytes = 0.25e9;
  const RowMetrics metrics = row_metrics(traffic, 2e12, 1000.0, 2000.0, 4000.0);
  EXPECT_DOUBLE_EQ(metrics.gigabytes_per_second, 1000.0);  // 1e9 bytes in 1 ms
  EXPECT_DOUBLE_EQ(metrics.tflops, 2000.0);                // 2e12 flop in 1 ms
  ASSERT_TRUE(metrics.bandwidth_percent.has_value());
  EXPECT_DOUBLE_EQ(*metrics.bandwidth_percent, 50.0);
  ASSERT_TRUE(metrics.peak_percent.has_value());
  EXPECT_DOUBLE_EQ(*metrics.peak_percent, 50.0);

  const RowMetrics unknown = row_metrics(traffic, 2e12, 1000.0, std::nullopt, std::nullopt);
  EXPECT_FALSE(unknown.bandwidth_percent.has_value());
  EXPECT_FALSE(unknown.peak_percent.has_value());
  const RowMetrics no_time = row_metrics(traffic, 2e12, 0.0, 2000.0, 4000.0);
  EXPECT_EQ(no_time.tflops, 0.0);
  EXPECT_FALSE(no_time.peak_percent.has_value());
}

TEST(RowMetrics, RealisticDecodeRowOfAnF16Gemm) {
  // M=1, N=K=8192 f16 at 30 us: ~134 MB moved, 4.5 TB/s, 4.5 TFLOP/s.
  const GemmProblem problem{1, 8192, 8192};
  const RowMetrics metrics = row_metrics(traffic(BaselineKind::F16, problem), gemm_flops(problem), 30.0, 4800.0, 989.0);
  EXPECT_NEAR(metrics.gigabytes_per_second, (8192.0 * 2 + 8192.0 * 8192 * 2 + 8192.0 * 2) / 30e-6 / 1e9, 1e-6);
  EXPECT_NEAR(metrics.tflops, 2.0 * 8192 * 8192 / 30e-6 / 1e12, 1e-9);
  EXPECT_GT(*metrics.bandwidth_percent, 90.0);
  EXPECT_LT(*metrics.peak_percent, 1.0);
}

TEST(TensorType, PerBaseline) {
  EXPECT_EQ(tensor_type(BaselineKind::F16), search::TensorType::F16);
  EXPECT_EQ(tensor_type(BaselineKind::BF16), search::TensorType::BF16);
  EXPECT_EQ(tensor_type(BaselineKind::Fp8Block128), search::TensorType::FP8);
  EXPECT_EQ(tensor_type(BaselineKind::Int8), search::TensorType::INT8);
}

TEST(CublasLtBaseline, ShapeRulesAnswerWithoutAGpu) {
  // Whole 128x128 weight blocks are a property of the format, decided before any device is touched.
  CublasLtBaseline blocks(BaselineKind::Fp8Block128);
  EXPECT_FALSE(blocks.prepare({16, 4100, 8192}, 1));
  EXPECT_FALSE(blocks.supported());
  EXPECT_NE(blocks.unsupported_reason().find("4100"), std::string::npos) << blocks.unsupported_reason();
  CublasLtBaseline int8(BaselineKind::Int8);
  EXPECT_FALSE(int8.prepare({16, 4096, 4098}, 1));
  EXPECT_NE(int8.unsupported_reason().find("K"), std::string::npos) << int8.unsupported_reason();
  EXPECT_THROW(CublasLtBaseline(BaselineKind::F16, BaselineOptions{0}), InputError);
  EXPECT_THROW(blocks.prepare({0, 8, 8}, 1), InputError);
}

}  // namespace
}  // namespace qtune::baselines

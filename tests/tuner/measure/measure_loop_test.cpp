// The warm-up and repetition rules of the harness, on the CPU with a simulated GPU and clock.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/error.hpp"
#include "tests/tuner/runtime/gpu_test_support.hpp"
#include "tuner/measure/cupti_timer.hpp"
#include "tuner/measure/measure.hpp"
#include "tuner/measure/statistics.hpp"

namespace qtune::measure {
namespace {

// A simulated operation: its duration decays from `cold_us` to `steady_us` over the first `settle_s` seconds
// (clocks ramping), with relative noise; each repetition advances the simulated host clock by `host_us`.
struct SimulatedGpu {
  double steady_us = 100;
  double cold_us = 300;
  double settle_s = 0.1;
  double noise = 0.002;  // relative, uniform
  double host_us = 200;
  double now = 0;
  std::mt19937_64 generator{42};
  std::vector<int> batch_sizes;

  std::vector<double> run(int count) {
    batch_sizes.push_back(count);
    std::uniform_real_distribution<double> jitter(-noise, noise);
    std::vector<double> durations;
    for (int i = 0; i < count; ++i) {
      const double ramp = now < settle_s ? (cold_us - steady_us) * (1 - now / settle_s) : 0;
      durations.push_back((steady_us + ramp) * (1 + jitter(generator)));
      now += host_us * 1e-6;
    }
    return durations;
  }
};

LoopResult run_simulated(SimulatedGpu& gpu, const MeasureOptions& options, const std::function<int()>& clock = {}) {
  return run_measurement_loop([&gpu](int count) { return gpu.run(count); }, options, [&gpu] { return gpu.now; }, clock);
}

TEST(MeasureLoop, WarmsUpUntilSettledThenConverges) {
  SimulatedGpu gpu;
  const LoopResult result = run_simulated(gpu, MeasureOptions{});
  EXPECT_TRUE(result.warmup_settled);
  EXPECT_GE(result.warmup_seconds, gpu.settle_s) << "warm-up ended while durations were still falling";
  EXPECT_TRUE(result.converged);
  EXPECT_EQ(result.stop_reason, "converged");
  EXPECT_GE(result.samples_us.size(), 20u);
  for (const double sample : result.samples_us) EXPECT_NEAR(sample, 100, 0.5);
  EXPECT_EQ(gpu.batch_sizes.front(), 1) << "the first repetition runs alone";
  for (std::size_t i = 1; i < gpu.batch_sizes.size(); ++i) EXPECT_LE(gpu.batch_sizes[i], 10);
}

TEST(MeasureLoop, NoisyOperationsStopAtTheTimeBudget) {
  SimulatedGpu gpu;
  gpu.noise = 0.5;
  MeasureOptions options;
  options.time_budget_s = 0.3;
  const LoopResult result = run_simulated(gpu, options);
  EXPECT_FALSE(result.converged);
  EXPECT_EQ(result.stop_reason, "time budget");
  EXPECT_GE(gpu.now, 0.3);
  EXPECT_LT(gpu.now, 0.3 + 0.05 + 1e-9) << "overshoots the budget by at most one batch";
}

// A steady operation converges after 20 repetitions (4 ms here); with min_measure_s it keeps repeating until the
// measured repetitions span that long, and then stops as converged.
TEST(MeasureLoop, ConvergenceWaitsForTheMinimumMeasuringTime) {
  SimulatedGpu quick;
  const LoopResult at_once = run_simulated(quick, MeasureOptions{});
  EXPECT_EQ(at_once.stop_reason, "converged");
  EXPECT_LT(at_once.samples_us.size(), 60u);

  SimulatedGpu gpu;
  MeasureOptions options;
  options.min_measure_s = 0.5;
  const LoopResult result = run_simulated(gpu, options);
  EXPECT_EQ(result.stop_reason, "converged");
  EXPECT_TRUE(result.converged);
  const double measured_s = static_cast<double>(result.samples_us.size()) * gpu.host_us * 1e-6;
  EXPECT_GE(measured_s, 0.5);
  EXPECT_LT(measured_s, 0.5 * 1.06 + 0.002) << "stops at the first check after the minimum";

  options.min_measure_s = 2.5;  // more than the budget
  EXPECT_THROW(validate(options), InputError);
  options.min_measure_s = -1;
  EXPECT_THROW(validate(options), InputError);
  options.min_measure_s = 0.7;
  EXPECT_EQ(measure_options_from_json(measure_options_to_json(options)).min_measure_s, 0.7);
}

// A GPU whose operation is 5% slower for 20 ms of every 100 ms (a power cap's slow phases). Most samples are fast, so
// the order-statistic interval, which takes the samples as independent, converges as soon as the minimum measuring
// time allows. With stability_blocks a block that falls inside a slow phase disagrees with the others, and the
// measurement goes on until every block is long enough to span the phases.
struct PhasedGpu : SimulatedGpu {
  std::vector<double> run(int count) {
    double t = now;
    std::vector<double> durations = SimulatedGpu::run(count);
    for (double& duration : durations) {
      if (std::fmod(t, 0.1) >= 0.08) duration *= 1.05;
      t += host_us * 1e-6;
    }
    return durations;
  }
};

TEST(MeasureLoop, BlocksKeepMeasuringThroughSlowPhases) {
  const auto run_phased = [](PhasedGpu& gpu, const MeasureOptions& options) {
    return run_measurement_loop([&gpu](int count) { return gpu.run(count); }, options, [&gpu] { return gpu.now; });
  };
  MeasureOptions options;
  options.time_budget_s = 3;
  options.min_measure_s = 0.1;
  PhasedGpu without_blocks;
  const LoopResult quick = run_phased(without_blocks, options);
  EXPECT_EQ(quick.stop_reason, "converged");

  options.stability_blocks = 8;
  PhasedGpu with_blocks;
  const LoopResult patient = run_phased(with_blocks, options);
  EXPECT_GT(with_blocks.now, 1.5 * without_blocks.now) << "stopped after " << with_blocks.now << " s, not "
                                                     << without_blocks.now;
  EXPECT_EQ(patient.stop_reason, "converged");
  EXPECT_LE(block_medians_interval(patient.samples_us, 8).relative_half_width(), 0.01);
  EXPECT_GT(block_medians_interval(quick.samples_us, 8).relative_half_width(), 0.01)
      << "the blocks of the quick measurement disagree: that is what stopped it being accepted";
  EXPECT_GT(patient.samples_us.size(), 8u * kMinSamplesPerBlock);

  // A steady operation still converges with blocks on, after at least 8 x kMinSamplesPerBlock repetitions.
  SimulatedGpu steady;
  const LoopResult settled = run_simulated(steady, options);
  EXPECT_EQ(settled.stop_reason, "converged");
  EXPECT_GE(settled.samples_us.size(), 8u * kMinSamplesPerBlock);

  options.stability_blocks = 3;
  EXPECT_THROW(validate(options), InputError);
  options.stability_blocks = 65;
  EXPECT_THROW(validate(options), InputError);
  options.stability_blocks = 16;
  EXPECT_EQ(measure_options_from_json(measure_options_to_json(options)).stability_blocks, 16);
  EXPECT_EQ(measure_options_from_json(nlohmann::json::object()).stability_blocks, 0) << "absent means off";

  // The benchmarks' options have the check on, and are valid.
  EXPECT_NO_THROW(validate(benchmark_measure_options()));
  EXPECT_EQ(benchmark_measure_options().stability_blocks, 8);
  EXPECT_EQ(MeasureOptions{}.stability_blocks, 0) << "tuning keeps it off";
}

TEST(MeasureLoop, StopsAtMaxRepetitionsExactly) {
  SimulatedGpu gpu;
  gpu.noise = 0.5;
  MeasureOptions options;
  options.min_repetitions = 20;
  options.max_repetitions = 33;
  options.time_budget_s = 100;
  const LoopResult result = run_simulated(gpu, options);
  EXPECT_EQ(result.stop_reason, "max repetitions");
  EXPECT_EQ(result.samples_us.size(), 33u);
}

TEST(MeasureLoop, MinimumRepetitionsCompleteEvenWithoutBudget) {
  SimulatedGpu gpu;
  gpu.noise = 0.5;
  MeasureOptions options;
  options.time_budget_s = 0;
  options.min_repetitions = 25;
  const LoopResult result = run_simulated(gpu, options);
  EXPECT_EQ(result.stop_reason, "time budget");
  EXPECT_GE(result.samples_us.size(), 25u);
  EXPECT_LT(result.samples_us.size(), 35u);
}

TEST(MeasureLoop, WarmUpWaitsForTheSmClock) {
  SimulatedGpu gpu;
  gpu.settle_s = 0;  // durations are steady at once; the clock jumps between 1400 and 1900 MHz until 0.2 s
  int readings = 0;
  const auto clock = [&gpu, &readings] { return gpu.now < 0.2 ? (++readings % 2 == 0 ? 1400 : 1900) : 1980; };
  const LoopResult result = run_simulated(gpu, MeasureOptions{}, clock);
  EXPECT_TRUE(result.warmup_settled);
  EXPECT_GE(result.warmup_seconds, 0.2);
  EXPECT_LT(result.warmup_seconds, 0.21);
}

TEST(MeasureLoop, UnknownClockDoesNotBlockWarmUp) {
  SimulatedGpu gpu;
  gpu.settle_s = 0;
  const LoopResult result = run_simulated(gpu, MeasureOptions{}, [] { return -1; });
  EXPECT_TRUE(result.warmup_settled);
  EXPECT_LT(result.warmup_seconds, 0.06);  // the minimum warm-up, 50 ms, plus one batch
}

TEST(MeasureLoop, WarmUpIsCappedWhenDurationsNeverSettle) {
  double now = 0;
  double duration = 100;
  const auto growing = [&](int count) {  // 1% longer every repetition: no two windows ever agree
    std::vector<double> durations;
    for (int i = 0; i < count; ++i) {
      durations.push_back(duration *= 1.01);
      now += 200e-6;
    }
    return durations;
  };
  MeasureOptions options;
  options.max_warmup_s = 0.2;
  options.max_repetitions = 40;
  const LoopResult result = run_measurement_loop(growing, options, [&now] { return now; });
  EXPECT_FALSE(result.warmup_settled);
  EXPECT_GE(result.warmup_seconds, 0.2);
  EXPECT_LT(result.warmup_seconds, 0.21);
  EXPECT_FALSE(result.converged);
  EXPECT_EQ(result.stop_reason, "max repetitions");
}

TEST(MeasureLoop, WarmUpTakesAtMostHalfTheBudget) {
  SimulatedGpu gpu;
  gpu.noise = 0.5;  // windows rarely agree
  MeasureOptions options;
  options.time_budget_s = 0.2;
  const LoopResult result = run_simulated(gpu, options);
  EXPECT_LE(result.warmup_seconds, 0.1 + 0.003);
}

TEST(MeasureLoop, NoWarmUpWhenDisabled) {
  SimulatedGpu gpu;
  MeasureOptions options;
  options.min_warmup_s = 0;
  options.max_warmup_s = 0;
  const LoopResult result = run_simulated(gpu, options);
  EXPECT_EQ(result.warmup_repetitions, 0);
  EXPECT_GT(result.samples_us.front(), 140) << "the first measured repetition is the cold one";
}

TEST(MeasureLoop, SlowOperationsRunInSmallBatches) {
  SimulatedGpu gpu;
  gpu.host_us = 30000;  // 30 ms per repetition
  gpu.settle_s = 0;
  MeasureOptions options;
  options.time_budget_s = 1.0;
  const LoopResult result = run_simulated(gpu, options);
  for (std::size_t i = 1; i < gpu.batch_sizes.size(); ++i) EXPECT_EQ(gpu.batch_sizes[i], 1);
  EXPECT_GE(result.samples_us.size(), 20u);
}

TEST(MeasureLoop, ABatchWithTheWrongCountIsAnError) {
  MeasureOptions options;
  double now = 0;
  const auto one_too_many = [&now](int count) {
    now += 0.001;
    return std::vector<double>(static_cast<std::size_t>(count) + 1, 1.0);
  };
  EXPECT_THROW(run_measurement_loop(one_too_many, options, [&now] { return now; }), Error);
}

TEST(MeasureLoop, InconsistentOptionsNameTheField) {
  const auto message_of = [](const MeasureOptions& options) {
    try {
      validate(options);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  MeasureOptions options;
  EXPECT_EQ(message_of(options), "");
  options.min_repetitions = 0;
  EXPECT_EQ(message_of(options).rfind("min_repetitions:", 0), 0u) << message_of(options);
  options = MeasureOptions{};
  options.max_repetitions = 5;
  EXPECT_EQ(message_of(options).rfind("max_repetitions:", 0), 0u);
  options = MeasureOptions{};
  options.target_relative_ci = 0;
  EXPECT_EQ(message_of(options).rfind("target_relative_ci:", 0), 0u);
  options = MeasureOptions{};
  options.min_warmup_s = 2;
  EXPECT_EQ(message_of(options).rfind("max_warmup_s:", 0), 0u);
  options = MeasureOptions{};
  options.confidence = 1;
  EXPECT_EQ(message_of(options).rfind("confidence:", 0), 0u);
}

TEST(Measurement, RoundTripsThroughJson) {
  Measurement measurement;
  measurement.median_us = 12.5;
  measurement.p10_us = 12.1;
  measurement.p90_us = 13.0;
  measurement.min_us = 12.0;
  measurement.max_us = 14.0;
  measurement.mean_us = 12.6;
  measurement.stddev_us = 0.3;
  measurement.ci_low_us = 12.4;
  measurement.ci_high_us = 12.6;
  measurement.ci_coverage = 0.96;
  measurement.samples_us = {12.0, 12.5, 14.0};
  measurement.repetitions = 3;
  measurement.warmup_repetitions = 40;
  measurement.converged = true;
  measurement.stop_reason = "converged";
  measurement.warmup_settled = true;
  measurement.warmup_seconds = 0.06;
  measurement.total_seconds = 0.1;
  measurement.l2_flush = "read";
  measurement.flush_bytes = 104857600;
  measurement.nvml_start.valid = true;
  measurement.nvml_start.sm_mhz = 1980;
  measurement.kernels_per_repetition = 2;
  measurement.kernel_names = {"gemm", "reduce"};
  measurement.device_name = "NVIDIA H200";
  measurement.device_uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  const nlohmann::json json = measurement;
  const Measurement back = json.get<Measurement>();
  EXPECT_EQ(nlohmann::json(back), json);
  EXPECT_NEAR(back.relative_ci_half_width(), 0.1 / 12.5, 1e-12);
}

TEST(Measurement, BusySamplesGiveTheClockRangeAndTheReasonsSeen) {
  Measurement measurement;
  NvmlSample fast;
  fast.valid = true;
  fast.sm_mhz = 1980;
  fast.power_w = 650;
  NvmlSample capped = fast;
  capped.sm_mhz = 1755;
  capped.power_w = 700;
  capped.throttle_reasons = clock_event::kSwPowerCap;
  NvmlSample unread;  // NVML could not read: skipped
  record_busy_samples(measurement, {fast, unread, capped, fast});
  EXPECT_EQ(measurement.busy_samples, 3);
  EXPECT_EQ(measurement.busy_sm_mhz_min, 1755);
  EXPECT_EQ(measurement.busy_sm_mhz_max, 1980);
  EXPECT_DOUBLE_EQ(measurement.busy_power_w_max, 700);
  EXPECT_EQ(measurement.busy_clock_event_reasons, clock_event::kSwPowerCap);
  EXPECT_TRUE(measurement.throttled_while_busy);
  EXPECT_FALSE(measurement.throttled);  // the retry rule still reads the start and end samples only
  const nlohmann::json json = measurement;
  EXPECT_EQ(nlohmann::json(json.get<Measurement>()), json);
  Measurement quiet;
  record_busy_samples(quiet, {fast, fast});
  EXPECT_FALSE(quiet.throttled_while_busy);
  EXPECT_EQ(quiet.busy_sm_mhz_min, 1980);
}

TEST(Measurement, StoredBeforeTheReadFlushReadsAsWriteFlushed) {
  Measurement measurement;
  nlohmann::json json = measurement;
  json.erase("l2_flush");
  EXPECT_EQ(json.get<Measurement>().l2_flush, "write");
  json["warm_l2"] = true;
  EXPECT_EQ(json.get<Measurement>().l2_flush, "");
}

TEST(MeasureOptionsJson, RoundTripsEveryField) {
  MeasureOptions options;
  options.device = 1;
  options.warm_l2 = true;
  options.l2_flush = L2Flush::Write;
  options.flush_bytes = 1 << 20;
  options.time_budget_s = 0.25;
  options.min_repetitions = 7;
  options.target_relative_ci = 0.03;
  options.throttle_retries = 0;
  const nlohmann::json json = measure_options_to_json(options);
  EXPECT_EQ(json.at("l2_flush"), "write");
  const MeasureOptions back = measure_options_from_json(json);
  EXPECT_EQ(measure_options_to_json(back), json);
  EXPECT_EQ(back.l2_flush, L2Flush::Write);
  EXPECT_EQ(back.min_repetitions, 7);
  // Absent fields keep their defaults: the read flush.
  EXPECT_EQ(measure_options_from_json(nlohmann::json::object()).l2_flush, L2Flush::Read);
}

TEST(MeasureOptionsJson, BadFieldsAreNamed) {
  const auto message_for = [](const nlohmann::json& json) {
    try {
      measure_options_from_json(json);
    } catch (const InputError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_for({{"l2_flush", "evict"}}).find("measure.l2_flush: 'evict' is not one of read, write"),
            std::string::npos);
  EXPECT_NE(message_for({{"min_repetitions", "many"}}).find("measure.min_repetitions:"), std::string::npos);
  EXPECT_NE(message_for({{"min_repetitions", 0}}).find("min_repetitions:"), std::string::npos);
  EXPECT_NE(message_for(nlohmann::json::array()).find("measure: expected an object"), std::string::npos);
}

TEST(Measure, WithoutAGpuIsNoGpuError) {
  QTUNE_REQUIRE_NO_GPU();
  EXPECT_THROW(measure([](CUstream) {}), NoGpuError);
}

TEST(Cupti, FailedCallsNameTheFunctionAndCuptisMessage) {
  try {
    detail::check_cupti(1 /* CUPTI_ERROR_INVALID_PARAMETER */, "cuptiActivityEnable", "file.cpp", 3);
    FAIL() << "no error thrown";
  } catch (const LibraryError& error) {
    std::cout << error.what() << "\n";
    EXPECT_EQ(error.library(), "CUPTI");
    EXPECT_EQ(std::string(error.what()).rfind("CUPTI: cuptiActivityEnable failed: ", 0), 0u) << error.what();
    EXPECT_NE(std::string(error.what()).find("INVALID_PARAMETER"), std::string::npos) << error.what();
  }
  EXPECT_NO_THROW(detail::check_cupti(0, "cuptiActivityEnable", "file.cpp", 3));
}

}  // namespace
}  // namespace qtune::measure

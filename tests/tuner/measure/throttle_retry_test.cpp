// The harness's answer to a throttled GPU, on the CPU with fake measurements: cool down, measure again, keep the
// unthrottled result and record the retries; bounded in tries and in cool-down time.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "tuner/measure/measure.hpp"

namespace qtune::measure {
namespace {

Measurement fake(double median_us, bool throttled) {
  Measurement measurement;
  measurement.median_us = median_us;
  measurement.throttled = throttled;
  measurement.samples_us = {median_us};
  return measurement;
}

// Hands out the given measurements in order and records the cool-downs asked for.
struct FakeGpu {
  explicit FakeGpu(std::vector<Measurement> given) : answers(std::move(given)) {}
  std::vector<Measurement> answers;
  std::size_t measured = 0;
  std::vector<double> cool_downs;

  Measurement run(const MeasureOptions& options) {
    return measure_until_unthrottled(
        [this] {
          if (measured >= answers.size()) throw Error("measured more often than expected", __FILE__, __LINE__);
          return answers[measured++];
        },
        options, [this](double seconds) { cool_downs.push_back(seconds); });
  }
};

TEST(ThrottleRetry, AnUnthrottledMeasurementIsKeptAsItIs) {
  FakeGpu gpu{{fake(100, false)}};
  const Measurement kept = gpu.run(MeasureOptions{});
  EXPECT_EQ(gpu.measured, 1u);
  EXPECT_TRUE(gpu.cool_downs.empty());
  EXPECT_EQ(kept.median_us, 100);
  EXPECT_FALSE(kept.throttled);
  EXPECT_EQ(kept.throttle_retries, 0);
  EXPECT_EQ(kept.cooldown_seconds, 0);
  EXPECT_TRUE(kept.throttled_medians_us.empty());
}

TEST(ThrottleRetry, AThrottledMeasurementIsRepeatedAfterACoolDownAndTheUnthrottledOneKept) {
  FakeGpu gpu{{fake(729, true), fake(697, false), fake(1, false)}};
  MeasureOptions options;
  options.throttle_cooldown_s = 1.5;
  const Measurement kept = gpu.run(options);
  EXPECT_EQ(gpu.measured, 2u) << "stops at the first unthrottled measurement";
  EXPECT_EQ(gpu.cool_downs, std::vector<double>{1.5});
  EXPECT_EQ(kept.median_us, 697);
  EXPECT_FALSE(kept.throttled);
  EXPECT_EQ(kept.throttle_retries, 1);
  EXPECT_EQ(kept.cooldown_seconds, 1.5);
  EXPECT_EQ(kept.throttled_medians_us, std::vector<double>{729});
}

TEST(ThrottleRetry, AnUnthrottledResultWinsEvenWhenSlower) {
  // A throttled sample can be fast by luck; the unthrottled one is the trustworthy one.
  FakeGpu gpu{{fake(90, true), fake(100, false)}};
  const Measurement kept = gpu.run(MeasureOptions{});
  EXPECT_EQ(kept.median_us, 100);
  EXPECT_FALSE(kept.throttled);
  EXPECT_EQ(kept.throttled_medians_us, std::vector<double>{90});
}

TEST(ThrottleRetry, TriesAreBoundedAndTheLeastSlowedIsKeptWhenAllAreThrottled) {
  FakeGpu gpu{{fake(120, true), fake(110, true), fake(115, true), fake(1, false)}};
  MeasureOptions options;
  options.throttle_retries = 2;
  options.throttle_cooldown_s = 1;
  const Measurement kept = gpu.run(options);
  EXPECT_EQ(gpu.measured, 3u) << "one measurement plus two retries";
  EXPECT_EQ(gpu.cool_downs, (std::vector<double>{1, 2})) << "each cool-down longer than the last";
  EXPECT_EQ(kept.median_us, 110);
  EXPECT_TRUE(kept.throttled) << "still throttled: the flag stays";
  EXPECT_EQ(kept.throttle_retries, 2);
  EXPECT_EQ(kept.cooldown_seconds, 3);
  EXPECT_EQ(kept.throttled_medians_us, (std::vector<double>{120, 115}));
}

// On the H200 of 2026-11-30 (call D) every M = 4096 measurement sat at the power cap: a retry as slow as the first
// ends the retries, so a capped GPU costs one cool-down per measurement, not three.
TEST(ThrottleRetry, APersistentSlowdownStopsAfterOneRetry) {
  FakeGpu gpu{{fake(765, true), fake(767, true), fake(1, false)}};
  const Measurement kept = gpu.run(MeasureOptions{});
  EXPECT_EQ(gpu.measured, 2u);
  EXPECT_EQ(gpu.cool_downs, std::vector<double>{1});
  EXPECT_EQ(kept.median_us, 765);
  EXPECT_TRUE(kept.throttled);
  EXPECT_EQ(kept.throttle_retries, 1);
  EXPECT_EQ(kept.throttled_medians_us, std::vector<double>{767});
  FakeGpu slightly{{fake(765, true), fake(760, true), fake(1, false)}};  // 0.7% faster: within the 1% target
  EXPECT_EQ(slightly.run(MeasureOptions{}).median_us, 760);
  EXPECT_EQ(slightly.measured, 2u);
}

TEST(ThrottleRetry, ZeroRetriesMeasuresOnce) {
  FakeGpu gpu{{fake(120, true), fake(100, false)}};
  MeasureOptions options;
  options.throttle_retries = 0;
  const Measurement kept = gpu.run(options);
  EXPECT_EQ(gpu.measured, 1u);
  EXPECT_TRUE(gpu.cool_downs.empty());
  EXPECT_EQ(kept.median_us, 120);
  EXPECT_TRUE(kept.throttled);
  EXPECT_EQ(kept.throttle_retries, 0);
}

TEST(ThrottleRetry, RetriesAndCoolDownsAreBounded) {
  MeasureOptions options;
  options.throttle_retries = 6;
  EXPECT_THROW(validate(options), InputError);
  options.throttle_retries = -1;
  EXPECT_THROW(validate(options), InputError);
  options.throttle_retries = 2;
  options.throttle_cooldown_s = 11;
  EXPECT_THROW(validate(options), InputError);
  options.throttle_cooldown_s = -0.5;
  EXPECT_THROW(validate(options), InputError);
  options.throttle_cooldown_s = 3;
  EXPECT_NO_THROW(validate(options));
  FakeGpu gpu{{fake(1, false)}};
  options.throttle_retries = 9;
  EXPECT_THROW(gpu.run(options), InputError);
  EXPECT_EQ(gpu.measured, 0u) << "bad options are refused before measuring";
}

TEST(ThrottleRetry, TheRecordSurvivesJsonAndOldRecordsStillRead) {
  Measurement measurement = fake(697, false);
  measurement.throttle_retries = 1;
  measurement.cooldown_seconds = 1.5;
  measurement.throttled_medians_us = {729};
  const nlohmann::json json = measurement;
  const Measurement back = json.get<Measurement>();
  EXPECT_EQ(back.throttle_retries, 1);
  EXPECT_EQ(back.cooldown_seconds, 1.5);
  EXPECT_EQ(back.throttled_medians_us, std::vector<double>{729});
  nlohmann::json old = json;
  old.erase("throttle_retries");
  old.erase("cooldown_seconds");
  old.erase("throttled_medians_us");
  const Measurement old_back = old.get<Measurement>();
  EXPECT_EQ(old_back.throttle_retries, 0);
  EXPECT_TRUE(old_back.throttled_medians_us.empty());
  EXPECT_EQ(old_back.median_us, 697);
}

// A busy SM clock below the fraction of the GPU's highest clock is a clock dip: flagged throttled (so the retry
// rule above applies) even when NVML reports no clock-event reason, as on the H200 (1635 of 1980 MHz).
TEST(ClockDip, ABusyClockBelowTheFractionIsFlaggedThrottled) {
  Measurement dipped = fake(763, false);
  record_busy_samples(dipped, {NvmlSample{true, 1980, 2619, 40, 600, 0, false}, NvmlSample{true, 1635, 2619, 41, 690, 0, false}});
  flag_clock_dip(dipped, 1980, 0.95);
  EXPECT_EQ(dipped.busy_sm_mhz_min, 1635);
  EXPECT_EQ(dipped.max_sm_mhz, 1980);
  EXPECT_TRUE(dipped.clock_dip);
  EXPECT_TRUE(dipped.throttled);
  EXPECT_FALSE(dipped.throttled_while_busy) << "no clock-event reason was reported";

  Measurement steady = fake(712, false);
  record_busy_samples(steady, {NvmlSample{true, 1905, 2619, 40, 600, 0, false}, NvmlSample{true, 1980, 2619, 40, 600, 0, false}});
  flag_clock_dip(steady, 1980, 0.95);
  EXPECT_FALSE(steady.clock_dip) << "1905 MHz is above 0.95 x 1980 = 1881";
  EXPECT_FALSE(steady.throttled);

  Measurement off = dipped;
  off.throttled = false;
  flag_clock_dip(off, 1980, 0);
  EXPECT_FALSE(off.clock_dip) << "fraction 0 turns the rule off";
  EXPECT_FALSE(off.throttled);

  Measurement unknown = fake(700, false);  // no NVML: neither a busy clock nor a highest clock
  flag_clock_dip(unknown, -1, 0.95);
  EXPECT_FALSE(unknown.clock_dip);
  Measurement no_busy_reads = fake(700, false);
  flag_clock_dip(no_busy_reads, 1980, 0.95);
  EXPECT_FALSE(no_busy_reads.clock_dip);
}

TEST(ClockDip, ADippedMeasurementIsRetriedAndTheSteadyOneKept) {
  Measurement dipped = fake(763, false);
  record_busy_samples(dipped, {NvmlSample{true, 1635, 2619, 41, 690, 0, false}});
  flag_clock_dip(dipped, 1980, 0.95);
  Measurement steady = fake(712, false);
  record_busy_samples(steady, {NvmlSample{true, 1980, 2619, 40, 600, 0, false}});
  flag_clock_dip(steady, 1980, 0.95);
  FakeGpu gpu{{dipped, steady}};
  const Measurement kept = gpu.run(MeasureOptions{});
  EXPECT_EQ(gpu.measured, 2u);
  EXPECT_EQ(kept.median_us, 712);
  EXPECT_FALSE(kept.clock_dip);
  EXPECT_EQ(kept.throttled_medians_us, std::vector<double>{763});
}

TEST(ClockDip, TheFractionIsValidatedAndTravelsInJobs) {
  MeasureOptions options;
  EXPECT_EQ(options.clock_dip_fraction, 0.95);
  for (double bad : {-0.1, 0.3, 1.01}) {
    options.clock_dip_fraction = bad;
    EXPECT_THROW(validate(options), InputError) << bad;
  }
  for (double good : {0.0, 0.5, 0.97, 1.0}) {
    options.clock_dip_fraction = good;
    EXPECT_NO_THROW(validate(options)) << good;
  }
  options.clock_dip_fraction = 0.9;
  EXPECT_EQ(measure_options_from_json(measure_options_to_json(options)).clock_dip_fraction, 0.9);
  nlohmann::json job = measure_options_to_json(options);
  job.erase("clock_dip_fraction");
  EXPECT_EQ(measure_options_from_json(job).clock_dip_fraction, 0.95) << "absent: the default";

  Measurement measurement = fake(700, true);
  measurement.max_sm_mhz = 1980;
  measurement.clock_dip = true;
  const Measurement back = nlohmann::json(measurement).get<Measurement>();
  EXPECT_EQ(back.max_sm_mhz, 1980);
  EXPECT_TRUE(back.clock_dip);
}

}  // namespace
}  // namespace qtune::measure

// Pooling measurements of the same operation (bench --placements): statistics of every sample, counts summed,
// busy NVML ranges merged, an empty list refused.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/error.hpp"
#include "tuner/measure/measure.hpp"

namespace qtune::measure {
namespace {

Measurement part(std::vector<double> samples, int busy_min, int busy_max, bool converged) {
  Measurement measurement;
  set_statistics(measurement, samples);
  measurement.samples_us = samples;
  measurement.repetitions = static_cast<int>(samples.size());
  measurement.busy_samples = 2;
  measurement.busy_sm_mhz_min = busy_min;
  measurement.busy_sm_mhz_max = busy_max;
  measurement.converged = converged;
  measurement.total_seconds = 1.5;
  return measurement;
}

TEST(PoolMeasurements, StatisticsOfEverySample) {
  const Measurement pooled = pool_measurements({part({700, 701, 702}, 1980, 1980, true), part({750, 751, 752, 753}, 1665, 1980, true)});
  EXPECT_EQ(pooled.repetitions, 7);
  EXPECT_EQ(pooled.samples_us.size(), 7u);
  EXPECT_DOUBLE_EQ(pooled.median_us, 750);
  EXPECT_DOUBLE_EQ(pooled.min_us, 700);
  EXPECT_DOUBLE_EQ(pooled.max_us, 753);
  EXPECT_LE(pooled.p10_us, pooled.median_us);
  EXPECT_GE(pooled.p90_us, pooled.median_us);
  EXPECT_EQ(pooled.busy_samples, 4);
  EXPECT_EQ(pooled.busy_sm_mhz_min, 1665);
  EXPECT_EQ(pooled.busy_sm_mhz_max, 1980);
  EXPECT_TRUE(pooled.converged);
  EXPECT_DOUBLE_EQ(pooled.total_seconds, 3.0);
}

// With stability_blocks the pooled samples (in the order the parts were measured) get their own blocks' interval:
// two parts that each agree within themselves but not with each other make a wide one.
TEST(PoolMeasurements, BlocksIntervalSpansTheParts) {
  std::vector<double> fast(20, 700.0);
  std::vector<double> slow(20, 728.0);
  fast[3] = 701;
  slow[5] = 729;
  Measurement first = part(fast, -1, -1, true);
  first.stability_blocks = 4;
  set_statistics(first, fast);
  EXPECT_EQ(first.blocks_relative_half_width, 0) << "one outlier does not move its block's median";
  const Measurement pooled = pool_measurements({first, part(slow, -1, -1, true)});
  EXPECT_EQ(pooled.stability_blocks, 4);
  // Block medians 700, 700, 728, 728: mean 714, stddev 16.17, t(0.975, 3) = 3.182.
  EXPECT_NEAR(pooled.blocks_relative_half_width, 3.182 * 16.166 / 2 / 714, 0.001);
  Measurement too_few = part({700, 701, 702}, -1, -1, true);
  too_few.stability_blocks = 4;
  set_statistics(too_few, too_few.samples_us);
  EXPECT_EQ(too_few.blocks_relative_half_width, -1) << "fewer than kMinSamplesPerBlock per block";
}

TEST(PoolMeasurements, NotConvergedIfAnyPartIsNotAndEmptyIsRefused) {
  EXPECT_FALSE(pool_measurements({part({1, 2, 3}, -1, -1, true), part({4, 5}, -1, -1, false)}).converged);
  EXPECT_EQ(pool_measurements({part({1, 2, 3}, -1, -1, true)}).busy_sm_mhz_min, -1);
  EXPECT_THROW(pool_measurements({}), InputError);
}

}  // namespace
}  // namespace qtune::measure

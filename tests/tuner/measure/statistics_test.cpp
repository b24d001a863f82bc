#include "tuner/measure/statistics.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/error.hpp"

namespace qtune::measure {
namespace {

TEST(Statistics, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_THROW(median({}), Error);
}

TEST(Statistics, PercentilesInterpolateBetweenClosestRanks) {
  const std::vector<double> values{4, 1, 3, 2};  // sorted 1 2 3 4, h = 3p/100
  EXPECT_DOUBLE_EQ(percentile(values, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(values, 10), 1.3);
  EXPECT_DOUBLE_EQ(percentile(values, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(values, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(values, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({10, 20, 30, 40, 50}, 25), 20);
  EXPECT_DOUBLE_EQ(percentile({10, 20, 30, 40, 50}, 30), 22);
  EXPECT_DOUBLE_EQ(percentile({42}, 90), 42);
  EXPECT_THROW(percentile(values, -1), Error);
  EXPECT_THROW(percentile(values, 100.5), Error);
  EXPECT_THROW(percentile({}, 50), Error);
}

TEST(Statistics, MeanAndSampleStandardDeviation) {
  const std::vector<double> values{2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(values), 5);
  EXPECT_NEAR(sample_stddev(values), std::sqrt(32.0 / 7.0), 1e-12);
  EXPECT_DOUBLE_EQ(sample_stddev({3}), 0);
  EXPECT_THROW(mean({}), Error);
}

TEST(Statistics, BinomialCdfMatchesExactCounts) {
  // sum_{k<=5} C(20, k) = 21700 of 2^20 outcomes.
  EXPECT_NEAR(binomial_half_cdf(20, 5), 21700.0 / 1048576.0, 1e-14);
  EXPECT_NEAR(binomial_half_cdf(1, 0), 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(binomial_half_cdf(10, 10), 1.0);
  EXPECT_NEAR(binomial_half_cdf(11, 5), 0.5, 1e-12);  // symmetric, odd n
  // Large n does not underflow: P(X <= n/2) is just above 1/2.
  EXPECT_NEAR(binomial_half_cdf(20000, 10000), 0.5 + 0.5 * 0.005641, 1e-4);
}

TEST(Statistics, MedianIntervalUsesExactOrderStatistics) {
  std::vector<double> values;
  for (int i = 1; i <= 20; ++i) values.push_back(i * 10.0);
  std::shuffle(values.begin(), values.end(), std::mt19937(1));
  const MedianInterval interval = median_confidence_interval(values, 0.95);
  // The textbook ranks for n = 20 at 95%: 6 and 15, coverage 1 - 2 * 21700 / 2^20.
  EXPECT_EQ(interval.lower_rank, 6u);
  EXPECT_EQ(interval.upper_rank, 15u);
  EXPECT_DOUBLE_EQ(interval.low, 60);
  EXPECT_DOUBLE_EQ(interval.high, 150);
  EXPECT_NEAR(interval.coverage, 1 - 2 * 21700.0 / 1048576.0, 1e-12);
  EXPECT_TRUE(interval.reached_confidence);
}

TEST(Statistics, SmallSamplesCannotReachTheConfidence) {
  const MedianInterval five = median_confidence_interval({3, 1, 4, 1, 5}, 0.95);
  EXPECT_FALSE(five.reached_confidence);
  EXPECT_EQ(five.lower_rank, 1u);
  EXPECT_EQ(five.upper_rank, 5u);
  EXPECT_DOUBLE_EQ(five.low, 1);
  EXPECT_DOUBLE_EQ(five.high, 5);
  EXPECT_NEAR(five.coverage, 1 - 2.0 / 32, 1e-12);
  const MedianInterval six = median_confidence_interval({6, 5, 4, 3, 2, 1}, 0.95);
  EXPECT_TRUE(six.reached_confidence);
  EXPECT_EQ(six.lower_rank, 1u);
  EXPECT_NEAR(six.coverage, 1 - 2.0 / 64, 1e-12);
  const MedianInterval one = median_confidence_interval({9}, 0.95);
  EXPECT_FALSE(one.reached_confidence);
  EXPECT_DOUBLE_EQ(one.low, 9);
  EXPECT_DOUBLE_EQ(one.high, 9);
  EXPECT_THROW(median_confidence_interval({}, 0.95), Error);
  EXPECT_THROW(median_confidence_interval({1, 2}, 1.0), Error);
}

TEST(Statistics, LargeSamplesAreFastAndMatchTheNormalApproximation) {
  const std::size_t n = 100000;
  std::vector<double> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<double>(i);
  const auto started = std::chrono::steady_clock::now();
  const MedianInterval interval = median_confidence_interval(values, 0.95);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double expected_rank = n / 2.0 - 1.959964 * std::sqrt(static_cast<double>(n)) / 2;
  EXPECT_NEAR(static_cast<double>(interval.lower_rank), expected_rank, 2.0);
  EXPECT_EQ(interval.lower_rank + interval.upper_rank, n + 1);
  EXPECT_GE(interval.coverage, 0.95);
  EXPECT_LT(interval.coverage, 0.951);
  EXPECT_LT(seconds, 0.1);
}

TEST(Statistics, MedianIntervalCoversTheTrueMedianAtTheStatedRate) {
  // Exponential durations (skewed, like timings) with a known median ln 2.
  std::mt19937_64 generator(2024);
  std::exponential_distribution<double> distribution(1.0);
  const double true_median = std::log(2.0);
  const int trials = 4000;
  for (const std::size_t n : {std::size_t{20}, std::size_t{31}, std::size_t{200}}) {
    int covered = 0;
    double stated = 0;
    for (int trial = 0; trial < trials; ++trial) {
      std::vector<double> values(n);
      for (double& value : values) value = distribution(generator);
      const MedianInterval interval = median_confidence_interval(values, 0.95);
      stated = interval.coverage;
      covered += interval.low <= true_median && true_median <= interval.high;
    }
    const double rate = static_cast<double>(covered) / trials;
    // 4000 trials: the rate's standard error is about 0.0035.
    EXPECT_NEAR(rate, stated, 0.015) << "n = " << n;
    EXPECT_GE(rate, 0.935) << "n = " << n;
  }
}

TEST(Statistics, SummaryCollectsEverything) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i);
  const Summary summary = summarize(values);
  EXPECT_EQ(summary.count, 100u);
  EXPECT_DOUBLE_EQ(summary.median, 50.5);
  EXPECT_DOUBLE_EQ(summary.p10, 10.9);
  EXPECT_DOUBLE_EQ(summary.p90, 90.1);
  EXPECT_DOUBLE_EQ(summary.min, 1);
  EXPECT_DOUBLE_EQ(summary.max, 100);
  EXPECT_DOUBLE_EQ(summary.mean, 50.5);
  EXPECT_NEAR(summary.stddev, std::sqrt(100.0 * 101.0 / 12.0), 1e-9);
  EXPECT_LE(summary.median_interval.low, summary.median);
  EXPECT_GE(summary.median_interval.high, summary.median);
  // n = 100 at 95%: ranks 40 and 61.
  EXPECT_EQ(summary.median_interval.lower_rank, 40u);
  EXPECT_DOUBLE_EQ(summary.relative_half_width(), std::max(50.5 - 40, 61 - 50.5) / 50.5);
}

TEST(Statistics, ConvergenceNeedsEnoughSamplesAndANarrowInterval) {
  std::mt19937 generator(5);
  std::uniform_real_distribution<double> tight(99.9, 100.1);
  std::uniform_real_distribution<double> wide(90, 110);
  std::vector<double> tight_values(20);
  std::vector<double> wide_values(20);
  for (double& value : tight_values) value = tight(generator);
  for (double& value : wide_values) value = wide(generator);
  const ConvergenceRule rule{20, 0.01, 0.95};
  EXPECT_TRUE(is_converged(summarize(tight_values), rule));
  EXPECT_FALSE(is_converged(summarize(wide_values), rule));
  tight_values.pop_back();
  EXPECT_FALSE(is_converged(summarize(tight_values), rule)) << "19 samples are fewer than the minimum";
  // Below six samples no interval reaches 95%, whatever the minimum says.
  EXPECT_FALSE(is_converged(summarize({100, 100, 100, 100, 100}), ConvergenceRule{1, 0.01, 0.95}));
  EXPECT_TRUE(is_converged(summarize({100, 100, 100, 100, 100, 100}), ConvergenceRule{1, 0.01, 0.95}));
}

TEST(Statistics, StudentTQuantilesMatchTheTables) {
  // Two-sided 95% and one-sided 95% critical values from standard t tables.
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.7062, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 7), 2.3646, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 30), 2.0423, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.95, 10), 1.8125, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.995, 3), 5.8409, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 1000000), 1.95996, 1e-4) << "tends to the normal quantile";
  EXPECT_NEAR(student_t_quantile(0.025, 7), -2.3646, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.5, 5), 0, 1e-9);
  EXPECT_THROW(student_t_quantile(1, 5), Error);
  EXPECT_THROW(student_t_quantile(0.9, 0), Error);
}

// The Student-t quantiles the hand-written incomplete-beta CDF and bisection gave before Boost.Math computed them, and
// the block intervals they made: the same to 1e-11 up to 1000 degrees of freedom (a measurement's blocks give at most
// 63). At 10^6 the old bisection was off by up to 1e-9 (Boost agrees with the normal quantile's expansion there).
TEST(Statistics, StudentTQuantilesAndBlockIntervalsAreThoseOfBefore) {
  struct Quantile {
    double p;
    int dof;
    double t;
  };
  const Quantile before[] = {
      {0.6, 1, 0.32491969623289663}, {0.6, 2, 0.28867513459481131}, {0.6, 3, 0.276670662332684},
      {0.6, 5, 0.26718086570414101}, {0.6, 7, 0.26316686135202616}, {0.6, 10, 0.26018482949208277},
      {0.6, 30, 0.25560536495191144}, {0.6, 100, 0.25402218245822183}, {0.6, 1000, 0.25341451583961572},
      {0.6, 1000000, 0.25334717047785915}, {0.9, 1, 3.0776835371751758}, {0.9, 2, 1.8856180831641609},
      {0.9, 3, 1.6377443536961778}, {0.9, 5, 1.4758840488245255}, {0.9, 7, 1.4149239276504773},
      {0.9, 10, 1.3721836411103254}, {0.9, 30, 1.3104150253913645}, {0.9, 100, 1.2900747613464887},
      {0.9, 1000, 1.2823987214617887}, {0.9, 1000000, 1.2815524112491516}, {0.95, 1, 6.3137515146752321},
      {0.95, 2, 2.9199855803536821}, {0.95, 3, 2.3533634348017358}, {0.95, 5, 2.0150483733330589},
      {0.95, 7, 1.8945786050899756}, {0.95, 10, 1.812461122811726}, {0.95, 30, 1.6972608865939378},
      {0.95, 100, 1.6602343260852308}, {0.95, 1000, 1.6463788172871432}, {0.95, 1000000, 1.6448551490487375},
      {0.975, 1, 12.706204736174641}, {0.975, 2, 4.3026527297494113}, {0.975, 3, 3.1824463052836336},
      {0.975, 5, 2.5705818356362897}, {0.975, 7, 2.3646242515927725}, {0.975, 10, 2.2281388519862162},
      {0.975, 30, 2.0422724563011911}, {0.975, 100, 1.9839715185235605}, {0.975, 1000, 1.9623390808262116},
      {0.975, 1000000, 1.9599663569861718}, {0.995, 1, 63.656741162869366}, {0.995, 2, 9.9248432009185308},
      {0.995, 3, 5.8409093097332061}, {0.995, 5, 4.0321429835552181}, {0.995, 7, 3.4994832973505936},
      {0.995, 10, 3.1692726726170122}, {0.995, 30, 2.7499956535672254}, {0.995, 100, 2.6258905214380093},
      {0.995, 1000, 2.5807546980657889}, {0.995, 1000000, 2.5758342202492486}, {0.999, 1, 318.30883898552565},
      {0.999, 2, 22.327124770118644}, {0.999, 3, 10.214531852407617}, {0.999, 5, 5.8934295313558778},
      {0.999, 7, 4.7852896286383384}, {0.999, 10, 4.143700494046584}, {0.999, 30, 3.3851848668292632},
      {0.999, 100, 3.173739493738708}, {0.999, 1000, 3.0984021639127377}, {0.999, 1000000, 3.0902404564304788},
      {0.025, 1, -12.706204736174641}, {0.025, 2, -4.3026527297494113}, {0.025, 3, -3.1824463052836336},
      {0.025, 5, -2.5705818356362897}, {0.025, 7, -2.3646242515927725}, {0.025, 10, -2.2281388519862162},
      {0.025, 30, -2.0422724563011911}, {0.025, 100, -1.9839715185235605}, {0.025, 1000, -1.9623390808262116},
      {0.025, 1000000, -1.9599663569861718}};
  for (const Quantile& q : before) {
    const double tolerance = (q.dof > 1000 ? 2e-9 : 1e-11) * std::abs(q.t);
    EXPECT_NEAR(student_t_quantile(q.p, q.dof), q.t, tolerance) << "p " << q.p << " dof " << q.dof;
  }

  struct Interval {
    std::size_t blocks;
    double confidence;
    double mean;
    double half_width;
  };
  const Interval intervals_before[] = {
      {2, 0.9, 100.995, 6.282182757101884},          {2, 0.95, 100.995, 12.642673712493824},
      {2, 0.99, 100.995, 63.338457457055306},        {3, 0.9, 101.27613333333333, 3.7262909319420139},
      {3, 0.95, 101.27613333333333, 5.4907585701908843}, {3, 0.99, 101.27613333333333, 12.665423236798841},
      {8, 0.9, 101.00005000000002, 1.2424254469882097},  {8, 0.95, 101.00005000000002, 1.5506716558771594},
      {8, 0.99, 101.00005000000002, 2.2948887358157943}, {16, 0.9, 100.999725, 0.78509601334732082},
      {16, 0.95, 100.999725, 0.95456045254834343},       {16, 0.99, 100.999725, 1.3196726093938478}};
  // Steady samples, then the last quarter 4% slower.
  std::vector<double> samples;
  for (int i = 0; i < 800; ++i) samples.push_back((100 + ((i * 37) % 101) / 100.0 - 0.5) * (i >= 600 ? 1.04 : 1.0));
  for (const Interval& before_interval : intervals_before) {
    const BlockInterval interval = block_medians_interval(samples, before_interval.blocks, before_interval.confidence);
    EXPECT_DOUBLE_EQ(interval.mean, before_interval.mean);
    EXPECT_NEAR(interval.half_width, before_interval.half_width, 1e-11 * before_interval.half_width)
        << before_interval.blocks << " blocks at " << before_interval.confidence;
  }
}

TEST(Statistics, BlockIntervalIsNarrowForSteadySamplesAndWideAcrossASlowPhase) {
  std::mt19937 generator(11);
  std::uniform_real_distribution<double> jitter(-0.5, 0.5);
  std::vector<double> steady(800);
  for (double& value : steady) value = 100 + jitter(generator);
  const BlockInterval narrow = block_medians_interval(steady, 8);
  ASSERT_EQ(narrow.block_medians.size(), 8u);
  EXPECT_NEAR(narrow.mean, 100, 0.1);
  EXPECT_LT(narrow.relative_half_width(), 0.002);

  // The same samples with the last quarter 4% slower (a slow phase): every sample still lies within 4.5% of the
  // others, yet the blocks disagree, and the interval says so.
  std::vector<double> phased = steady;
  for (std::size_t i = 600; i < phased.size(); ++i) phased[i] *= 1.04;
  const BlockInterval wide = block_medians_interval(phased, 8);
  EXPECT_GT(wide.relative_half_width(), 0.01);
  EXPECT_NEAR(wide.block_medians.back(), 104, 0.3);
  // t(0.975, 7) * stddev / sqrt(8), by hand.
  EXPECT_NEAR(wide.half_width,
              student_t_quantile(0.975, 7) * sample_stddev(wide.block_medians) / std::sqrt(8.0), 1e-12);

  // Uneven counts: the first blocks take one sample more, and every sample is in exactly one block.
  const BlockInterval uneven = block_medians_interval({1, 2, 3, 4, 5, 6, 7}, 3);
  EXPECT_EQ(uneven.block_medians, (std::vector<double>{2, 4.5, 6.5}));  // blocks {1,2,3} {4,5} {6,7}
  EXPECT_THROW(block_medians_interval({1, 2, 3}, 4), Error);
  EXPECT_THROW(block_medians_interval({1, 2, 3}, 1), Error);
}

TEST(Statistics, StabilityComparesTheLastTwoWindows) {
  const StabilityRule rule{10, 0.01};
  std::vector<double> settling(10, 110.0);
  settling.insert(settling.end(), 10, 100.0);
  EXPECT_FALSE(is_stable(settling, rule));
  settling.insert(settling.end(), 10, 100.5);
  EXPECT_TRUE(is_stable(settling, rule));
  EXPECT_FALSE(is_stable(std::vector<double>(19, 100.0), rule)) << "needs two full windows";
  EXPECT_TRUE(is_stable(std::vector<double>(20, 100.0), rule));
}

}  // namespace
}  // namespace qtune::measure

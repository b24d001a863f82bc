// Choosing among cuBLASLt's top-k algorithms: the two fastest of the first pass meet again in an interleaved run-off,
// and a near-tie goes to cuBLASLt's earlier choice every time, so two runs do not pick different winners on noise.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.hpp"
#include "tuner/baselines/baseline_bench.hpp"

namespace qtune::baselines {
namespace {

VariantResult timed(double median_us, bool passed = true) {
  VariantResult result;
  result.verify.passed = passed;
  result.measurement = measure::Measurement{};
  result.measurement->median_us = median_us;
  return result;
}

VariantResult untimed() {
  VariantResult result;
  result.verify.passed = true;
  return result;
}

// Each call answers the next time of the variant asked for, and the order of the calls is kept.
struct FakeTimes {
  std::vector<double> first;
  std::vector<double> second;
  int first_index = 0;
  int second_index = 1;
  std::vector<int> calls;

  double operator()(int variant) {
    calls.push_back(variant);
    std::vector<double>& times = variant == first_index ? first : second;
    if (times.empty()) throw Error("no more fake times", __FILE__, __LINE__);
    const double value = times.front();
    times.erase(times.begin());
    return value;
  }
};

TEST(RunoffPair, IsTheTwoFastestTimedVariantsInHeuristicOrder) {
  EXPECT_EQ(runoff_pair({}), std::nullopt);
  EXPECT_EQ(runoff_pair({timed(10)}), std::nullopt);
  EXPECT_EQ(runoff_pair({timed(10), timed(1, false), untimed()}), std::nullopt) << "one timed, verified variant";
  EXPECT_EQ(runoff_pair({timed(12), timed(9), timed(11)}), std::make_pair(1, 2));
  EXPECT_EQ(runoff_pair({timed(9), timed(12), timed(9.5)}), std::make_pair(0, 2));
  EXPECT_EQ(runoff_pair({timed(20), timed(5, false), timed(10), untimed(), timed(8)}), std::make_pair(2, 4));
  // Equal medians: the earlier ones.
  EXPECT_EQ(runoff_pair({timed(5), timed(7), timed(5), timed(5)}), std::make_pair(0, 2));
}

TEST(Runoff, InterleavesTheTwoInAlternatingOrder) {
  FakeTimes times{{100, 100, 100, 100}, {110, 110, 110, 110}, 3, 5, {}};
  RunoffOptions options;
  options.rounds = 4;
  const Runoff runoff = run_off(3, 5, options, std::ref(times));
  EXPECT_EQ(times.calls, (std::vector<int>{3, 5, 5, 3, 3, 5, 5, 3}));
  EXPECT_EQ(runoff.first, 3);
  EXPECT_EQ(runoff.second, 5);
  EXPECT_EQ(runoff.first_us, (std::vector<double>{100, 100, 100, 100}));
  EXPECT_EQ(runoff.second_us, (std::vector<double>{110, 110, 110, 110}));
  EXPECT_NEAR(runoff.ratio, 100.0 / 110.0, 1e-12);
  EXPECT_EQ(runoff.winner, 3);
  EXPECT_NE(runoff.decision.find("first faster by 9.09%"), std::string::npos) << runoff.decision;
}

TEST(Runoff, TheSecondWinsWhenClearlyFaster) {
  FakeTimes times{{700, 702, 699, 701}, {680, 681, 679, 690}, 0, 1, {}};
  const Runoff runoff = run_off(0, 1, RunoffOptions{}, std::ref(times));
  EXPECT_EQ(runoff.winner, 1);
  EXPECT_GT(runoff.ratio, 1.01);
  EXPECT_NE(runoff.decision.find("second faster"), std::string::npos) << runoff.decision;
}

TEST(Runoff, ANearTieAlwaysGoesToCublasLtsEarlierChoice) {
  // The second is 0.5% faster: within the 1% tolerance, so the first (cuBLASLt's earlier choice) is kept, and it is
  // kept just the same when the noise points the other way.
  FakeTimes faster_second{{700, 700, 700, 700}, {696.5, 696.5, 696.5, 696.5}, 0, 1, {}};
  const Runoff one = run_off(0, 1, RunoffOptions{}, std::ref(faster_second));
  FakeTimes faster_first{{696.5, 696.5, 696.5, 696.5}, {700, 700, 700, 700}, 0, 1, {}};
  const Runoff other = run_off(0, 1, RunoffOptions{}, std::ref(faster_first));
  EXPECT_EQ(one.winner, 0);
  EXPECT_EQ(other.winner, 0);
  EXPECT_NE(one.decision.find("tie within 1.00%"), std::string::npos) << one.decision;
  // A tighter tolerance lets the 0.5% decide.
  RunoffOptions strict;
  strict.tie_tolerance = 0.001;
  FakeTimes again{{700, 700, 700, 700}, {696.5, 696.5, 696.5, 696.5}, 0, 1, {}};
  EXPECT_EQ(run_off(0, 1, strict, std::ref(again)).winner, 1);
}

TEST(Runoff, PairedRatiosCancelADriftThatHitsBoth) {
  // Clocks falling during the run-off slow both alike; the first is 3% faster in every round though the second's
  // early rounds are faster than the first's late ones.
  const std::vector<double> drift = {1.00, 1.05, 1.10, 1.15};
  FakeTimes times;
  for (double factor : drift) {
    times.first.push_back(97 * factor);
    times.second.push_back(100 * factor);
  }
  const Runoff runoff = run_off(0, 1, RunoffOptions{}, std::ref(times));
  EXPECT_NEAR(runoff.ratio, 0.97, 1e-9);
  EXPECT_EQ(runoff.winner, 0);
}

TEST(Runoff, AMeasurementWithoutATimeOrBadOptionsAreErrors) {
  FakeTimes zero{{100}, {0}, 0, 1, {}};
  RunoffOptions one_round;
  one_round.rounds = 1;
  EXPECT_THROW(run_off(0, 1, one_round, std::ref(zero)), Error);
  FakeTimes unused;
  EXPECT_THROW(run_off(1, 1, one_round, std::ref(unused)), InputError);
  EXPECT_THROW(run_off(2, 1, one_round, std::ref(unused)), InputError);
  RunoffOptions none;
  none.rounds = 0;
  EXPECT_THROW(run_off(0, 1, none, std::ref(unused)), InputError);
  RunoffOptions loose;
  loose.tie_tolerance = 1.5;
  EXPECT_THROW(run_off(0, 1, loose, std::ref(unused)), InputError);
  EXPECT_TRUE(unused.calls.empty());
}

TEST(Runoff, TravelsInTheTargetResultAndTheJobParameters) {
  TargetResult result;
  result.target = "cublaslt-f16";
  result.problem = {4096, 8192, 8192};
  result.supported = true;
  result.variants = {timed(696.6), timed(699.1)};
  result.best = 0;
  Runoff runoff;
  runoff.first = 0;
  runoff.second = 1;
  runoff.first_us = {697.0, 696.1};
  runoff.second_us = {699.9, 698.8};
  runoff.ratio = 0.996;
  runoff.winner = 0;
  runoff.decision = "tie within 1.00% over 2 interleaved rounds: cuBLASLt's earlier choice kept";
  result.runoff = runoff;
  const TargetResult back = nlohmann::json::parse(nlohmann::json(result).dump()).get<TargetResult>();
  ASSERT_TRUE(back.runoff.has_value());
  EXPECT_EQ(back.runoff->first_us, runoff.first_us);
  EXPECT_EQ(back.runoff->second_us, runoff.second_us);
  EXPECT_EQ(back.runoff->winner, 0);
  EXPECT_EQ(back.runoff->decision, runoff.decision);
  result.runoff.reset();
  EXPECT_FALSE(nlohmann::json(result).get<TargetResult>().runoff.has_value());

  BenchBaselineRequest request;
  request.problem = {16, 256, 256};
  request.runoff.rounds = 6;
  request.runoff.tie_tolerance = 0.005;
  request.measure.throttle_retries = 1;
  request.measure.throttle_cooldown_s = 2.5;
  const BenchBaselineRequest parsed = request_from_job_params(to_job_params(request));
  EXPECT_EQ(parsed.runoff.rounds, 6);
  EXPECT_EQ(parsed.runoff.tie_tolerance, 0.005);
  EXPECT_EQ(parsed.measure.throttle_retries, 1);
  EXPECT_EQ(parsed.measure.throttle_cooldown_s, 2.5);
  nlohmann::json bad = to_job_params(request);
  bad["runoff"]["rounds"] = -1;
  EXPECT_THROW(request_from_job_params(bad), InputError);
}

}  // namespace
}  // namespace qtune::baselines

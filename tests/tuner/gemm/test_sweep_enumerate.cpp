#include <gtest/gtest.h>

#include <set>

#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "tuner/gemm/sweep.hpp"

namespace qtune::gemm {
namespace {

Problem problem(int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.format = FormatSpec::parse("w4a16-int4-ch");
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

// Every combination of the given values is visited exactly once, the first parameter's values included (its
// wrap-around once wrote past the end of the odometer and corrupted the heap).
TEST(SweepEnumerate, VisitsEveryCombinationOnceAndStops) {
  const KernelFamily& family = find_family("mma");
  const ArchLimits h200 = ArchLimits::for_sm(90);
  const Problem p = problem(32, 4096, 4096);
  std::map<std::string, std::vector<int>> ranges = default_sweep_ranges(family, 16);
  const std::vector<ParameterDomain> space = family.parameter_space();
  ranges[space.front().name] = {16, 32};  // the first (slowest) parameter gets two values
  ranges["split"] = {1, 2, 4};
  const std::vector<KernelConfig> configs = enumerate_configs(family, ranges, p, h200, 0);

  std::size_t expected = 0;
  std::size_t combinations = 1;
  for (const ParameterDomain& domain : space) combinations *= ranges.at(domain.name).size();
  std::vector<std::size_t> digit(space.size(), 0);
  for (std::size_t n = 0; n < combinations; ++n) {
    KernelConfig config;
    config.family = family.name();
    std::size_t rest = n;
    for (std::size_t i = space.size(); i-- > 0;) {
      const std::vector<int>& values = ranges.at(space[i].name);
      config.params[space[i].name] = values[rest % values.size()];
      rest /= values.size();
    }
    if (family.check(config, p, h200).valid) ++expected;
  }
  ASSERT_GT(expected, 0u);
  EXPECT_EQ(configs.size(), expected);
  std::set<std::string> distinct;
  for (const KernelConfig& config : configs) distinct.insert(config.to_string());
  EXPECT_EQ(distinct.size(), configs.size());
  ASSERT_EQ(space.front().name, "bm");
  std::set<int> block_m;
  for (const KernelConfig& config : configs) block_m.insert(config.get("bm"));
  EXPECT_EQ(block_m, (std::set<int>{16, 32}));

  // max_configs spreads a subset over the list.
  EXPECT_EQ(enumerate_configs(family, ranges, p, h200, 5).size(), std::min<std::size_t>(5, expected));
  ranges["split"] = {};
  EXPECT_THROW(enumerate_configs(family, ranges, p, h200, 0), InputError);
}

}  // namespace
}  // namespace qtune::gemm

#include <gtest/gtest.h>

#include <set>

#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "search/space.hpp"

namespace qtune::search {
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
TEST(SpaceEnumeration, RangesReplaceDomainsAndEveryCombinationIsVisitedOnce) {
  const KernelFamily& family = find_family("mma");
  const ArchLimits h200 = ArchLimits::for_sm(90);
  const Problem p = problem(32, 4096, 4096);
  ParameterRanges ranges = family.curated_ranges(16);
  const std::vector<ParameterDomain> space = family.parameter_space();
  ranges[space.front().name] = {16, 32};  // the first (slowest) parameter gets two values
  ranges["split"] = {1, 2, 4};
  const std::vector<KernelConfig> configs = enumerate_space(family, p, h200, ranges).candidates;

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
  const SpaceEnumeration enumeration = enumerate_space(family, p, h200, ranges);
  EXPECT_EQ(enumeration.total, combinations) << "the ranges, not the domains, make the space";
  std::size_t removed = 0;
  for (const auto& [rule, count] : enumeration.removed_by_rule) removed += count;
  EXPECT_EQ(removed + expected, combinations);
  std::set<std::string> distinct;
  for (const KernelConfig& config : configs) distinct.insert(config.to_string());
  EXPECT_EQ(distinct.size(), configs.size());
  ASSERT_EQ(space.front().name, "bm");
  std::set<int> block_m;
  for (const KernelConfig& config : configs) block_m.insert(config.get("bm"));
  EXPECT_EQ(block_m, (std::set<int>{16, 32}));

  // spread_evenly keeps a subset spread over the list, in its order.
  const std::vector<KernelConfig> spread = spread_evenly(configs, 5);
  EXPECT_EQ(spread.size(), std::min<std::size_t>(5, expected));
  for (std::size_t i = 0; i < spread.size(); ++i) EXPECT_EQ(spread[i], configs[configs.size() * i / spread.size()]);
  EXPECT_EQ(spread_evenly(configs, 0), configs);
  ranges["split"] = {};
  EXPECT_THROW(enumerate_space(family, p, h200, ranges), InputError);
}

}  // namespace
}  // namespace qtune::search

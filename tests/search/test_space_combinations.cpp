#include <gtest/gtest.h>

#include <vector>

#include "search/space.hpp"

namespace qtune::search {
namespace {

TEST(ForEachCombination, VisitsEveryCombinationOnceLastListFastest) {
  std::vector<std::vector<int>> seen;
  for_each_combination({{1, 2}, {7}, {3, 4, 5}}, [&](const std::vector<int>& c) { seen.push_back(c); });
  const std::vector<std::vector<int>> expected = {{1, 7, 3}, {1, 7, 4}, {1, 7, 5}, {2, 7, 3}, {2, 7, 4}, {2, 7, 5}};
  EXPECT_EQ(seen, expected);
}

TEST(ForEachCombination, AnEmptyListMeansNoneAndNoListsMeansOneEmpty) {
  int calls = 0;
  for_each_combination({{1, 2}, {}}, [&](const std::vector<int>&) { ++calls; });
  EXPECT_EQ(calls, 0);
  std::vector<std::vector<int>> seen;
  for_each_combination({}, [&](const std::vector<int>& c) { seen.push_back(c); });
  EXPECT_EQ(seen, (std::vector<std::vector<int>>{{}}));
}

}  // namespace
}  // namespace qtune::search

#include <gtest/gtest.h>

#include "search/winner.hpp"

namespace qtune::search {
namespace {

TEST(Winner, FastestValidWinsAndInvalidNeverDoes) {
  std::vector<ScoredCandidate> c = {{"a", 10.0, 0, 1, true}, {"b", 5.0, 0, 1, false}, {"c", 12.0, 0, 1, true}};
  auto w = choose_winner(c, std::nullopt);
  ASSERT_TRUE(w);
  EXPECT_EQ(c[w->index].key, "a");
  EXPECT_EQ(w->reason, "fastest");
}

TEST(Winner, NoValidCandidateMeansNoWinner) {
  std::vector<ScoredCandidate> c = {{"a", 1.0, 0, 1, false}};
  EXPECT_FALSE(choose_winner(c, std::nullopt));
}

TEST(Winner, IncumbentWithinNoiseIsKept) {
  std::vector<ScoredCandidate> c = {{"new", 10.0, 0, 1, true}, {"old", 10.05, 0, 5, true}};
  auto w = choose_winner(c, std::string("old"));
  ASSERT_TRUE(w);
  EXPECT_EQ(c[w->index].key, "old");
  EXPECT_EQ(w->reason, "incumbent within noise");
}

TEST(Winner, IncumbentClearlySlowerIsReplaced) {
  std::vector<ScoredCandidate> c = {{"new", 10.0, 0, 1, true}, {"old", 10.5, 0, 1, true}};
  auto w = choose_winner(c, std::string("old"));
  ASSERT_TRUE(w);
  EXPECT_EQ(c[w->index].key, "new");
}

TEST(Winner, SimplestWinsATieWithoutIncumbent) {
  std::vector<ScoredCandidate> c = {{"split4", 10.0, 0, 2000, true}, {"plain", 10.08, 0, 40, true}};
  auto w = choose_winner(c, std::nullopt);
  ASSERT_TRUE(w);
  EXPECT_EQ(c[w->index].key, "plain");
  EXPECT_EQ(w->reason, "simplest within noise");
}

TEST(Winner, ConfidenceIntervalWidensTheTie) {
  // 3% apart, but the fastest's CI reaches 5% above its median: a tie.
  std::vector<ScoredCandidate> c = {{"a", 10.0, 10.5, 100, true}, {"b", 10.3, 10.4, 1, true}};
  auto w = choose_winner(c, std::nullopt);
  ASSERT_TRUE(w);
  EXPECT_EQ(c[w->index].key, "b");
}

TEST(Winner, ComplexityOrdersSplitThenStagesThenTiles) {
  KernelConfig plain{"mma", {{"split", 1}, {"stages", 4}, {"bm", 16}, {"bn", 128}, {"bk", 128}}};
  KernelConfig split{"mma", {{"split", 2}, {"stages", 2}, {"bm", 16}, {"bn", 64}, {"bk", 64}}};
  KernelConfig deeper{"mma", {{"split", 1}, {"stages", 5}, {"bm", 16}, {"bn", 64}, {"bk", 64}}};
  EXPECT_LT(config_complexity(plain), config_complexity(split));
  EXPECT_LT(config_complexity(plain), config_complexity(deeper));
}

}  // namespace
}  // namespace qtune::search

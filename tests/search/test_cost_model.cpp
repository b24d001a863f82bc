#include "search/cost_model.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune::search {
namespace {

using test_support::expect_input_error;

// A step in one feature and a product of two others: what tile thresholds and wave counts look like.
double step_objective(double a, double b, double c) { return std::exp((a > 4.5 ? 1.0 : 0.0) + 0.3 * std::floor(b / 3) * c + 2.0); }

void make_rows(std::vector<std::vector<double>>& x, std::vector<double>& y) {
  for (int a = 0; a < 10; ++a)
    for (int b = 0; b < 9; ++b)
      for (int c = 0; c < 3; ++c) {
        x.push_back({double(a), double(b), double(c)});
        y.push_back(step_objective(a, b, c));
      }
}

TEST(BoostedTreesCostModel, LearnsStepsThatARidgeModelSmears) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  make_rows(x, y);
  BoostedTreesCostModel trees;
  trees.fit(x, y);
  RidgeCostModel ridge;
  ridge.fit(x, y);
  double trees_error = 0, ridge_error = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    trees_error = std::max(trees_error, std::abs(std::log(trees.predict_us(x[i]) / y[i])));
    ridge_error = std::max(ridge_error, std::abs(std::log(ridge.predict_us(x[i]) / y[i])));
  }
  EXPECT_LT(trees_error, 0.05);  // within 5% everywhere on the training set
  EXPECT_GT(ridge_error, trees_error * 2);
  // Ranks unseen points on the right side of the step.
  EXPECT_LT(trees.predict_us({2.5, 0, 0}) * 2, trees.predict_us({7.5, 0, 0}));
}

TEST(BoostedTreesCostModel, IsDeterministicAndHonoursWeights) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  make_rows(x, y);
  BoostedTreesCostModel first, second;
  first.fit(x, y);
  second.fit(x, y);
  for (const auto& row : x) EXPECT_EQ(first.predict_us(row), second.predict_us(row));

  // Two rows at the same point disagree; the heavier one wins the leaf.
  std::vector<std::vector<double>> conflict = {{0.0}, {0.0}, {1.0}, {1.0}};
  std::vector<double> times = {10.0, 1000.0, 50.0, 50.0};
  BoostedTreesCostModel weighted(BoostedTreesOptions{.rounds = 200, .min_leaf_weight = 1.0});
  weighted.fit(conflict, times, {100.0, 1.0, 1.0, 1.0});
  EXPECT_LT(weighted.predict_us({0.0}), 12.0);
}

TEST(BoostedTreesCostModel, RejectsMisuse) {
  BoostedTreesCostModel model;
  EXPECT_FALSE(model.trained());
  EXPECT_THROW(model.predict_us({1.0}), Error);
  EXPECT_THROW(model.fit({{1.0}, {1.0, 2.0}}, {1.0, 2.0}), Error);
  EXPECT_THROW(model.fit({{1.0}}, {1.0, 2.0}), Error);
  model.fit({{1.0}, {2.0}}, {1.0, 2.0});
  EXPECT_THROW(model.predict_us({1.0, 2.0}), Error);
}

TEST(CostModelFactory, NamesTheFieldForAnUnknownModel) {
  EXPECT_NE(make_cost_model("trees"), nullptr);
  EXPECT_NE(make_cost_model("ridge"), nullptr);
  expect_input_error([&] { make_cost_model("forest"); }, {"cost_model"});
}

}  // namespace
}  // namespace qtune::search

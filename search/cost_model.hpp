#pragma once
// Cost models for the model-guided strategy: they learn log(time) from (features, time) pairs of this problem and of
// others (the prior), and rank the candidates not yet measured.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qtune::search {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // weights: one per row (how much a row counts); empty means all 1.
  virtual void fit(const std::vector<std::vector<double>>& features, const std::vector<double>& times_us,
                   const std::vector<double>& weights = {}) = 0;
  virtual double predict_us(const std::vector<double>& features) const = 0;
  virtual bool trained() const = 0;
};

// Ridge regression on log(time) with Eigen, over the features and their pairwise products.
class RidgeCostModel : public CostModel {
 public:
  explicit RidgeCostModel(double lambda = 1e-3) : lambda_(lambda) {}
  void fit(const std::vector<std::vector<double>>& features, const std::vector<double>& times_us,
           const std::vector<double>& weights = {}) override;
  double predict_us(const std::vector<double>& features) const override;
  bool trained() const override { return !weights_.empty(); }

 private:
  std::vector<double> expand(const std::vector<double>& features) const;
  double lambda_;
  std::vector<double> mean_, scale_, weights_;
};

struct BoostedTreesOptions {
  std::size_t rounds = 120;
  int max_depth = 4;
  double learning_rate = 0.15;
  double min_leaf_weight = 2.0;
  std::size_t bins = 32;  // split thresholds per feature: quantiles of the training rows
};

// Gradient-boosted regression trees on log(time) (squared loss, histogram splits): tile and wave effects are steps
// and thresholds, which trees fit and a linear model smears. Deterministic: no sampling.
class BoostedTreesCostModel : public CostModel {
 public:
  explicit BoostedTreesCostModel(BoostedTreesOptions options = {}) : options_(options) {}
  void fit(const std::vector<std::vector<double>>& features, const std::vector<double>& times_us,
           const std::vector<double>& weights = {}) override;
  double predict_us(const std::vector<double>& features) const override;
  bool trained() const override { return trained_; }

  struct Node {
    int feature = -1;  // -1: a leaf
    double threshold = 0;  // go left when value <= threshold
    int left = -1, right = -1;
    double value = 0;  // leaf output
  };

 private:
  BoostedTreesOptions options_;
  bool trained_ = false;
  double base_ = 0;
  std::size_t feature_count_ = 0;
  std::vector<std::vector<Node>> trees_;
};

// "trees" (default) or "ridge"; throws InputError (field "cost_model") for other names.
std::unique_ptr<CostModel> make_cost_model(std::string_view name, double ridge_lambda = 1e-3);
const std::vector<std::string>& cost_model_names();

}  // namespace qtune::search

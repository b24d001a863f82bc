#include "search/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <Eigen/Dense>

#include "kernels/error.hpp"
#include "kernels/text_escape.hpp"

namespace qtune::search {

namespace {

void check_training_rows(const std::vector<std::vector<double>>& features, const std::vector<double>& times_us,
                         const std::vector<double>& weights) {
  if (features.empty() || features.size() != times_us.size()) {
    QTUNE_THROW(Error, "cost model: need as many feature rows as times");
  }
  if (!weights.empty() && weights.size() != features.size()) QTUNE_THROW(Error, "cost model: need one weight per row");
  for (const auto& row : features) {
    if (row.size() != features.front().size()) QTUNE_THROW(Error, "cost model: feature rows differ in length");
  }
}

double weight_of(const std::vector<double>& weights, size_t row) { return weights.empty() ? 1.0 : weights[row]; }

}  // namespace

// ---- ridge ----

std::vector<double> RidgeCostModel::expand(const std::vector<double>& features) const {
  // Linear plus pairwise products: tile effects multiply (waves x tile efficiency), so interactions matter.
  std::vector<double> expanded(features.begin(), features.end());
  for (size_t i = 0; i < features.size(); ++i)
    for (size_t j = i; j < features.size(); ++j) expanded.push_back(features[i] * features[j]);
  return expanded;
}

void RidgeCostModel::fit(const std::vector<std::vector<double>>& features, const std::vector<double>& times_us,
                         const std::vector<double>& weights) {
  check_training_rows(features, times_us, weights);
  std::vector<std::vector<double>> rows;
  rows.reserve(features.size());
  for (const auto& row : features) rows.push_back(expand(row));
  const size_t dims = rows.front().size();
  double total_weight = 0;
  mean_.assign(dims, 0.0);
  scale_.assign(dims, 0.0);
  for (size_t r = 0; r < rows.size(); ++r) {
    total_weight += weight_of(weights, r);
    for (size_t d = 0; d < dims; ++d) mean_[d] += weight_of(weights, r) * rows[r][d];
  }
  for (auto& m : mean_) m /= total_weight;
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t d = 0; d < dims; ++d) scale_[d] += weight_of(weights, r) * (rows[r][d] - mean_[d]) * (rows[r][d] - mean_[d]);
  for (auto& s : scale_) s = std::sqrt(s / total_weight) + 1e-12;

  Eigen::MatrixXd x(rows.size(), dims + 1);
  Eigen::VectorXd y(rows.size());
  Eigen::VectorXd w(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto row = static_cast<Eigen::Index>(r);
    x(row, 0) = 1.0;
    for (size_t d = 0; d < dims; ++d) x(row, static_cast<Eigen::Index>(d + 1)) = (rows[r][d] - mean_[d]) / scale_[d];
    y(row) = std::log(std::max(times_us[r], 1e-9));
    w(row) = weight_of(weights, r);
  }
  Eigen::MatrixXd gram = x.transpose() * w.asDiagonal() * x;
  gram.diagonal().array() += lambda_ * total_weight;
  gram(0, 0) -= lambda_ * total_weight;  // the intercept is not shrunk
  gram(0, 0) += 1e-12;
  Eigen::VectorXd solution = gram.ldlt().solve(x.transpose() * w.asDiagonal() * y);
  weights_.assign(solution.data(), solution.data() + solution.size());
}

double RidgeCostModel::predict_us(const std::vector<double>& features) const {
  if (!trained()) QTUNE_THROW(Error, "cost model: predict before fit");
  std::vector<double> row = expand(features);
  if (row.size() + 1 != weights_.size()) QTUNE_THROW(Error, "cost model: feature length differs from training");
  double log_time = weights_[0];
  for (size_t d = 0; d < row.size(); ++d) log_time += weights_[d + 1] * (row[d] - mean_[d]) / scale_[d];
  return std::exp(log_time);
}

// ---- boosted trees ----

namespace {

// Candidate split thresholds of one feature: midpoints between distinct values, or quantiles when there are many.
std::vector<double> split_thresholds(std::vector<double> values, size_t bins) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::vector<double> thresholds;
  if (values.size() <= bins) {
    for (size_t i = 0; i + 1 < values.size(); ++i) thresholds.push_back(0.5 * (values[i] + values[i + 1]));
  } else {
    for (size_t j = 1; j < bins; ++j) thresholds.push_back(values[j * values.size() / bins]);
    thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  }
  return thresholds;
}

struct TreeBuilder {
  const std::vector<std::vector<uint8_t>>& bin_of;  // [feature][row]: index of the first threshold >= value
  const std::vector<std::vector<double>>& thresholds;
  const std::vector<double>& residual;
  const std::vector<double>& weight;
  const BoostedTreesOptions& options;
  std::vector<BoostedTreesCostModel::Node> nodes;

  int grow(std::vector<size_t>& rows, int depth) {
    double sum_w = 0, sum_wr = 0;
    for (size_t r : rows) {
      sum_w += weight[r];
      sum_wr += weight[r] * residual[r];
    }
    const int index = static_cast<int>(nodes.size());
    nodes.push_back({});
    nodes[static_cast<size_t>(index)].value = options.learning_rate * sum_wr / (sum_w + 1.0);
    if (depth >= options.max_depth || sum_w < 2 * options.min_leaf_weight) return index;

    const double parent_score = sum_wr * sum_wr / sum_w;
    double best_gain = 1e-12;
    int best_feature = -1;
    size_t best_bin = 0;
    std::vector<double> hist_w, hist_wr;
    for (size_t f = 0; f < thresholds.size(); ++f) {
      const size_t bins = thresholds[f].size() + 1;
      if (bins < 2) continue;
      hist_w.assign(bins, 0.0);
      hist_wr.assign(bins, 0.0);
      for (size_t r : rows) {
        hist_w[bin_of[f][r]] += weight[r];
        hist_wr[bin_of[f][r]] += weight[r] * residual[r];
      }
      double left_w = 0, left_wr = 0;
      for (size_t b = 0; b + 1 < bins; ++b) {
        left_w += hist_w[b];
        left_wr += hist_wr[b];
        const double right_w = sum_w - left_w;
        if (left_w < options.min_leaf_weight || right_w < options.min_leaf_weight) continue;
        const double right_wr = sum_wr - left_wr;
        const double gain = left_wr * left_wr / left_w + right_wr * right_wr / right_w - parent_score;
        if (gain > best_gain) {
          best_gain = gain;
          best_feature = static_cast<int>(f);
          best_bin = b;
        }
      }
    }
    if (best_feature < 0) return index;
    std::vector<size_t> left_rows, right_rows;
    for (size_t r : rows) (bin_of[static_cast<size_t>(best_feature)][r] <= best_bin ? left_rows : right_rows).push_back(r);
    rows.clear();
    rows.shrink_to_fit();
    const int left = grow(left_rows, depth + 1);
    const int right = grow(right_rows, depth + 1);
    auto& node = nodes[static_cast<size_t>(index)];
    node.feature = best_feature;
    node.threshold = thresholds[static_cast<size_t>(best_feature)][best_bin];
    node.left = left;
    node.right = right;
    return index;
  }
};

double evaluate_tree(const std::vector<BoostedTreesCostModel::Node>& tree, const std::vector<double>& features) {
  size_t index = 0;
  while (tree[index].feature >= 0) {
    const auto& node = tree[index];
    index = static_cast<size_t>(features[static_cast<size_t>(node.feature)] <= node.threshold ? node.left : node.right);
  }
  return tree[index].value;
}

}  // namespace

void BoostedTreesCostModel::fit(const std::vector<std::vector<double>>& features, const std::vector<double>& times_us,
                                const std::vector<double>& weights) {
  check_training_rows(features, times_us, weights);
  const size_t rows = features.size();
  feature_count_ = features.front().size();
  std::vector<double> target(rows), weight(rows);
  double total_weight = 0;
  base_ = 0;
  for (size_t r = 0; r < rows; ++r) {
    target[r] = std::log(std::max(times_us[r], 1e-9));
    weight[r] = weight_of(weights, r);
    total_weight += weight[r];
    base_ += weight[r] * target[r];
  }
  base_ /= total_weight;

  const size_t bins = std::clamp<size_t>(options_.bins, 2, 255);
  std::vector<std::vector<double>> thresholds(feature_count_);
  std::vector<std::vector<uint8_t>> bin_of(feature_count_, std::vector<uint8_t>(rows));
  for (size_t f = 0; f < feature_count_; ++f) {
    std::vector<double> column(rows);
    for (size_t r = 0; r < rows; ++r) column[r] = features[r][f];
    thresholds[f] = split_thresholds(column, bins);
    for (size_t r = 0; r < rows; ++r) {
      const auto position = std::lower_bound(thresholds[f].begin(), thresholds[f].end(), column[r]);
      bin_of[f][r] = static_cast<uint8_t>(position - thresholds[f].begin());
    }
  }

  std::vector<double> prediction(rows, base_), residual(rows);
  trees_.clear();
  for (size_t round = 0; round < options_.rounds; ++round) {
    for (size_t r = 0; r < rows; ++r) residual[r] = target[r] - prediction[r];
    TreeBuilder builder{bin_of, thresholds, residual, weight, options_, {}};
    std::vector<size_t> all(rows);
    std::iota(all.begin(), all.end(), 0);
    builder.grow(all, 0);
    for (size_t r = 0; r < rows; ++r) prediction[r] += evaluate_tree(builder.nodes, features[r]);
    trees_.push_back(std::move(builder.nodes));
  }
  trained_ = true;
}

double BoostedTreesCostModel::predict_us(const std::vector<double>& features) const {
  if (!trained_) QTUNE_THROW(Error, "cost model: predict before fit");
  if (features.size() != feature_count_) QTUNE_THROW(Error, "cost model: feature length differs from training");
  double log_time = base_;
  for (const auto& tree : trees_) log_time += evaluate_tree(tree, features);
  return std::exp(log_time);
}

const std::vector<std::string>& cost_model_names() {
  static const std::vector<std::string> names = {"trees", "ridge"};
  return names;
}

std::unique_ptr<CostModel> make_cost_model(std::string_view name, double ridge_lambda) {
  if (name == "trees") return std::make_unique<BoostedTreesCostModel>();
  if (name == "ridge") return std::make_unique<RidgeCostModel>(ridge_lambda);
  QTUNE_INPUT_ERROR("cost_model: unknown cost model " + quote_input(name) + " (expected trees or ridge)");
}

}  // namespace qtune::search

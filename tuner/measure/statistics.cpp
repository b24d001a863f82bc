#include "tuner/measure/statistics.hpp"

#include <boost/math/distributions/students_t.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/error.hpp"

namespace qtune::measure {

namespace {

void require_samples(const std::vector<double>& values, const char* what) {
  if (values.empty()) QTUNE_THROW(Error, std::string(what) + " of no samples");
}

}  // namespace

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  require_samples(sorted, "percentile");
  if (!(p >= 0 && p <= 100)) QTUNE_THROW(Error, "percentile: p = " + std::to_string(p) + " is outside [0, 100]");
  const double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const auto lower = static_cast<std::size_t>(std::floor(h));
  if (lower + 1 >= sorted.size()) return sorted.back();
  return sorted[lower] + (h - static_cast<double>(lower)) * (sorted[lower + 1] - sorted[lower]);
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return percentile_of_sorted(values, p);
}

double median(std::vector<double> values) { return percentile(std::move(values), 50); }

double mean(const std::vector<double>& values) {
  require_samples(values, "mean");
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double sample_stddev(const std::vector<double>& values) {
  require_samples(values, "standard deviation");
  if (values.size() < 2) return 0;
  const double average = mean(values);
  double squares = 0;
  for (const double value : values) squares += (value - average) * (value - average);
  return std::sqrt(squares / static_cast<double>(values.size() - 1));
}

double binomial_half_cdf(std::size_t n, std::size_t k) {
  if (k >= n) return 1.0;
  const double log_half_power = static_cast<double>(n) * std::log(0.5);
  const double log_n_factorial = std::lgamma(static_cast<double>(n) + 1);
  double cdf = 0;
  for (std::size_t i = 0; i <= k; ++i) {
    const double log_choose = log_n_factorial - std::lgamma(static_cast<double>(i) + 1) -
                              std::lgamma(static_cast<double>(n - i) + 1);
    cdf += std::exp(log_choose + log_half_power);
  }
  return std::min(cdf, 1.0);
}

MedianInterval median_confidence_interval(std::vector<double> values, double confidence) {
  require_samples(values, "confidence interval of the median");
  if (!(confidence > 0 && confidence < 1)) {
    QTUNE_THROW(Error, "confidence " + std::to_string(confidence) + " is outside (0, 1)");
  }
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double tail = (1 - confidence) / 2;
  // Walk the lower tail of Binomial(n, 1/2): the largest k with P(X <= k) <= tail gives rank r = k + 1. The walk
  // starts 8 standard deviations below n/2, where the mass left out is below 1e-15, so it costs O(sqrt(n)).
  const double log_half_power = static_cast<double>(n) * std::log(0.5);
  const double log_n_factorial = std::lgamma(static_cast<double>(n) + 1);
  const double half = static_cast<double>(n) / 2;
  const double start = std::floor(half - 8 * std::sqrt(static_cast<double>(n)) / 2);
  const std::size_t first = start > 0 ? static_cast<std::size_t>(start) : 0;
  double log_pmf = log_n_factorial - std::lgamma(static_cast<double>(first) + 1) -
                   std::lgamma(static_cast<double>(n - first) + 1) + log_half_power;
  double cdf = 0;
  std::size_t rank = 0;  // 0: no rank reaches the confidence
  double rank_cdf = 0;
  for (std::size_t k = first; k < (n + 1) / 2; ++k) {
    if (k > first) log_pmf += std::log(static_cast<double>(n - k + 1)) - std::log(static_cast<double>(k));
    cdf += std::exp(log_pmf);
    if (cdf > tail) break;
    rank = k + 1;
    rank_cdf = cdf;
  }
  MedianInterval interval;
  interval.reached_confidence = rank > 0;
  if (rank == 0) {
    rank = 1;
    rank_cdf = std::exp(log_half_power);  // P(X <= 0)
  }
  interval.lower_rank = rank;
  interval.upper_rank = n + 1 - rank;
  interval.low = values[interval.lower_rank - 1];
  interval.high = values[interval.upper_rank - 1];
  interval.coverage = std::max(0.0, 1 - 2 * rank_cdf);
  return interval;
}

double Summary::relative_half_width() const {
  if (median <= 0) return INFINITY;
  return std::max(median - median_interval.low, median_interval.high - median) / median;
}

Summary summarize(const std::vector<double>& values, double confidence) {
  require_samples(values, "summary");
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  Summary summary;
  summary.count = sorted.size();
  summary.median = percentile_of_sorted(sorted, 50);
  summary.p10 = percentile_of_sorted(sorted, 10);
  summary.p90 = percentile_of_sorted(sorted, 90);
  summary.min = sorted.front();
  summary.max = sorted.back();
  summary.mean = mean(sorted);
  summary.stddev = sample_stddev(sorted);
  summary.median_interval = median_confidence_interval(std::move(sorted), confidence);
  return summary;
}

bool is_converged(const Summary& summary, const ConvergenceRule& rule) {
  if (summary.count < rule.min_samples || summary.count == 0) return false;
  if (!summary.median_interval.reached_confidence) return false;
  return summary.relative_half_width() <= rule.relative_target;
}

double student_t_quantile(double p, int dof) {
  if (!(p > 0 && p < 1)) QTUNE_THROW(Error, "t quantile: p = " + std::to_string(p) + " is outside (0, 1)");
  if (dof < 1) QTUNE_THROW(Error, "t quantile: degrees of freedom must be >= 1, got " + std::to_string(dof));
  return boost::math::quantile(boost::math::students_t_distribution<double>(dof), p);
}

double BlockInterval::relative_half_width() const { return mean > 0 ? half_width / mean : INFINITY; }

BlockInterval block_medians_interval(const std::vector<double>& samples_in_order, std::size_t blocks,
                                     double confidence) {
  if (blocks < 2) QTUNE_THROW(Error, "block interval: needs at least 2 blocks, got " + std::to_string(blocks));
  if (samples_in_order.size() < blocks) {
    QTUNE_THROW(Error, "block interval: " + std::to_string(samples_in_order.size()) + " samples for " +
                           std::to_string(blocks) + " blocks");
  }
  if (!(confidence > 0 && confidence < 1)) {
    QTUNE_THROW(Error, "confidence " + std::to_string(confidence) + " is outside (0, 1)");
  }
  BlockInterval interval;
  const std::size_t base = samples_in_order.size() / blocks;
  const std::size_t longer = samples_in_order.size() % blocks;  // the first `longer` blocks take one sample more
  auto begin = samples_in_order.begin();
  for (std::size_t block = 0; block < blocks; ++block) {
    const auto end = begin + static_cast<std::ptrdiff_t>(base + (block < longer ? 1 : 0));
    interval.block_medians.push_back(median(std::vector<double>(begin, end)));
    begin = end;
  }
  interval.mean = mean(interval.block_medians);
  const auto count = static_cast<double>(blocks);
  interval.half_width = student_t_quantile((1 + confidence) / 2, static_cast<int>(blocks) - 1) *
                        sample_stddev(interval.block_medians) / std::sqrt(count);
  return interval;
}

bool is_stable(const std::vector<double>& durations, const StabilityRule& rule) {
  if (rule.window == 0 || durations.size() < 2 * rule.window) return false;
  const auto end = durations.end();
  const double recent = median(std::vector<double>(end - static_cast<std::ptrdiff_t>(rule.window), end));
  const double before = median(std::vector<double>(end - static_cast<std::ptrdiff_t>(2 * rule.window),
                                                   end - static_cast<std::ptrdiff_t>(rule.window)));
  if (before <= 0) return false;
  return std::abs(recent - before) / before < rule.tolerance;
}

}  // namespace qtune::measure

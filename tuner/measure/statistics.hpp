#pragma once
// Order statistics of repeated timings (pure CPU): median, percentiles, the distribution-free confidence interval
// of the median, and the rules that end warm-up and repetition.
#include <cstddef>
#include <vector>

namespace qtune::measure {

// Every function taking samples throws qtune::Error when given none.

double median(std::vector<double> values);
// The p-th percentile (0 <= p <= 100) by linear interpolation between closest ranks, the rule of NumPy's default
// and R's type 7: with the values sorted x[0..n-1], h = (n - 1) p / 100 and the result is
// x[floor(h)] + (h - floor(h)) (x[floor(h) + 1] - x[floor(h)]). percentile(v, 50) == median(v).
double percentile(std::vector<double> values, double p);
double percentile_of_sorted(const std::vector<double>& sorted, double p);
double mean(const std::vector<double>& values);
// Sample standard deviation (divides by n - 1); 0 for a single value.
double sample_stddev(const std::vector<double>& values);

// The distribution-free confidence interval of the median from order statistics: with X ~ Binomial(n, 1/2) the
// number of samples below the true median, [x(r), x(n+1-r)] (1-based ranks) covers it with probability
// 1 - 2 P(X <= r - 1). r is the largest rank whose coverage is at least `confidence`; when even r = 1 falls short
// (n < 6 at 95%) the interval is [min, max] and reached_confidence is false.
struct MedianInterval {
  double low = 0;
  double high = 0;
  std::size_t lower_rank = 0;  // r, 1-based
  std::size_t upper_rank = 0;  // n + 1 - r, 1-based
  double coverage = 0;         // the exact coverage of [x(r), x(n+1-r)]
  bool reached_confidence = false;
};
MedianInterval median_confidence_interval(std::vector<double> values, double confidence = 0.95);
// P(X <= k) for X ~ Binomial(n, 1/2), computed in log space so that large n neither underflows nor overflows.
double binomial_half_cdf(std::size_t n, std::size_t k);

struct Summary {
  std::size_t count = 0;
  double median = 0;
  double p10 = 0;
  double p90 = 0;
  double min = 0;
  double max = 0;
  double mean = 0;
  double stddev = 0;
  MedianInterval median_interval;
  // max(median - low, high - median) / median: the half width of the median's interval relative to the median.
  double relative_half_width() const;
};
Summary summarize(const std::vector<double>& values, double confidence = 0.95);

// Repetition stops once count >= min_samples and the median's interval (at `confidence`, reached) lies within
// median * (1 +- relative_target).
struct ConvergenceRule {
  std::size_t min_samples = 20;
  double relative_target = 0.01;
  double confidence = 0.95;
};
bool is_converged(const Summary& summary, const ConvergenceRule& rule);

// Student's t distribution with `dof` degrees of freedom (>= 1): the t with P(T <= t) = p, p in (0, 1) (Boost.Math).
double student_t_quantile(double p, int dof);

// Batch means, for samples that are not independent: a GPU under a power cap runs through slow phases that last longer
// than many repetitions, so the median's order-statistic interval, which treats every sample as independent, is too
// narrow. The samples, in the order they were taken, are cut into `blocks` (>= 2) consecutive blocks of near-equal
// size (at least one sample each); the interval is the `confidence` Student-t interval of the mean of their medians.
struct BlockInterval {
  std::vector<double> block_medians;
  double mean = 0;        // of block_medians
  double half_width = 0;  // t((1 + confidence) / 2, blocks - 1) * stddev(block_medians) / sqrt(blocks)
  double relative_half_width() const;  // half_width / mean
};
BlockInterval block_medians_interval(const std::vector<double>& samples_in_order, std::size_t blocks,
                                     double confidence = 0.95);

// Warm-up has settled when the median of the last `window` durations differs from the median of the `window`
// before them by less than `tolerance` (relative). Needs 2 * window durations.
struct StabilityRule {
  std::size_t window = 10;
  double tolerance = 0.01;
};
bool is_stable(const std::vector<double>& durations, const StabilityRule& rule);

}  // namespace qtune::measure

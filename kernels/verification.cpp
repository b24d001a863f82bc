#include "kernels/verification.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/error.hpp"
#include "kernels/reference.hpp"

namespace qtune {

std::string OutputCheck::summary() const {
  std::ostringstream text;
  text.precision(4);
  auto where = [&](int64_t index) {
    return "(" + std::to_string(index / std::max<int64_t>(n, 1)) + "," + std::to_string(index % std::max<int64_t>(n, 1)) + ")";
  };
  text << (passed ? "PASS" : "FAIL") << " rel " << relative_error << (relative_error <= tolerance ? " <= " : " > ")
       << tolerance << " (" << m << "x" << n << ")";
  if (nan_count > 0) text << "; " << nan_count << " NaN/inf";
  if (worst >= 0) text << "; worst " << where(worst) << " got " << worst_got << " expected " << worst_expected;
  if (first_bad >= 0) {
    text << "; " << bad_count << " elements off; first " << where(first_bad) << " got " << first_bad_got << " expected "
         << first_bad_expected;
  }
  return text.str();
}

OutputCheck compare_output(const std::vector<float>& got, const std::vector<float>& expected, int64_t n,
                           const CheckRules& rules) {
  if (got.size() != expected.size()) {
    QTUNE_THROW(Error, "output has " + std::to_string(got.size()) + " elements, the reference " +
                           std::to_string(expected.size()));
  }
  OutputCheck result;
  result.tolerance = rules.tolerance;
  result.n = n;
  result.m = n > 0 ? static_cast<int64_t>(expected.size()) / n : 0;
  result.relative_error = relative_error(got, expected);
  double sum_squares = 0;
  for (float value : expected) sum_squares += double(value) * double(value);
  const double rms = std::sqrt(sum_squares / static_cast<double>(std::max<size_t>(expected.size(), 1)));
  const double bound = rules.element_bound ? 8.0 * rules.tolerance * std::max(rms, 1e-30) : INFINITY;
  double worst_error = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected_value = expected[i];
    if (!std::isfinite(got[i])) ++result.nan_count;
    const double error = std::isfinite(got[i]) ? std::fabs(double(got[i]) - expected_value) : INFINITY;
    if (error > worst_error) {
      worst_error = error;
      result.worst = static_cast<int64_t>(i);
      result.worst_got = got[i];
      result.worst_expected = static_cast<float>(expected_value);
    }
    if (error > bound) {
      if (result.first_bad < 0) {
        result.first_bad = static_cast<int64_t>(i);
        result.first_bad_got = got[i];
        result.first_bad_expected = static_cast<float>(expected_value);
      }
      ++result.bad_count;
    }
  }
  result.passed = result.nan_count == 0 && result.bad_count == 0 && result.relative_error <= rules.tolerance;
  return result;
}

}  // namespace qtune

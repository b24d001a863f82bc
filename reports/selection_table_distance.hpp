#pragma once
// The nearest-shape metric, written once for qtune and for the C++ headers it generates: the text between the two
// marker lines is embedded at build time (scripts/embed_text.cmake) and SelectionTable::to_cpp_header pastes it into
// every header it writes, so a generated select() computes the very same double, without <cmath>.
#include <cstdint>

namespace qtune::reports {

// ---- begin of the text generated headers share
// ln(x) for x > 0, written out so that a header which may include no <cmath> computes the very same double: range
// reduction by powers of two, then 2 atanh((x - 1) / (x + 1)).
constexpr double natural_log(double x) {
  int exponent = 0;
  while (x >= 2.0) {
    x *= 0.5;
    ++exponent;
  }
  while (x < 1.0) {
    x *= 2.0;
    --exponent;
  }
  const double t = (x - 1.0) / (x + 1.0);
  const double t2 = t * t;
  double term = t;
  double sum = 0.0;
  for (int i = 1; i < 64; i += 2) {
    sum += term / i;
    term *= t2;
  }
  return 2.0 * sum + exponent * 0.69314718055994530942;
}

// Squared distance of two shapes in (ln N, ln K).
constexpr double shape_distance(std::int64_t n1, std::int64_t k1, std::int64_t n2, std::int64_t k2) {
  const double dn = natural_log(static_cast<double>(n1)) - natural_log(static_cast<double>(n2));
  const double dk = natural_log(static_cast<double>(k1)) - natural_log(static_cast<double>(k2));
  return dn * dn + dk * dk;
}
// ---- end of the text generated headers share

}  // namespace qtune::reports

#include "search/shape_limits.hpp"

#include <string>

#include "kernels/error.hpp"

namespace qtune::search {

namespace {

void check_dimension(std::string_view name, std::int64_t value, std::string_view field) {
  if (value < 1 || value > kMaxGemmDimension) {
    QTUNE_INPUT_ERROR(std::string(field) + ": " + std::string(name) + " = " + std::to_string(value) + " is outside [1, " +
                      std::to_string(kMaxGemmDimension) + "] (2^20, the largest dimension the kernels address)");
  }
}

void check_elements(std::string_view product, std::int64_t a, std::int64_t b, std::string_view field) {
  // Both factors are at most 2^20 here, so the product cannot overflow int64.
  if (a * b > kMaxGemmElements) {
    QTUNE_INPUT_ERROR(std::string(field) + ": " + std::string(product) + " = " + std::to_string(a * b) +
                      " elements exceeds " + std::to_string(kMaxGemmElements) +
                      " (2^31 - 1, the most the kernels' 32-bit offsets address)");
  }
}

}  // namespace

void check_weight_shape(std::int64_t n, std::int64_t k, std::string_view field) {
  check_dimension("N", n, field);
  check_dimension("K", k, field);
  check_elements("N*K", n, k, field);
}

void check_m(std::int64_t m, std::string_view field) { check_dimension("M", m, field); }

void check_problem_shape(std::int64_t m, std::int64_t n, std::int64_t k, std::string_view m_field, std::string_view shape_field) {
  check_weight_shape(n, k, shape_field);
  check_m(m, m_field);
  check_elements("M*K", m, k, m_field);
  check_elements("M*N", m, n, m_field);
}

}  // namespace qtune::search

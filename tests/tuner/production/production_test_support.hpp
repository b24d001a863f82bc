#pragma once
// Hand-made selection tables for the production runtime tests: a few M ranges per shape, configs that the mma family
// accepts for those shapes on sm_90, written where a Runtime can read them.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/family.hpp"
#include "reports/selection_table.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune::production::testing {

inline constexpr const char* kFormat = "w4a16-int4-ch";
// N = K = 4096: three M ranges; N = K = 8192: one.
inline constexpr const char* kSmallM = "bm=16,bn=128,bk=256,wm=1,wn=4,wk=1,stages=4,split=4,raster=0";
inline constexpr const char* kMiddleM = "bm=32,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=2,raster=0";
inline constexpr const char* kLargeM = "bm=64,bn=128,bk=128,wm=2,wn=4,wk=1,stages=4,split=1,raster=0";
inline constexpr const char* kBigShape = "bm=128,bn=128,bk=64,wm=2,wn=4,wk=1,stages=4,split=1,raster=0";

struct RangeSpec {
  std::int64_t m_min;
  std::optional<std::int64_t> m_max;
  std::string config;
};

inline reports::ShapeRules shape_rules(std::int64_t n, std::int64_t k, const std::vector<RangeSpec>& ranges) {
  reports::ShapeRules shape;
  shape.n = n;
  shape.k = k;
  for (const RangeSpec& spec : ranges) {
    reports::MRange range;
    range.m_min = spec.m_min;
    range.m_max = spec.m_max;
    range.config = KernelConfig::parse(spec.config, "mma");  // "wgmma:..." names the wgmma family
    // One tuned bucket per range, at its upper end (4096 for the open last range), as an export makes them.
    range.buckets.push_back({spec.m_max.value_or(4096), 10.0 + static_cast<double>(spec.m_min)});
    shape.ranges.push_back(range);
  }
  return shape;
}

// The tests' table: w4a16-int4-ch at 4096 x 4096 (M ranges [1, 16], [17, 64], [65, inf)) and 8192 x 8192.
inline reports::SelectionTable sample_table() {
  reports::SelectionTable table;
  table.gpu = "h200";
  table.formats[kFormat] = {shape_rules(4096, 4096, {{1, 16, kSmallM}, {17, 64, kMiddleM}, {65, std::nullopt, kLargeM}}),
                            shape_rules(8192, 8192, {{1, std::nullopt, kBigShape}})};
  return table;
}

inline std::filesystem::path write_table(const std::filesystem::path& file, const reports::SelectionTable& table) {
  std::ofstream(file) << table.to_json().dump(2) << "\n";
  return file;
}

using test_support::input_error;  // the message of the InputError an action throws

}  // namespace qtune::production::testing

// The one verifier (kernels/verification.hpp) that the families' launcher and the cuBLASLt baselines share.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/verification.hpp"

namespace qtune {
namespace {

// A 64 x 64 reference of ones and twos.
std::vector<float> reference() {
  std::vector<float> values(64 * 64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f + static_cast<float>(i % 2);
  return values;
}

TEST(Verification, PassesAnOutputWithinTheTolerance) {
  std::vector<float> got = reference();
  for (float& value : got) value *= 1.001f;
  const OutputCheck check = compare_output(got, reference(), 64, CheckRules{5e-3, true});
  EXPECT_TRUE(check.passed) << check.summary();
  EXPECT_NEAR(check.relative_error, 1e-3, 1e-6);
  EXPECT_EQ(check.m, 64);
  EXPECT_EQ(check.n, 64);
  EXPECT_EQ(check.nan_count, 0);
  EXPECT_EQ(check.summary().rfind("PASS rel ", 0), 0u) << check.summary();
}

TEST(Verification, TheElementBoundCatchesOneWrongElementTheNormHides) {
  std::vector<float> got = reference();
  got[64 * 5 + 7] += 0.4f;  // one element far off: 8 x 5e-3 x rms is about 0.06
  const OutputCheck families = compare_output(got, reference(), 64, CheckRules{5e-3, true});
  EXPECT_FALSE(families.passed);
  EXPECT_LT(families.relative_error, 5e-3);  // the norm alone would pass it
  EXPECT_EQ(families.bad_count, 1);
  EXPECT_EQ(families.first_bad, 64 * 5 + 7);
  EXPECT_EQ(families.worst, 64 * 5 + 7);
  EXPECT_NE(families.summary().find("1 elements off; first (5,7)"), std::string::npos) << families.summary();
  // cuBLASLt's rule is the norm alone.
  const OutputCheck norm_only = compare_output(got, reference(), 64, CheckRules{5e-3, false});
  EXPECT_TRUE(norm_only.passed) << norm_only.summary();
  EXPECT_EQ(norm_only.bad_count, 0);
}

TEST(Verification, NanNeverPasses) {
  std::vector<float> got = reference();
  got[3] = std::numeric_limits<float>::quiet_NaN();
  for (const bool element_bound : {true, false}) {
    const OutputCheck check = compare_output(got, reference(), 64, CheckRules{1.0, element_bound});
    EXPECT_FALSE(check.passed);
    EXPECT_EQ(check.nan_count, 1);
    EXPECT_TRUE(std::isinf(check.relative_error));
  }
}

TEST(Verification, SizesMustMatch) {
  EXPECT_THROW(compare_output(std::vector<float>(10), reference(), 64, CheckRules{5e-3, true}), Error);
}

}  // namespace
}  // namespace qtune

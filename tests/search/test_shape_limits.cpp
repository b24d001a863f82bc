// The shape bounds every command checks (issue 18 #17): each dimension at most 2^20 and each operand's element
// count within int32, the errors naming the field.
#include <gtest/gtest.h>

#include <string>

#include "kernels/error.hpp"
#include "search/m_buckets.hpp"
#include "search/shape_limits.hpp"

namespace qtune::search {
namespace {

// The InputError message of `check`, or "" when it passes.
template <typename Check>
std::string refusal(Check check) {
  try {
    check();
  } catch (const InputError& error) {
    return error.what();
  }
  return "";
}

TEST(ShapeLimits, AcceptsRealModelShapes) {
  EXPECT_EQ(refusal([] { check_problem_shape(8192, 57344, 8192, "--m", "--shape"); }), "");
  EXPECT_EQ(refusal([] { check_problem_shape(1, 129280, 7168, "--m", "--shape"); }), "");
  EXPECT_EQ(refusal([] { check_problem_shape(kMaxGemmDimension, 2047, 1024, "--m", "--shape"); }), "");
}

TEST(ShapeLimits, RefusesWhatTheKernelsCannotAddress) {
  EXPECT_NE(refusal([] { check_weight_shape(std::int64_t{1} << 40, 8192, "--shape"); }).find("--shape: N = 1099511627776"),
            std::string::npos);
  EXPECT_NE(refusal([] { check_weight_shape(8192, 0, "--shape"); }).find("--shape: K = 0"), std::string::npos);
  EXPECT_NE(refusal([] { check_weight_shape(kMaxGemmDimension, kMaxGemmDimension, "--shape"); }).find("--shape: N*K = "),
            std::string::npos);
  EXPECT_NE(refusal([] { check_m(kMaxGemmDimension + 1, "--m"); }).find("--m: M = 1048577"), std::string::npos);
  EXPECT_NE(refusal([] { check_problem_shape(4096, 1 << 20, 1024, "--m", "--shape"); }).find("--m: M*N = 4294967296"),
            std::string::npos);
  EXPECT_NE(refusal([] { check_problem_shape(1 << 20, 1024, 4096, "--m", "--shape"); }).find("--m: M*K = "),
            std::string::npos);
  EXPECT_NE(refusal([] { parse_m_list("1,16,2097152", "--m"); }).find("--m: M = 2097152"), std::string::npos);
}

}  // namespace
}  // namespace qtune::search

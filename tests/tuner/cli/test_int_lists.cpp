// The comma-separated integer lists of --m and --shape, shared by the bench and kernel-sweep commands.
#include <gtest/gtest.h>

#include <string>

#include "kernels/error.hpp"
#include "tuner/cli/commands.hpp"

namespace qtune::cli {
namespace {

std::string message_of(const std::string& text) {
  try {
    parse_positive_int_list(text, "--m");
  } catch (const InputError& error) {
    return error.what();
  }
  return "no error";
}

TEST(PositiveIntList, ParsesInOrder) {
  EXPECT_EQ(parse_positive_int_list("1,16,256", "--m"), (std::vector<std::int64_t>{1, 16, 256}));
  EXPECT_EQ(parse_positive_int_list("8192", "--shape"), (std::vector<std::int64_t>{8192}));
}

TEST(PositiveIntList, BadItemsNameTheOptionAndTheItem) {
  EXPECT_EQ(message_of("1,x,3"), "--m: 'x' is not a positive integer (in '1,x,3')");
  EXPECT_EQ(message_of("1,0"), "--m: '0' is not a positive integer (in '1,0')");
  EXPECT_EQ(message_of("1,-4"), "--m: '-4' is not a positive integer (in '1,-4')");
  EXPECT_EQ(message_of("16k"), "--m: '16k' is not a positive integer (in '16k')");
  EXPECT_EQ(message_of("1,2,"), "--m: expected a comma-separated list, got '1,2,'");
  EXPECT_EQ(message_of(""), "--m: expected a comma-separated list, got ''");
}

// Kernel parameter ranges (kernel-sweep --raster 0,2) start at 0.
TEST(IntList, ZeroIsAllowedWhereTheMinimumIsZero) {
  EXPECT_EQ(parse_int_list("0,2,3", "--raster", 0), (std::vector<std::int64_t>{0, 2, 3}));
  try {
    parse_int_list("0,-1", "--raster", 0);
    ADD_FAILURE() << "no error for -1";
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()), "--raster: '-1' is not an integer >= 0 (in '0,-1')");
  }
}

}  // namespace
}  // namespace qtune::cli

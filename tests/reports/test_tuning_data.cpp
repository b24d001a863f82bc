// What export and report read: the format filter takes the format-list grammar of every command (kernels/format.hpp)
// plus the dense formats, as canonical texts.
#include "reports/tuning_data.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "tests/common/expect_error.hpp"

namespace qtune::reports {
namespace {

TEST(TuningData, FormatFilterTakesTheOneListGrammarAndDenseFormats) {
  EXPECT_EQ(parse_format_list("W4A16-INT4-CH, w8a8-fp8-ch:scale=f16,act-scale=token;F16,bf16,w4a16-int4-ch"),
            (std::vector<std::string>{"w4a16-int4-ch", "w8a8-fp8-ch:scale=f16", "f16", "bf16"}));
  EXPECT_THROW(parse_format_list("w4a16-int4-ch,,f16"), InputError);
  const std::string message = test_support::input_error([] { parse_format_list("w4a16-int4-ch;nope", "--format"); });
  EXPECT_EQ(message.rfind("--format: ", 0), 0u) << message;
}

}  // namespace
}  // namespace qtune::reports

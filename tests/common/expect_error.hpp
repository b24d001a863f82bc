#pragma once
// Expecting the one-line InputError that bad input gets (exit status 2), naming what the user has to change.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace qtune::test_support {

// Runs `action`, expecting an InputError whose one-line message contains every piece of `expected`.
inline void expect_input_error(const std::function<void()>& action, const std::vector<std::string>& expected) {
  try {
    action();
    FAIL() << "no error; expected one mentioning '" << expected.front() << "'";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    for (const auto& piece : expected) {
      EXPECT_NE(message.find(piece), std::string::npos) << "'" << piece << "' missing from: " << message;
    }
  }
}

}  // namespace qtune::test_support

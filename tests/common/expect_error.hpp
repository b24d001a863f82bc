#pragma once
// Expecting the one-line InputError that bad input gets (exit status 2), naming what the user has to change.
#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace qtune::test_support {

// The message of the InputError `action` throws; fails the test and returns "" when it throws nothing or another error.
inline std::string input_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "expected an InputError, got: " << error.what();
    return "";
  }
  ADD_FAILURE() << "expected an InputError, nothing was thrown";
  return "";
}

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

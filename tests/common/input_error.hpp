#pragma once
// Checking the InputError an action throws (bad input: one line that names the field).
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <vector>

#include "kernels/error.hpp"

namespace qtune::test_support {

// The message of the InputError `action` throws; fails the test and returns "" when it throws nothing or another error.
template <typename Action>
std::string input_error(Action&& action) {
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

// Expects an InputError whose message is one line holding every fragment.
template <typename Action>
void expect_input_error(Action&& action, const std::vector<std::string>& fragments) {
  const std::string message = input_error(action);
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << message;
  }
}

}  // namespace qtune::test_support

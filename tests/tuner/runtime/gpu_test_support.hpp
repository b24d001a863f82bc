#pragma once
// Helpers for tests that need (or must not have) a GPU: they skip with the reason instead of passing silently.
#include <gtest/gtest.h>

#include <string>

#include "kernels/error.hpp"
#include "tuner/runtime/device.hpp"

namespace qtune::testing_support {

// The NoGpuError message when no GPU is usable, "" when device 0 opens.
inline std::string gpu_unavailable_reason() {
  try {
    runtime::Device::get(0);
    return "";
  } catch (const NoGpuError& error) {
    return error.what();
  }
}

}  // namespace qtune::testing_support

// Skips the calling test, saying why, when no GPU is usable.
#define QTUNE_REQUIRE_GPU()                                                                          \
  do {                                                                                               \
    const std::string qtune_no_gpu_reason = ::qtune::testing_support::gpu_unavailable_reason();      \
    if (!qtune_no_gpu_reason.empty()) GTEST_SKIP() << "needs a GPU: " << qtune_no_gpu_reason;        \
  } while (0)

// Skips the calling test when a GPU is usable (it checks what happens without one).
#define QTUNE_REQUIRE_NO_GPU()                                                                                    \
  do {                                                                                                            \
    if (::qtune::testing_support::gpu_unavailable_reason().empty()) {                                             \
      GTEST_SKIP() << "checks the behaviour without a GPU, and this machine has one (covered by the GPU tests)"; \
    }                                                                                                             \
  } while (0)

#include "tuner/runtime/crash_report.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

namespace {

// The report (from the first installer: the test binary installs one for all tests) names the signal and at least one frame as module+offset, then the process dies by that signal.
TEST(CrashReport, AbortPrintsTheSignalAndAStackThenDiesByIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        qtune::runtime::install_crash_report("crash-test");
        std::abort();
      },
      testing::KilledBySignal(SIGABRT), ": fatal signal 6 .*call stack.*#0 .*[+]0x[0-9a-f]+");
}

}  // namespace

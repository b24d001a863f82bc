// test_tuner runs CUDA in-process: a fatal signal (e.g. a heap abort at exit) prints where it happened.
#include "tuner/runtime/crash_report.hpp"

namespace {
const bool crash_report_installed = [] {
  qtune::runtime::install_crash_report("test_tuner");
  return true;
}();
}  // namespace

#pragma once
// The worker's built-in selftest jobs (see register_selftest_jobs in worker.hpp) and the small kernels they use,
// compiled at run time with the JIT for the device at hand.
#include <string>

#include "tuner/runtime/module.hpp"

namespace qtune::measure {

// Compiles `source` with the JIT (tuner/jit) for the compute capability of device `device` (made current), loads it
// and returns the kernel `kernel_name` (an extern "C" name). Throws NoGpuError without a GPU.
runtime::Kernel compile_kernel_for_device(const std::string& source, const std::string& kernel_name, int device = 0);

// extern "C" __global__ void qtune_selftest_copy(const uint4* source, uint4* destination, unsigned long long count)
// copies count 16-byte elements (grid-stride, 4 loads in flight per thread).
const std::string& selftest_copy_source();
inline constexpr const char* kSelftestCopyKernel = "qtune_selftest_copy";
// The launch shape that saturates memory bandwidth with the copy kernel on `device`.
runtime::LaunchConfig selftest_copy_launch(int device = 0);

}  // namespace qtune::measure

#pragma once
// The worker's built-in selftest jobs (see register_selftest_jobs in worker.hpp) and the small kernels they use,
// compiled at run time with the JIT for the device at hand.
#include <string>
#include <vector>

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

// Tensor-core ceiling kernels: each thread block issues nothing but mma.sync on register operands (8 independent
// accumulator chains per warp), so their rate is the most an mma.sync main loop can reach on a GPU. Signature:
// extern "C" __global__ void <kernel_name>(int iterations, unsigned* sink).
struct MmaPeakKernel {
  std::string type;         // "f16", "bf16", "int8", "fp8_e4m3"
  std::string kernel_name;
  std::string instruction;  // the mma.sync it issues
  int k = 0;                // of the m16n8kK shape: 2 * 16 * 8 * K operations per mma
  int min_sm = 0;           // first architecture with the instruction
  int chains = 8;           // independent accumulators per warp
  int iterations = 4096;    // loop trips per launch
  std::string source;
};
const std::vector<MmaPeakKernel>& mma_peak_kernels();
// The kernel of one type; InputError naming "type" for an unknown one.
const MmaPeakKernel& mma_peak_kernel(const std::string& type);
// The launch that fills every SM (32 warps each).
runtime::LaunchConfig mma_peak_launch(int device = 0);
// Operations (2 per multiply-add) one launch of `kernel` with `launch` performs.
double mma_peak_operations(const MmaPeakKernel& kernel, const runtime::LaunchConfig& launch);

}  // namespace qtune::measure

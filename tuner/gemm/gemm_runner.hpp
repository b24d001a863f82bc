#pragma once
// Running a kernel family's GEMM on the GPU: random problem data (never zeros) with its CPU reference, device
// buffers filled from the family's prepacked layouts, the output poisoned (NaN) before every checked launch, and a
// verification that says where and how a result is wrong. Used by the GPU tests and `qtune kernel-sweep`.
#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/family.hpp"
#include "kernels/reference.hpp"
#include "kernels/verification.hpp"
#include "tuner/jit/compiler.hpp"
#include "tuner/runtime/memory.hpp"
#include "tuner/runtime/module.hpp"

namespace qtune::gemm {

// Random data for a problem: activations N(0, 1), weights N(0, 0.02), bias N(0, 0.5), quantized by the RTN quantizer.
struct GemmData {
  Problem problem;
  QuantizedWeights weights;
  QuantizedActivations activations;
  std::vector<float> bias;  // empty without bias
};
GemmData make_gemm_data(const Problem& problem, uint64_t seed);
// The same weights with new activations for another M (weights dominate the set-up time of large shapes).
GemmData with_new_activations(const GemmData& data, int64_t m, uint64_t seed);
ReferenceResult reference_for(const GemmData& data);

// The NVRTC target for a compute capability: sm_90a, sm_100a, sm_103a, sm_120a and sm_121a use their
// architecture-specific features.
std::string nvrtc_arch(int sm);
// The architecture limits of the current device (runtime::Device::get()).
ArchLimits device_limits(int device_ordinal = 0);

// A family kernel compiled and loaded on the current device.
class LoadedKernel {
 public:
  LoadedKernel(const KernelFamily& family, KernelConfig config, const FormatSpec& format, const jit::CompiledKernel& compiled);
  const KernelFamily& family() const { return *family_; }
  const KernelConfig& config() const { return config_; }
  const jit::CompiledKernel& compiled() const { return compiled_; }
  const runtime::Kernel& kernel() const { return kernel_; }

 private:
  const KernelFamily* family_;
  KernelConfig config_;
  jit::CompiledKernel compiled_;
  runtime::Module module_;
  runtime::Kernel kernel_;
};

// Enqueues one launch of `kernel` (a family kernel for `config`) for `problem`: packs the arguments from the device
// address of each buffer by name (see KernelFamily::buffers) and opts in to the dynamic shared memory. Never synchronises.
void launch_gemm(const KernelFamily& family, const KernelConfig& config, const Problem& problem, const runtime::Kernel& kernel,
                 const std::map<std::string, uint64_t>& device_addresses, CUstream stream);

// The parts of launch_gemm for a launcher with its own arguments (the MoE providers): the driver encodes each TMA
// tensor map a family asked for into its parameter; the launch of a geometry (a persistent grid capped to the device,
// the dynamic shared memory opted in on `kernel`).
void encode_tensor_maps(KernelArguments& arguments);
runtime::LaunchConfig launch_config(const LaunchGeometry& geometry, const runtime::Kernel& kernel);

// Bytes a launch must move at least once: packed weights, scales, activations, bias and output (every buffer but
// the workspace), for GB/s figures.
uint64_t compulsory_bytes(const KernelFamily& family, const KernelConfig& config, const Problem& problem);

// Device buffers of one problem. Prepacked weights are uploaded once (the mma layout does not depend on the config);
// the workspace is re-zeroed whenever a different configuration is prepared.
class GemmDeviceData {
 public:
  GemmDeviceData(const KernelFamily& family, const KernelConfig& any_config, const GemmData& data);
  // Sizes the workspace for `config` and zeroes it (split-K counters must start at zero).
  void prepare(const KernelConfig& config);
  // Fills the output with 0xFF bytes: NaN in f16 and bf16, so an element the kernel never writes is caught.
  void poison_output();
  // Enqueues one launch (the config must have been prepared). Never synchronises.
  void launch(const LoadedKernel& kernel, CUstream stream);
  // Downloads "c" (synchronous) as 16-bit patterns.
  std::vector<uint16_t> output_bits() const;
  const Problem& problem() const { return problem_; }
  // Bytes a launch must move at least once: packed weights, scales, activations, bias and output.
  uint64_t compulsory_bytes() const { return compulsory_bytes_; }

 private:
  const KernelFamily* family_;
  Problem problem_;
  std::map<std::string, runtime::DeviceBuffer> buffers_;
  std::string prepared_config_;
  uint64_t compulsory_bytes_ = 0;
};

// A family kernel's output checked by the one verifier (kernels/verification.hpp).
using Verification = OutputCheck;

// Compares an output (16-bit patterns of the format's output type) against the reference: passes when the relative
// error is within `tolerance`, there is no NaN/inf, and no element is off by more than 8 * tolerance * rms(reference)
// (a wrong column cannot hide in a norm).
Verification verify_output(const std::vector<uint16_t>& output_bits, OutputType output, const ReferenceResult& reference,
                           double tolerance);

}  // namespace qtune::gemm

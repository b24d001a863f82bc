#pragma once
// The "bsmma" kernel family: block-scaled GEMMs on the warp MMA of consumer Blackwell (sm_120a, sm_121a): W4A4 NVFP4
// and MXFP4 (mma.sync m16n8k64 kind::mxf4nvf4, ue4m3 scales per 16 or ue8m0 per 32 along K), MX W8A8 and W4A8 fp4 x
// fp8 (m16n8k32 kind::mxf8f6f4, ue8m0 per 32). Activations and weights are prepacked in the instructions' fragment
// order with their scale words, so the kernel reads fragments straight into registers. Device code: kernels/device/gemm/block_scaled_mma.cuh. Only compiled here (no sm_120 GPU to run on).
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/family.hpp"

namespace qtune {

namespace block_scaled {

// How a supported format maps onto the instructions: kind::mxf4nvf4 (e2m1 x e2m1, 4 scales per K step of 64 for
// NVFP4's ue4m3, 2 for MXFP4's ue8m0) or kind::mxf8f6f4 (fp8 activations, e2m1/e4m3/e5m2 weights, ue8m0 per 32).
struct Variant {
  int kind = 0;                 // device::BlockScaledKind
  int activation_element = 0;   // device::ElementCode
  int weight_element = 0;
  int activation_bits = 4;      // in memory
  int weight_bits = 4;
  int scale_vec = 4;            // scale bytes per K step of 64
  bool activation_global_scale = false;
  bool weight_global_scale = false;
};
// The variant of `format`, or the reason it has none (the one line `formats show` prints).
std::optional<Variant> variant_of(const FormatSpec& format, std::string* reason = nullptr);

// Packed sizes. Activations are packed for rows rounded up to kBlockScaledRowPadding.
uint64_t activation_bytes(const Variant& variant, int64_t m, int64_t k);
uint64_t activation_scale_bytes(int64_t m, int64_t k);
uint64_t weight_bytes(const Variant& variant, int64_t n, int64_t k);
uint64_t weight_scale_bytes(int64_t n, int64_t k);

// "a", "a_scales" (and "a_global_scale" for NVFP4): fragments and scale words in the instructions' order.
PackedBuffers prepack_activations(const QuantizedActivations& activations);
// "weights", "scales", "global_scale".
PackedBuffers prepack_weights(const QuantizedWeights& weights);
QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n, int64_t k);

}  // namespace block_scaled

class BlockScaledFamily final : public KernelFamily {
 public:
  std::string name() const override { return "bsmma"; }
  std::string description() const override;
  std::vector<ParameterDomain> parameter_space() const override;
  ArchSupport supports(const FormatSpec& format, int sm) const override;
  RuleVerdict check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const override;
  std::string kernel_name(const KernelConfig& config, const FormatSpec& format) const override;
  std::string instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                   const std::string& arch) const override;
  LaunchGeometry launch_geometry(const KernelConfig& config, const Problem& problem) const override;
  std::vector<BufferSpec> buffers(const KernelConfig& config, const Problem& problem) const override;
  KernelArguments pack_arguments(const KernelConfig& config, const Problem& problem,
                                 const std::map<std::string, uint64_t>& device_addresses) const override;
  PackedBuffers prepack_weights(const QuantizedWeights& weights, const KernelConfig& config) const override;
  QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n, int64_t k,
                                  const KernelConfig& config) const override;
  PackedBuffers prepack_activations(const QuantizedActivations& activations, const KernelConfig& config) const override;
  std::vector<uint8_t> pack_bias(std::span<const float> bias, const FormatSpec& format) const override;
  KernelConfig default_config(const Problem& problem, const ArchLimits& limits) const override;
  ParameterRanges curated_ranges(int64_t m) const override;

  // Registers per thread check() assumes: accumulators, two K steps of fragments, addressing.
  static int estimated_registers(const KernelConfig& config, const FormatSpec& format);
};

const BlockScaledFamily& block_scaled_family();

}  // namespace qtune

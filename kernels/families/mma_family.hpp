#pragma once
// The "mma" kernel family: quantized GEMM on mma.sync tensor cores (sm_80 and later), with cp.async pipelines,
// ldmatrix and register dequantization of prepacked weights. Device code: kernels/device/gemm/mma_gemm.cuh.
#include "kernels/family.hpp"

namespace qtune {

class MmaFamily : public KernelFamily {
 public:
  std::string name() const override { return "mma"; }
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
  std::string weight_layout() const override { return "mma"; }  // the wgmma family reads it too
  // Small M: one m16 row of tiles, many N/K/split shapes; large M: taller M tiles, no split-K, rasterization.
  ParameterRanges curated_ranges(int64_t m) const override;

  // The number of registers per thread check() assumes (accumulators, fragments, weight words, addressing).
  static int estimated_registers(const KernelConfig& config, const FormatSpec& format);

 protected:
  // One CTA per (BLOCK_M x BLOCK_N tile, K split), N-tiles x M-tiles x split in a 1-D grid; with split > 1 a workspace
  // of split partial tiles in f32 then one counter per tile, zeroed before the first launch.
  static LaunchGeometry tile_grid(const Problem& problem, int bm, int bn, int split, int threads, int dynamic_shared_bytes);
  // The first rules of every family on the mma weight layout, in order: the config's family and parameters, the
  // format on the architecture, the problem's shape, bn | N, bk | K and bk a multiple of the weight atom (every
  // such family has the parameters bn and bk).
  RuleVerdict check_config_and_shape(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const;
  // Shared memory per block and the estimated registers per thread against the architecture's limits.
  static RuleVerdict check_block_resources(int shared_bytes, int registers, int threads, const ArchLimits& limits);
  // The last ones: a tile at least twice M (padded to 16) or rasterization over one M tile is a slower twin of
  // another configuration.
  static RuleVerdict check_m_tiling(int bm, int raster, const Problem& problem);
};

const MmaFamily& mma_family();

}  // namespace qtune

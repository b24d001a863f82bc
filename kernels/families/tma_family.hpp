#pragma once
// The "tma" kernel family: quantized GEMM on Hopper (sm_90a) with a TMA-fed, warp-specialized, persistent wgmma main
// loop, for weight-only formats and for quantized activations (W8A8 fp8 and int8, W4A8): a producer warp fills a ring
// of shared-memory slots with the bulk copy engine (activations through a TMA tensor map, weight strips and scale rows
// as contiguous bulk copies) guarded by full/empty mbarriers, and consumer warpgroups turn the weights into wgmma's
// register operand (swap-AB: tokens are wgmma's N). Optional persistence, split-K, clusters of two or four CTAs with
// TMA multicast of the operand they share, rasterization, a wgmma group in flight, the fp8 promotion interval (or none),
// consumer warpgroups taking turns. Weights, scales and buffers are the mma family's prepacked
// layout. Device code: kernels/device/gemm/tma_gemm.cuh.
#include "kernels/families/mma_family.hpp"

namespace qtune {

class TmaFamily final : public MmaFamily {
 public:
  std::string name() const override { return "tma"; }
  std::string description() const override;
  std::vector<ParameterDomain> parameter_space() const override;
  ArchSupport supports(const FormatSpec& format, int sm) const override;
  RuleVerdict check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const override;
  std::string kernel_name(const KernelConfig& config, const FormatSpec& format) const override;
  std::string instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                   const std::string& arch) const override;
  LaunchGeometry launch_geometry(const KernelConfig& config, const Problem& problem) const override;
  KernelArguments pack_arguments(const KernelConfig& config, const Problem& problem,
                                 const std::map<std::string, uint64_t>& device_addresses) const override;
  KernelConfig default_config(const Problem& problem, const ArchLimits& limits) const override;
  bool preferred_for(const Problem& problem, int sm) const override;

  // Where the hand-written rules and `tune --family auto` take this family: quantized activations from M = 32 on,
  // weight-only formats from M = 256 on (H200, 2026-12-02: W4A16 at M = 256 45.8 us against the wgmma family's 60.4,
  // at M = 1024 166.5 against 238.1).
  static constexpr int64_t kPreferredFromM = 32;
  static constexpr int64_t kPreferredFromMWeightOnly = 32;
  // The per-M parameter ranges a curated search tries (a few dozen configurations per problem; check() drops the
  // depths a format's atom rules out).
  ParameterRanges curated_ranges(int64_t m) const override;
  // Dynamic shared memory of a configuration, mirroring device::TmaGemm::SHARED_BYTES.
  static int shared_bytes(const KernelConfig& config, const FormatSpec& format);
  // Registers per consumer thread check() assumes (accumulators, fragments, weight words, addressing).
  static int estimated_consumer_registers(const KernelConfig& config, const FormatSpec& format);
  // Registers per consumer thread (setmaxnreg) with `warpgroups` consumer warpgroups, and whether the tile holds more
  // than 128 accumulators per thread (flushed partial sums of 192 tokens; device::TmaGemm::CONSUMER_REGISTERS).
  static int consumer_registers(int warpgroups, bool wide_flushed) { return warpgroups == 1 ? 240 : wide_flushed ? 232 : 224; }
  // The block size, the device::TmaTiles template arguments and the static shared memory of a configuration: what the
  // MoE kernel (kernels/families/mma_moe.hpp) instantiates and launches too.
  static int threads(const KernelConfig& config);
  static std::string tiles_template_arguments(const KernelConfig& config);
  static int static_shared_memory(const KernelConfig& config);
};

const TmaFamily& tma_family();

}  // namespace qtune

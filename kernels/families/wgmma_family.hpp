#pragma once
// The "wgmma" kernel family: quantized GEMM on Hopper's warpgroup MMA (sm_90a), weight-only formats (f16/bf16
// activations) and fp8 activations (W4A8, W8A8 fp8), which it widens to f16 as they are staged (exact) and multiplies
// with weights dequantized to f16 (exact), scales applied to the f32 sums. Dequantized weights are wgmma's A operand in
// registers, activations its B operand in swizzled shared memory (swap-AB). Weights, scales and buffers are the mma
// family's prepacked layout (fp8-operand atoms for fp8 activations); only the kernel and its parameter space differ.
// Device code: kernels/device/gemm/wgmma_gemm.cuh.
#include <optional>
#include <string>

#include "kernels/families/mma_family.hpp"

namespace qtune {

class WgmmaFamily final : public MmaFamily {
 public:
  std::string name() const override { return "wgmma"; }
  std::string description() const override;
  std::vector<ParameterDomain> parameter_space() const override;
  ArchSupport supports(const FormatSpec& format, int sm) const override;
  RuleVerdict check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const override;
  std::string kernel_name(const KernelConfig& config, const FormatSpec& format) const override;
  std::string instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                   const std::string& arch) const override;
  LaunchGeometry launch_geometry(const KernelConfig& config, const Problem& problem) const override;
  KernelConfig default_config(const Problem& problem, const ArchLimits& limits) const override;
  // On the H200 the mma family's swap-AB path wins up to M = 8 and wgmma from M = 16 (docs/perf.md, 2026-11-30:
  // Llama-3-70B with both families tuned at every M): the heuristic and tune --family auto switch here.
  static constexpr int64_t kPreferredFromM = 16;
  // From kPreferredFromM rows on, and at every M for W4A8 (fp8 activations widened, 4-bit weights): heuristic_family
  // asks only where the family runs the format; the tma family, before it, takes quantized activations from its start.
  bool preferred_for(const Problem& problem, int sm) const override;
  // One token tile per M (wgmma N), every column and depth tile, split-K only while M tiles are few.
  ParameterRanges curated_ranges(int64_t m) const override;

  // Whether the family runs `format` with its activations widened to f16 (quantized activations), and why it cannot
  // (int8/int4 activations, weights not packed as fp8 operands, activation scales per K group); nullopt: it can.
  static bool widens_activations(const FormatSpec& format);
  static constexpr int kWidenedMaxBm = 64;  // rule "widened-bm": larger token tiles spill
  // Whether the hand-written rules take the widened path for `format`: fp8 activations with weights of at most 4 bits
  // (W4A8), where it was measured faster; 8-bit weights (W8A8 fp8) lost to the tma and mma families at M = 1 and 16.
  static bool widened_preferred(const FormatSpec& format);
  static std::optional<std::string> widening_refusal(const FormatSpec& format);
  // Dynamic shared memory of a configuration, mirroring device::WgmmaGemm::SHARED_BYTES.
  static int shared_bytes(const KernelConfig& config, const FormatSpec& format);
  // The number of registers per thread check() assumes (calibrated on ptxas reports of sm_90a builds).
  static int estimated_registers(const KernelConfig& config);
  // Threads of a configuration's block (one warp per 16-column weight strip), the template arguments of its
  // device::Tiles, and its kernel options after them, "IN_FLIGHT, SCALE_AFTER" ("overlap", "gscale"): what the MoE
  // kernel (kernels/families/mma_moe.hpp) instantiates too.
  static int threads(const KernelConfig& config);
  static std::string tiles_template_arguments(const KernelConfig& config);
  static std::string gemm_options(const KernelConfig& config);
  // The persistent MoE schedule (1) or one CTA per unit (0): the parameter "persistent", 0 when absent.
  static int persistent(const KernelConfig& config);
  // The rule a dense GEMM with persistent=1 fails (MoE checks allow it).
  static constexpr const char* kPersistentMoeOnlyRule = "persistent-moe-only";
  // Static shared memory of the kernel (the split-K flag).
  static constexpr int kStaticSharedBytes = 16;
};

const WgmmaFamily& wgmma_family();

}  // namespace qtune

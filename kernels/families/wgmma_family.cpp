#include "kernels/families/wgmma_family.hpp"

#include <algorithm>
#include <optional>

#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/families/mma_layout.hpp"

namespace qtune {

namespace dv = qtune::device;
using mma::DeviceFormat;

namespace {

constexpr const char* kKernelName = "qtune_wgmma_gemm";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int kSplitFlagBytes = WgmmaFamily::kStaticSharedBytes;

// Configs recorded before "overlap" existed ran without a stage in flight, and before "gscale" scaled the weights.
constexpr int kOverlapWhenAbsent = 0;
constexpr int kGroupScaleWhenAbsent = 0;
constexpr int kPersistentWhenAbsent = 0;

struct WgmmaTiles {
  int bm, bn, bk, stages, split, raster, overlap, gscale, persistent;

  static WgmmaTiles from(const KernelConfig& config) {
    auto get = [&](const char* name) {
      auto found = config.params.find(name);
      if (found == config.params.end()) QTUNE_INPUT_ERROR(std::string("config: the wgmma family needs '") + name + "'");
      return found->second;
    };
    auto optional = [&](const char* name, int absent) {
      const auto found = config.params.find(name);
      return found == config.params.end() ? absent : found->second;
    };
    return {get("bm"),    get("bn"), get("bk"), get("stages"), get("split"), get("raster"), optional("overlap", kOverlapWhenAbsent),
            optional("gscale", kGroupScaleWhenAbsent), optional("persistent", kPersistentWhenAbsent)};
  }
  // Partial-sum sets of gscale = 1 (device::WgmmaGemm::PARTIAL_SETS): one per scale group of a stage.
  int partial_sets(const DeviceFormat& device) const {
    const int group = device.stage_group_k();
    return gscale == 0 ? 0 : group > 0 && group < bk ? bk / group : 1;
  }
  int threads() const { return 2 * bn; }  // one warp per 16-column strip
  // device::Tiles<BM, BN, BK, WARPS_M, WARPS_N, WARPS_K, STAGES, SPLIT, RASTER>
  std::string template_arguments() const {
    return std::to_string(bm) + ", " + std::to_string(bn) + ", " + std::to_string(bk) + ", 1, " + std::to_string(bn / 16) +
           ", 1, " + std::to_string(stages) + ", " + std::to_string(split) + ", " + std::to_string(raster);
  }
};

}  // namespace

std::string WgmmaFamily::description() const {
  return "quantized GEMM on Hopper wgmma (sm_90a): dequantized weights as the register A operand, activations from "
         "swizzled shared memory (swap-AB; fp8 activations widened to f16 as they are staged), cp.async pipelines";
}

std::vector<ParameterDomain> WgmmaFamily::parameter_space() const {
  return {
      {"bm", {16, 32, 64, 128}, "BLOCK_M: rows of C (tokens, the wgmma N) per thread block"},
      {"bn", {64, 128, 256}, "BLOCK_N: columns of C per thread block (64 per warpgroup, one warp per 16)"},
      {"bk", {64, 128, 256}, "BLOCK_K: depth of one pipeline stage (multiple of 64)"},
      {"stages", {2, 3, 4, 5, 6}, "STAGES: cp.async pipeline depth (stages in flight + 1)"},
      {"split", {1, 2, 3, 4, 6, 8, 16}, "SPLIT_K: K ranges per tile, reduced deterministically by the last CTA"},
      {"raster", {0, 1, 2, 3}, "RASTER: 0 = N-fastest tile order; r > 0 = M-fastest within bands of 2^r M tiles"},
      {"overlap", {0, 1}, "IN_FLIGHT: wgmma groups left running while the next stage is dequantized (1 needs stages >= 3)",
       kOverlapWhenAbsent},
      {"gscale", {0, 1}, "SCALE_AFTER: K-group scales multiply the dequantized weights (0) or each group's f32 partial sums (1; "
                         "formats with K-group scales and no zero point, overlap = 0)",
       kGroupScaleWhenAbsent},
      {"persistent", {0, 1}, "PERSISTENT (MoE, token-indexed): 1 = as many CTAs as fit the SMs walk the (row block, column tile) "
                             "units and one pipeline runs on across them (the next unit loads while this one computes and "
                             "stores); 0 = one CTA per unit",
       kPersistentWhenAbsent},
  };
}

ArchSupport WgmmaFamily::supports(const FormatSpec& format, int sm) const {
  ArchSupport support = MmaFamily::supports(format, sm);
  if (!support.supported) return support;
  const std::string prefix = format.to_string() + " is unsupported on sm_" + std::to_string(sm) + " by the wgmma family: ";
  if (sm != 90) {
    support.supported = false;
    support.reason = prefix + "wgmma exists only on sm_90 (Hopper, compiled for sm_90a)";
  } else if (auto reason = widening_refusal(format)) {
    support.supported = false;
    support.reason = prefix + *reason;
  }
  return support;
}

bool WgmmaFamily::widens_activations(const FormatSpec& format) { return format.activation_is_quantized(); }

// W8A8 fp8 at N = K = 8192 on the H200 (2026-12-03, one call): M = 1 wgmma 20.70 us, tma 18.61, mma 21.74; M = 16
// 22.13, 18.34, 21.94. W4A8 M = 1: wgmma 15.06, tma 16.13, mma 26.48; DeepSeek-V3 MoE decode 1.04-1.19x Humming.
bool WgmmaFamily::widened_preferred(const FormatSpec& format) {
  return widens_activations(format) && format.weight.bits <= 4;
}

std::optional<std::string> WgmmaFamily::widening_refusal(const FormatSpec& format) {
  if (!widens_activations(format)) return std::nullopt;
  if (format.activation != ActivationType::E4M3 && format.activation != ActivationType::E5M2) {
    return std::string("it widens fp8 activations (e4m3, e5m2) to f16; ") + to_string(format.activation) +
           " activations run on the mma and tma families";
  }
  const DeviceFormat device = mma::device_format(format);
  if (device.compute != dv::kElementE4M3 && device.compute != dv::kElementE5M2) {
    return std::string("its widened path reads weights packed as fp8 operands");
  }
  if (device.activation_scales == dv::kActivationScaleGroup) {
    return std::string("widened activations take per-token or per-tensor scales, not scales per K group");
  }
  return std::nullopt;
}

int WgmmaFamily::shared_bytes(const KernelConfig& config, const FormatSpec& format) {
  const WgmmaTiles t = WgmmaTiles::from(config);
  const DeviceFormat device = mma::device_format(format);
  // f16 slabs (widened fp8 activations land in them and are converted in place)
  const int a_stage = t.bm * t.bk * 2;
  const int w_stage = (t.bn / 16) * (t.bk / device.atom_k()) * device.atom_bytes();
  const int group = device.stage_group_k();
  const int group_rows = group > 0 ? (group < t.bk ? t.bk / group : 1) : 0;
  const int s_stage = device.staged_scales() ? group_rows * t.bn * device.scale_bytes() : 0;
  const int z_stage = device.staged_zeros() ? group_rows * t.bn * 2 : 0;
  const int stage = (a_stage + w_stage + s_stage + z_stage + 1023) / 1024 * 1024;
  return t.stages * stage + 1024;  // + the run-time alignment of the window to 1024 bytes
}

int WgmmaFamily::estimated_registers(const KernelConfig& config) {
  const WgmmaTiles t = WgmmaTiles::from(config);
  // sm_90a ptxas (CUDA 13.0), the most over w4a16-int4-ch, -int4-g128 and -uint4-g64-zp-bf16 at bn = 128:
  // [overlap][bm 16, 32, 64, 128][bk 64, 128, 256]. 128 means ptxas fit the tile in 128 (it aims for two blocks of
  // 256 threads), so the tile also fits 512 threads. A stage in flight keeps a second fragment set (4 registers per
  // k16 step); at bm = 128, bk = 256 that spills.
  static constexpr int kMeasured[2][4][3] = {
      {{56, 77, 128}, {64, 96, 151}, {110, 128, 189}, {204, 206, 255}},
      {{90, 128, 193}, {96, 128, 227}, {119, 168, 255}, {204, 235, 280}},
  };
  const int bm_index = t.bm <= 16 ? 0 : t.bm <= 32 ? 1 : t.bm <= 64 ? 2 : 3;
  const int bk_index = t.bk <= 64 ? 0 : t.bk <= 128 ? 1 : 2;
  return kMeasured[t.overlap ? 1 : 0][bm_index][bk_index];
}

int WgmmaFamily::threads(const KernelConfig& config) { return WgmmaTiles::from(config).threads(); }
std::string WgmmaFamily::tiles_template_arguments(const KernelConfig& config) { return WgmmaTiles::from(config).template_arguments(); }
int WgmmaFamily::persistent(const KernelConfig& config) { return WgmmaTiles::from(config).persistent; }
std::string WgmmaFamily::gemm_options(const KernelConfig& config) {
  const WgmmaTiles t = WgmmaTiles::from(config);
  return std::to_string(t.overlap) + ", " + std::to_string(t.gscale);
}

RuleVerdict WgmmaFamily::check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const {
  if (const RuleVerdict shared = check_config_and_shape(config, problem, limits); !shared.valid) return shared;
  const WgmmaTiles t = WgmmaTiles::from(config);
  const DeviceFormat device = mma::device_format(problem.format);
  for (const int group : {device.group_k, device.stage_group_k()}) {
    if (group > 0 && group % t.bk != 0 && t.bk % group != 0) {
      return RuleVerdict::fail("bk-divides-group", "bk=" + std::to_string(t.bk) +
                                                       " neither divides nor is a multiple of the scale group " +
                                                       std::to_string(group));
    }
  }
  if (t.overlap != 0 && t.overlap != 1) {
    return RuleVerdict::fail("overlap-range", "overlap=" + std::to_string(t.overlap) + ": expected 0 or 1");
  }
  if (t.persistent != 0 && t.persistent != 1) {
    return RuleVerdict::fail("persistent-range", "persistent=" + std::to_string(t.persistent) + ": expected 0 or 1");
  }
  if (t.gscale != 0 && t.gscale != 1) {
    return RuleVerdict::fail("gscale-range", "gscale=" + std::to_string(t.gscale) + ": expected 0 or 1");
  }
  const bool widened = widens_activations(problem.format);
  if (widened && t.bm > kWidenedMaxBm) {
    return RuleVerdict::fail("widened-bm", "bm=" + std::to_string(t.bm) + ": with fp8 activations widened to f16 a tile of more than " +
                                               std::to_string(kWidenedMaxBm) + " tokens spills (sm_90a ptxas: 255 registers and 24 "
                                               "bytes of stack at bm=128); the tma family runs those");
  }
  if (widened && device.staged_scales() && t.gscale != 1) {
    return RuleVerdict::fail("widened-groups-need-gscale", "gscale=0: " + problem.format.to_string() +
                                                               " has f32 K-group scales, which widened fp8 activations apply to "
                                                               "the groups' partial sums (gscale=1)");
  }
  if (t.gscale == 1) {
    const bool group_scales = device.scale_mode == dv::kScaleDequant || (widened && device.scale_mode == dv::kScaleAccumulator);
    if (!device.staged_scales() || !group_scales || device.has_zero()) {
      return RuleVerdict::fail("gscale-needs-groups", "gscale=1 scales K groups' partial sums: " + problem.format.to_string() +
                                                          " has no K-group scales, or has zero points");
    }
    if (t.overlap != 0) return RuleVerdict::fail("gscale-needs-overlap-0", "gscale=1 flushes after every stage's wgmmas end: overlap must be 0");
    if (t.partial_sets(device) * t.bm / 2 > 64) {
      return RuleVerdict::fail("gscale-registers", "gscale=1 keeps " + std::to_string(t.partial_sets(device)) + " partial-sum sets of " +
                                                       std::to_string(t.bm / 2) + " registers: more than 64");
    }
  }
  if (t.overlap == 1 && t.stages < 3) {
    return RuleVerdict::fail("overlap-needs-stages", "overlap=1 needs stages >= 3 (the loads run stages - 2 ahead), got stages=" +
                                                         std::to_string(t.stages));
  }
  const int64_t k_tiles = problem.k / t.bk;
  if (t.split > k_tiles) {
    return RuleVerdict::fail("split-exceeds-k", "split=" + std::to_string(t.split) + " exceeds the " + std::to_string(k_tiles) +
                                                    " K tiles of bk=" + std::to_string(t.bk));
  }
  if (const RuleVerdict resources =
          check_block_resources(shared_bytes(config, problem.format) + kSplitFlagBytes, estimated_registers(config), t.threads(), limits);
      !resources.valid) {
    return resources;
  }
  if (const RuleVerdict tiling = check_m_tiling(t.bm, t.raster, problem); !tiling.valid) return tiling;
  if (t.persistent == 1) {
    // Last, so that a MoE check (mma_moe::check), which allows it, still sees every other rule's verdict.
    return RuleVerdict::fail(std::string(kPersistentMoeOnlyRule), "persistent=1 walks MoE units (token-indexed layout); a dense wgmma "
                                                                  "GEMM runs one CTA per tile (the tma family has a persistent dense schedule)");
  }
  return RuleVerdict::ok();
}

std::string WgmmaFamily::kernel_name(const KernelConfig&, const FormatSpec&) const { return kKernelName; }

std::string WgmmaFamily::instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                              const std::string& arch) const {
  const int sm = sm_of_arch(arch);
  const ArchSupport support = supports(format, sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  if (arch != "sm_90a") QTUNE_THROW(UnsupportedError, "the wgmma family compiles for sm_90a only (wgmma is architecture-specific), not " + arch);
  const DeviceFormat device = mma::device_format(format);
  const WgmmaTiles tiles = WgmmaTiles::from(config);
  std::string source = mma::instantiation_preamble(
      "wgmma family: " + format.to_string() + " " + config.to_string() + " for " + arch, "wgmma_gemm.cuh", device, "Tiles",
      tiles.template_arguments());
  source += "static_assert(qd::WgmmaGemm<QtuneFormat, QtuneTiles, " + gemm_options(config) + ">::SHARED_BYTES == " +
            std::to_string(shared_bytes(config, format)) + ", \"host and device disagree on the shared memory size\");\n";
  source += "extern \"C\" __global__ void __launch_bounds__(QtuneTiles::THREADS, 1) " + std::string(kKernelName) +
            "(const qd::GemmParams params) {\n";
  source += "  qd::wgmma_gemm<QtuneFormat, QtuneTiles, " + gemm_options(config) + ">(params);\n";
  source += "}\n";
  return source;
}

LaunchGeometry WgmmaFamily::launch_geometry(const KernelConfig& config, const Problem& problem) const {
  const WgmmaTiles t = WgmmaTiles::from(config);
  return tile_grid(problem, t.bm, t.bn, t.split, t.threads(), shared_bytes(config, problem.format));
}

KernelConfig WgmmaFamily::default_config(const Problem& problem, const ArchLimits& limits) const {
  const ArchSupport support = supports(problem.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  // Tokens fill one wgmma N of up to 128; 128 weight columns (two warpgroups) per CTA. Split-K while the CTAs still
  // fit the GPU's resident slots (SMs x blocks per SM) and each split keeps at least 4 K tiles: a split past one
  // wave of slots only adds a second wave (M = 256: 128 tiles of 1 block per SM, split 2 was 74 us, split 1 61).
  const int64_t m = problem.m;
  const int64_t sms = std::max(1, limits.sm_count);
  // Widened fp8 activations with K-group scales scale the partial sums (gscale=1), which needs overlap 0.
  const bool scaled_sums = widens_activations(problem.format) && mma::device_format(problem.format).staged_scales();
  std::string last_failure;
  auto first_fit = [&](int bm) -> std::optional<KernelConfig> {
    for (int bn : {128, 64, 256}) {
      for (int bk : {128, 64, 256}) {
        if (problem.n % bn != 0 || problem.k % bk != 0) continue;
        const int64_t tiles = (problem.n / bn) * ceil_div(m, bm);
        for (int stages = 4; stages >= 2; --stages) {
          // A stage of wgmmas in flight pays off once the tile is compute-bound (M = 256 and 1024, not 16 or 64).
          const int overlap = m > 64 && stages >= 3 && !scaled_sums ? 1 : 0;
          KernelConfig config;
          config.family = name();
          config.params = {{"bm", bm},           {"bn", bn},
                           {"bk", bk},           {"stages", stages},
                           {"split", 1},         {"raster", 0},
                           {"overlap", overlap}, {"gscale", scaled_sums ? 1 : 0},
                           {"persistent", 0}};
          const RuleVerdict verdict = check(config, problem, limits);
          if (!verdict.valid) {
            last_failure = verdict.rule + ": " + verdict.detail;
            continue;
          }
          // K-group scales on the partial sums where the format allows it: faster at every decode size measured
          // (dense W4A16 g128 M = 1, 16, 64 and every DeepSeek-V3 MoE decode bucket on the H200, docs/perf.md 2026-12-03).
          if (m <= 64) {
            KernelConfig scaled = config;
            scaled.params["gscale"] = 1;
            if (check(scaled, problem, limits).valid) config = scaled;
          }
          const int resident = limits.resident_blocks_per_sm(WgmmaTiles::from(config).threads(), estimated_registers(config),
                                                             shared_bytes(config, problem.format) + kSplitFlagBytes);
          const int64_t slots = sms * std::max(1, resident);
          int split = 1;
          for (int candidate : {2, 4, 8}) {
            if (tiles * candidate > slots || problem.k / bk / candidate < 4) break;
            split = candidate;
          }
          config.params["split"] = split;
          return config;
        }
      }
    }
    return std::nullopt;
  };
  // A smaller token tile only where the first fits nothing (gscale=1's partial sums of fine K groups at bm >= 64).
  for (int bm = m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : 128; bm >= 16; bm /= 2) {
    if (std::optional<KernelConfig> config = first_fit(bm)) return *config;
  }
  QTUNE_THROW(UnsupportedError, "wgmma family: no configuration fits " + problem.to_string() + " (" + last_failure + ")");
}

bool WgmmaFamily::preferred_for(const Problem& problem, int) const {
  // W4A8 (fp8 activations widened, 4-bit weights) at every M (the tma family, listed before, takes over from its own
  // start): at M = 1 it ran 15.06 us against mma's 26.48 and tma's 16.13 (H200, 2026-12-03, one call). 8-bit weights
  // on fp8 activations are not measured on this path.
  if (widens_activations(problem.format)) return widened_preferred(problem.format);
  return problem.m >= kPreferredFromM;
}

ParameterRanges WgmmaFamily::curated_ranges(int64_t m) const {
  // 33..64 tokens also try 32-token tiles: fp4 weights with 32-K groups on fp8 fit the registers only there.
  const std::vector<int> bm = m <= 16 ? std::vector<int>{16} : m <= 32 ? std::vector<int>{32} : m <= 64 ? std::vector<int>{32, 64}
                                                                                                       : std::vector<int>{64, 128};
  return {{"bm", bm},
          {"bn", {64, 128, 256}},
          {"bk", {64, 128, 256}},
          // With a stage in flight the loads run stages - 2 ahead: 4 and 5 won at M = 256..4096, 3 never did.
          {"stages", m <= 64 ? std::vector<int>{3, 4} : std::vector<int>{4, 5}},
          {"split", m <= 64 ? std::vector<int>{1, 2, 4} : m <= 256 ? std::vector<int>{1, 2} : std::vector<int>{1}},
          {"raster", m <= 128 ? std::vector<int>{0} : std::vector<int>{0, 2}},
          // A stage of wgmmas in flight won at M = 256 and 1024 and lost at 16 and 64 (docs/perf.md, 2026-11-30).
          {"overlap", {m <= 64 ? 0 : 1}},
          // Group scales on the partial sums while the tile is bound by the dequantization's issue rate (decode);
          // formats without K-group scales keep 0 (the rule removes 1).
          {"gscale", m <= 64 ? std::vector<int>{0, 1} : std::vector<int>{0}},
          {"persistent", {0}}};
}

const WgmmaFamily& wgmma_family() {
  static const WgmmaFamily family;
  return family;
}

}  // namespace qtune

#include "kernels/families/mma_family.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/codec.hpp"
#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/families/mma_layout.hpp"

namespace qtune {

namespace dv = qtune::device;
using mma::DeviceFormat;
using mma::TileShape;

namespace {

constexpr const char* kKernelName = "qtune_mma_gemm";

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Configs recorded before "gscale" existed scaled the dequantized weights.
constexpr int kGroupScaleWhenAbsent = 0;

bool contains(const std::vector<int>& values, int value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

std::string arch_name(int sm) { return "sm_" + std::to_string(sm); }

}  // namespace

std::string MmaFamily::description() const {
  return "quantized GEMM on mma.sync tensor cores (f16/bf16, int8, fp8, int4) with cp.async pipelines and register "
         "dequantization (sm_80+; sm_75: f16, int8 and int4 with stages copied through registers)";
}

std::vector<ParameterDomain> MmaFamily::parameter_space() const {
  return {
      {"bm", {16, 32, 64, 128, 256}, "BLOCK_M: rows of C per thread block"},
      {"bn", {16, 32, 64, 128, 256}, "BLOCK_N: columns of C per thread block"},
      {"bk", {64, 128, 256, 512}, "BLOCK_K: depth of one pipeline stage (multiple of the 4-k-step weight atom: 64 for "
                                  "f16/bf16, 128 for int8/fp8, 256 for int4 activations)"},
      {"wm", {1, 2, 4}, "WARPS_M: warps along M (each owns BLOCK_M / WARPS_M rows)"},
      {"wn", {1, 2, 4, 8}, "WARPS_N: warps along N (each owns BLOCK_N / WARPS_N columns)"},
      {"wk", {1, 2, 4}, "WARPS_K: warps splitting each K tile, reduced in shared memory in warp order"},
      {"stages", {2, 3, 4, 5, 6}, "STAGES: cp.async pipeline depth (stages in flight + 1)"},
      {"split", {1, 2, 3, 4, 6, 8, 16}, "SPLIT_K: K ranges per tile, reduced deterministically by the last CTA"},
      {"raster", {0, 1, 2, 3}, "RASTER: 0 = N-fastest tile order; r > 0 = M-fastest within bands of 2^r M tiles"},
      {"gscale", {0, 1}, "SCALE_AFTER: K-group scales multiply the dequantized weights (0) or each group's f32 partial sums (1; "
                         "f16/bf16 activations with K-group scales and no zero point)",
       kGroupScaleWhenAbsent},
  };
}

ArchSupport MmaFamily::supports(const FormatSpec& format, int sm) const {
  ArchSupport support{sm, false, ""};
  const std::string prefix = format.to_string() + " is unsupported on " + arch_name(sm) + ": ";
  if (sm < 75) {
    support.reason = prefix + "the mma family needs sm_75 or later (mma.sync tensor cores)";
    return support;
  }
  const ArchSupport format_support = architecture_support(format, sm);
  if (!format_support.supported) {
    support.reason = prefix + format_support.reason;
    return support;
  }
  // Turing runs f16 (m16n8k8), int8 (m8n8k16) and int4 (m8n8k32) MMAs; bf16 conversions are sm_80's.
  if (sm < 80 && format.output == OutputType::BF16) {
    support.reason = prefix + "bf16 output needs sm_80 or later";
    return support;
  }
  if (auto reason = mma::unsupported_format_reason(format)) {
    support.reason = prefix + *reason;
    return support;
  }
  support.supported = true;
  return support;
}

int MmaFamily::estimated_registers(const KernelConfig& config, const FormatSpec& format) {
  const TileShape tiles = TileShape::from(config);
  const DeviceFormat device = mma::device_format(format);
  const int mt = tiles.warp_tile_m() / 16, nt = tiles.warp_tile_n() / 8, spw = tiles.warp_tile_n() / 16;
  const int accumulators = mt * nt * 4 * (device.flush_k() > 0 || tiles.gscale == 1 ? 2 : 1);
  // The scheduler keeps the next k-step's fragments and the next atom's words in flight: count them twice.
  const int fragments = 2 * (mt * 4 + 4);
  const int words = 2 * spw * device.thread_words();
  // Per (strip, n8 tile): a scale pair (unless gscale=1 scales the partial sums), and for zero points the raw pair plus
  // up to two derived terms.
  const int per_tile = (device.scale_mode == dv::kScaleDequant && tiles.gscale == 0 ? 1 : 0) + (device.has_zero() ? 3 : 0);
  // A flush holds two f32 column scales per n8 tile and two row scales per m16 tile (gscale=1: four per strip).
  const int flush_scales = device.flush_k() > 0 ? 2 * nt + 2 * mt : tiles.gscale == 1 ? 4 : 0;
  const int vectors = spw * 2 * per_tile + flush_scales;
  constexpr int addressing = 56;  // pointers, indices, loop state, temporaries (calibrated on ptxas reports)
  return accumulators + fragments + words + vectors + addressing;
}

RuleVerdict MmaFamily::check_config_and_shape(const KernelConfig& config, const Problem& problem,
                                              const ArchLimits& limits) const {
  if (config.family != name()) {
    return RuleVerdict::fail("family", "config is for family '" + config.family + "', not '" + name() + "'");
  }
  const std::vector<ParameterDomain> space = parameter_space();
  for (const ParameterDomain& domain : space) {
    auto found = config.params.find(domain.name);
    if (found == config.params.end() && domain.absent_means) continue;
    if (found == config.params.end()) return RuleVerdict::fail("parameter-missing", "no value for '" + domain.name + "'");
    if (!contains(domain.values, found->second)) {
      return RuleVerdict::fail("parameter-domain", domain.name + "=" + std::to_string(found->second) +
                                                       " is not one of the family's values");
    }
  }
  for (const auto& [parameter, value] : config.params) {
    // A named capture: clang before 16 cannot capture a structured binding.
    const bool known = std::any_of(space.begin(), space.end(), [&wanted = parameter](const ParameterDomain& d) { return d.name == wanted; });
    if (!known) return RuleVerdict::fail("parameter-unknown", "the " + name() + " family has no parameter '" + parameter + "'");
  }
  const ArchSupport support = supports(problem.format, limits.sm);
  if (!support.supported) return RuleVerdict::fail("format-unsupported-on-arch", support.reason);
  if (problem.m < 1 || problem.n < 1 || problem.k < 1) {
    return RuleVerdict::fail("problem-shape", "m, n and k must be positive: " + problem.to_string());
  }
  try {
    problem.format.validate_shape(problem.n, problem.k);
  } catch (const InputError& error) {
    return RuleVerdict::fail("format-shape", error.what());
  }
  const int atom_k = mma::device_format(problem.format).atom_k();
  const int bn = config.get("bn"), bk = config.get("bk");  // every family on this layout tiles N and K
  if (problem.n % bn != 0) {
    return RuleVerdict::fail("bn-divides-n", "N=" + std::to_string(problem.n) + " is not a multiple of bn=" + std::to_string(bn));
  }
  if (problem.k % bk != 0) {
    return RuleVerdict::fail("bk-divides-k", "K=" + std::to_string(problem.k) + " is not a multiple of bk=" + std::to_string(bk));
  }
  if (bk % atom_k != 0) {
    return RuleVerdict::fail("bk-atom", "bk=" + std::to_string(bk) + " is not a multiple of the weight atom depth " +
                                            std::to_string(atom_k));
  }
  return RuleVerdict::ok();
}

RuleVerdict MmaFamily::check_m_tiling(int bm, int raster, const Problem& problem) {
  const int64_t m_padded = ceil_div(problem.m, 16) * 16;
  if (bm > 16 && bm >= 2 * m_padded) {
    return RuleVerdict::fail("bm-over-m", "bm=" + std::to_string(bm) + " is at least twice M=" + std::to_string(problem.m) +
                                              " rounded to 16: the same work as a smaller tile, slower");
  }
  if (raster > 0 && ceil_div(problem.m, bm) <= 1) {
    return RuleVerdict::fail("raster-single-m-tile", "raster=" + std::to_string(raster) +
                                                         " reorders M tiles but there is only one: same as raster=0");
  }
  return RuleVerdict::ok();
}

RuleVerdict MmaFamily::check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const {
  if (const RuleVerdict shared = check_config_and_shape(config, problem, limits); !shared.valid) return shared;
  const TileShape t = TileShape::from(config);
  const DeviceFormat device = mma::device_format(problem.format);
  const int atom_k = device.atom_k();
  if (t.bm % (16 * t.wm) != 0) {
    return RuleVerdict::fail("warps-m", "bm=" + std::to_string(t.bm) + " is not a multiple of 16 * wm=" + std::to_string(t.wm));
  }
  if (t.bn % (16 * t.wn) != 0) {
    return RuleVerdict::fail("warps-n", "bn=" + std::to_string(t.bn) + " is not a multiple of 16 * wn=" + std::to_string(t.wn));
  }
  if ((t.bk / atom_k) % t.wk != 0) {
    return RuleVerdict::fail("warps-k", "bk / " + std::to_string(atom_k) + " = " + std::to_string(t.bk / atom_k) +
                                            " weight atoms cannot be shared by wk=" + std::to_string(t.wk) + " warps");
  }
  if (t.gscale != 0 && t.gscale != 1) {
    return RuleVerdict::fail("gscale-range", "gscale=" + std::to_string(t.gscale) + ": expected 0 or 1");
  }
  if (t.gscale == 1 && (!device.staged_scales() || device.scale_mode != dv::kScaleDequant || device.has_zero())) {
    return RuleVerdict::fail("gscale-needs-groups", "gscale=1 scales K groups' partial sums: " + problem.format.to_string() +
                                                        " has no K-group weight scales in the dequantization (f16/bf16 "
                                                        "activations), or has zero points");
  }
  for (const int group : {device.group_k, device.stage_group_k(), device.flush_k()}) {
    if (group > 0 && group % t.bk != 0 && t.bk % group != 0) {
      return RuleVerdict::fail("bk-divides-group", "bk=" + std::to_string(t.bk) +
                                                       " neither divides nor is a multiple of the scale group " +
                                                       std::to_string(group));
    }
  }
  // s32 partial sums of |a| <= 128 times |b| <= 128 stay exact up to 2^31 / 2^14 = 131072 products.
  if (device.integer_mma() && problem.k > 131072) {
    return RuleVerdict::fail("int32-accumulator-range", "K=" + std::to_string(problem.k) +
                                                            " could overflow the s32 partial sums of the integer MMA (at most 131072)");
  }
  const int64_t k_tiles = problem.k / t.bk;
  if (t.split > k_tiles) {
    return RuleVerdict::fail("split-exceeds-k", "split=" + std::to_string(t.split) + " exceeds the " + std::to_string(k_tiles) +
                                                    " K tiles of bk=" + std::to_string(t.bk));
  }
  if (t.threads() > limits.max_threads_per_block) {
    return RuleVerdict::fail("threads-per-block", std::to_string(t.threads()) + " threads exceed the limit of " +
                                                      std::to_string(limits.max_threads_per_block));
  }
  // Flushed formats and gscale=1 keep f32 partial sums next to the accumulators.
  const int accumulators = (t.warp_tile_m() / 16) * (t.warp_tile_n() / 8) * 4 * (device.flush_k() > 0 || t.gscale == 1 ? 2 : 1);
  if (accumulators > 128) {
    return RuleVerdict::fail("accumulators-per-thread", "warp tile " + std::to_string(t.warp_tile_m()) + "x" +
                                                            std::to_string(t.warp_tile_n()) + " needs " +
                                                            std::to_string(accumulators) +
                                                            " accumulators per thread, partial sums included (max 128)");
  }
  const mma::SharedLayout shared = mma::shared_layout(device, t);
  if (const RuleVerdict resources = check_block_resources(shared.dynamic_bytes + shared.static_bytes,
                                                          estimated_registers(config, problem.format), t.threads(), limits);
      !resources.valid) {
    return resources;
  }
  return check_m_tiling(t.bm, t.raster, problem);
}

RuleVerdict MmaFamily::check_block_resources(int shared_bytes, int registers, int threads, const ArchLimits& limits) {
  if (shared_bytes > limits.max_shared_per_block) {
    return RuleVerdict::fail("smem-per-block", std::to_string(shared_bytes) + " bytes of shared memory exceed the " +
                                                   std::to_string(limits.max_shared_per_block) + " a block may use on " +
                                                   arch_name(limits.sm));
  }
  const int register_cap = std::min(limits.max_registers_per_thread, limits.registers_per_sm / threads);
  if (registers > register_cap) {
    return RuleVerdict::fail("registers-per-thread", "about " + std::to_string(registers) + " registers per thread needed, " +
                                                         std::to_string(register_cap) + " available at " +
                                                         std::to_string(threads) + " threads: it would spill");
  }
  return RuleVerdict::ok();
}

std::string MmaFamily::kernel_name(const KernelConfig&, const FormatSpec&) const { return kKernelName; }

std::string MmaFamily::instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                            const std::string& arch) const {
  const int sm = sm_of_arch(arch);
  const ArchSupport support = supports(format, sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  const DeviceFormat device = mma::device_format(format);
  const TileShape tiles = TileShape::from(config);
  const mma::SharedLayout shared = mma::shared_layout(device, tiles);
  std::string source = mma::instantiation_preamble(
      "mma family: " + format.to_string() + " " + config.to_string() + " for " + arch, "mma_gemm.cuh", device, "Tiles",
      tiles.template_arguments());
  source += "static_assert(qd::MmaGemm<QtuneFormat, QtuneTiles" + tiles.scale_after_argument() +
            ">::SHARED_BYTES == " + std::to_string(shared.dynamic_bytes) +
            ", \"host and device disagree on the shared memory size\");\n";
  source += "static_assert(QtuneFormat::ATOM_BYTES == " + std::to_string(device.atom_bytes()) +
            ", \"host and device disagree on the weight atom size\");\n";
  source += "extern \"C\" __global__ void __launch_bounds__(QtuneTiles::THREADS, 1) " + std::string(kKernelName) +
            "(const qd::GemmParams params) {\n";
  source += "  qd::mma_gemm<QtuneFormat, QtuneTiles" + tiles.scale_after_argument() + ">(params);\n";
  source += "}\n";
  return source;
}

LaunchGeometry MmaFamily::launch_geometry(const KernelConfig& config, const Problem& problem) const {
  const TileShape t = TileShape::from(config);
  return tile_grid(problem, t.bm, t.bn, t.split, t.threads(), mma::shared_layout(mma::device_format(problem.format), t).dynamic_bytes);
}

LaunchGeometry MmaFamily::tile_grid(const Problem& problem, int bm, int bn, int split, int threads, int dynamic_shared_bytes) {
  const int64_t tiles = (problem.n / bn) * ceil_div(problem.m, bm);
  LaunchGeometry geometry;
  geometry.grid = {static_cast<uint32_t>(tiles * split), 1, 1};
  geometry.block = {static_cast<uint32_t>(threads), 1, 1};
  geometry.dynamic_shared_bytes = static_cast<uint32_t>(dynamic_shared_bytes);
  if (split > 1) {
    geometry.workspace_bytes = static_cast<uint64_t>(split) * tiles * bm * bn * 4 + static_cast<uint64_t>(tiles) * 4;
    geometry.workspace_starts_zeroed = true;
  }
  return geometry;
}

std::vector<BufferSpec> MmaFamily::buffers(const KernelConfig& config, const Problem& problem) const {
  const DeviceFormat device = mma::device_format(problem.format);
  const uint64_t m = static_cast<uint64_t>(problem.m), n = static_cast<uint64_t>(problem.n);
  std::vector<BufferSpec> list;
  list.push_back({"a", mma::packed_activation_bytes(device, problem.m, problem.k), BufferRole::Activations,
                  "activations [m][k], row-major, " + to_string(problem.format.activation) +
                      (device.act_bits() == 4 ? " (two per byte, lower k in the low nibble)" : "")});
  if (const uint64_t bytes = mma::packed_activation_scale_bytes(device, problem.m, problem.k); bytes > 0) {
    list.push_back({"a_scales", bytes, BufferRole::Activations,
                    device.activation_scales == dv::kActivationScaleToken ? "f32 activation scale per row [m]"
                                                                          : "f32 activation scales per (K group, row) [k/G][m]"});
  }
  list.push_back({"weights", mma::packed_weight_bytes(device, problem.n, problem.k), BufferRole::Weights,
                  "prepacked weight codes (16 x atom_k atoms, strip-major)"});
  const char* scale_description = device.scale_mode == dv::kScaleEpilogue     ? "f32 scale per output channel"
                                  : device.scale_mode == dv::kScaleAccumulator ? "f32 scales per (K group, channel) [k/G][n]"
                                                                                : "compute-type scales per (K group, channel), strip-permuted";
  list.push_back({"scales", mma::packed_vector_bytes(device, problem.n, problem.k), BufferRole::Weights, scale_description});
  if (device.has_zero()) {
    list.push_back({"zeros", mma::packed_zero_bytes(device, problem.n, problem.k), BufferRole::Weights,
                    "compute-type zero points per (K group, channel), strip-permuted"});
  }
  list.push_back({"global_scale", 4, BufferRole::Weights, "one f32 multiplied into every output"});
  if (problem.has_bias) list.push_back({"bias", n * 2, BufferRole::Bias, "bias [n] in the output type"});
  list.push_back({"c", m * n * 2, BufferRole::Output, "output [m][n], row-major, " + to_string(problem.format.output)});
  const LaunchGeometry geometry = launch_geometry(config, problem);
  if (geometry.workspace_bytes > 0) {
    list.push_back({"workspace", geometry.workspace_bytes, BufferRole::Workspace,
                    "split-K f32 partial tiles then one counter per tile; zero before the first launch"});
  }
  return list;
}

KernelArguments MmaFamily::pack_arguments(const KernelConfig& config, const Problem& problem,
                                          const std::map<std::string, uint64_t>& device_addresses) const {
  dv::GemmParams params{};
  auto address = [&](const std::string& buffer_name, bool required) -> unsigned long long {
    return mma::buffer_address(device_addresses, buffer_name, required);
  };
  const DeviceFormat device = mma::device_format(problem.format);
  const LaunchGeometry geometry = launch_geometry(config, problem);
  params.a = address("a", true);
  params.a_scales = address("a_scales", device.activation_scales != dv::kActivationScaleNone);
  params.weights = address("weights", true);
  params.scales = address("scales", true);
  params.zeros = address("zeros", device.has_zero());
  params.bias = address("bias", problem.has_bias);
  params.global_scale = address("global_scale", true);
  params.c = address("c", true);
  params.workspace = address("workspace", geometry.workspace_bytes > 0);
  params.m = static_cast<int>(problem.m);
  params.n = static_cast<int>(problem.n);
  params.k = static_cast<int>(problem.k);
  return KernelArguments::single(params);
}

PackedBuffers MmaFamily::prepack_weights(const QuantizedWeights& weights, const KernelConfig&) const {
  return mma::prepack_weights(weights, mma::device_format(weights.format));
}

QuantizedWeights MmaFamily::unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n, int64_t k,
                                           const KernelConfig&) const {
  return mma::unpack_weights(packed, format, mma::device_format(format), n, k);
}

PackedBuffers MmaFamily::prepack_activations(const QuantizedActivations& activations, const KernelConfig&) const {
  return mma::prepack_activations(activations, mma::device_format(activations.format));
}

std::vector<uint8_t> MmaFamily::pack_bias(std::span<const float> bias, const FormatSpec& format) const {
  return output_type_bytes(bias, format.output);
}

ParameterRanges MmaFamily::curated_ranges(int64_t m) const {
  // Group scales on the partial sums while the tile is bound by the dequantization's issue rate (decode, as in the
  // wgmma family); formats without K-group scales, or with zero points, keep 0 (the rule removes 1).
  const std::vector<int> decode_gscale = {0, 1};
  if (m <= 16) {
    return {{"bm", {16}}, {"bn", {64, 128, 256}}, {"bk", {128, 256, 512}}, {"wm", {1}}, {"wn", {4, 8}},
            {"wk", {1, 2}}, {"stages", {3, 4, 5}}, {"split", {1, 2, 4, 8}}, {"raster", {0}}, {"gscale", decode_gscale}};
  }
  if (m <= 32) {
    return {{"bm", {32}}, {"bn", {64, 128, 256}}, {"bk", {128, 256}}, {"wm", {1, 2}}, {"wn", {2, 4}},
            {"wk", {1, 2}}, {"stages", {3, 4}}, {"split", {1, 2, 4}}, {"raster", {0}}, {"gscale", decode_gscale}};
  }
  if (m <= 64) {
    return {{"bm", {64}}, {"bn", {64, 128, 256}}, {"bk", {64, 128, 256}}, {"wm", {1, 2, 4}}, {"wn", {2, 4}},
            {"wk", {1}}, {"stages", {3, 4}}, {"split", {1, 2, 4}}, {"raster", {0}}, {"gscale", decode_gscale}};
  }
  if (m <= 256) {
    return {{"bm", {64, 128}}, {"bn", {64, 128, 256}}, {"bk", {64, 128}}, {"wm", {2, 4}}, {"wn", {2, 4}},
            {"wk", {1}}, {"stages", {3, 4}}, {"split", {1, 2}}, {"raster", {0, 2}}, {"gscale", {0}}};
  }
  return {{"bm", {128, 256}}, {"bn", {128, 256}}, {"bk", {64, 128}}, {"wm", {2, 4}}, {"wn", {2, 4}},
          {"wk", {1}}, {"stages", {3, 4}}, {"split", {1}}, {"raster", {0, 2, 3}}, {"gscale", {0}}};
}

KernelConfig MmaFamily::default_config(const Problem& problem, const ArchLimits& limits) const {
  const ArchSupport support = supports(problem.format, limits.sm);
  if (!support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  const DeviceFormat device = mma::device_format(problem.format);
  auto make = [&](int bm, int bn, int bk, int wm, int wn, int wk, int stages, int split) {
    KernelConfig config;
    config.family = name();
    // gscale named (0): the heuristic's config is then the enumerated one of the same kernel, not a twin timed again.
    config.params = {{"bm", bm}, {"bn", bn}, {"bk", bk}, {"wm", wm}, {"wn", wn}, {"wk", wk},
                     {"stages", stages}, {"split", split}, {"raster", 0}, {"gscale", 0}};
    return config;
  };
  // Hand rules, written from H200 tunes of Llama-3-70B and DeepSeek-V3 shapes at W4A16 and W8A8 fp8 (docs/perf.md),
  // kept general through the SM count, the weight width and the family's own check():
  //   - M <= 64: the weights stream from memory. One m16..m64 tile row; 4-bit weights take 128-column tiles and
  //     128-deep K tiles, 8-bit weights 64-column tiles and 256-deep ones when K has 4 of them (the same bytes per
  //     stage, twice the CTAs).
  //     Split-K raises the CTA count to about 1.5 per SM, and to 2 ways at least once K >= 4096 (more loads in
  //     flight), but never leaves a CTA fewer than 4 K tiles (the pipeline would not fill). Shapes with very few
  //     tiles add a second warp per K tile (WARPS_K 2).
  //   - 64 < M <= 256, 8-bit weights: 64x64 tiles with 2x2 warps, split to half a wave of CTAs and 2 ways once
  //     K >= 4096.
  //   - 64 < M <= 128, 4-bit weights: 64x256 tiles with 2x4 warps split 2 ways when that makes 0.75..1 wave, else
  //     64x128 with 2x2 warps, split while there are fewer than two CTAs per SM.
  //   - 128 < M <= 256, 4-bit weights: 128x128 tiles with 2x4 warps when they make 0.8..1 wave, else 64x128 with
  //     2x2 warps split to one wave.
  //   - M > 256: 128x128 tiles with 2x4 warps, or 64x128 with 2x2 when that fills the last wave clearly better;
  //     split-K only when the tiles do not fill half a wave.
  // Shapes are tried best-first; the first whose config passes check() wins, with stages lowered if needed.
  const int64_t m = problem.m;
  const int64_t sms = std::max(1, limits.sm_count);
  const bool wide_weights = device.weight_bits >= 8;
  auto wave_efficiency = [&](int64_t tiles) {
    return static_cast<double>(tiles) / static_cast<double>(ceil_div(tiles, sms) * sms);
  };
  // How a shape picks its K split (choose_split): the CTA count it aims for, 2 ways at least for streaming shapes
  // once K >= 4096, never fewer than 4 K tiles per CTA; a shape's own `split` overrides the rule.
  enum class SplitRule { Streaming, HalfWave, TwoPerSm, OneWave, FillWave };
  struct Shape {
    int bm, bn, bk, wm, wn, wk, stages;
    SplitRule rule;
    int split = 0;  // > 0: this split, when K allows it
  };
  const int row_tile = m <= 16 ? 16 : m <= 32 ? 32 : 64;
  const int stream_bn = wide_weights ? 64 : 128;
  const int stream_bk = wide_weights && problem.k >= 4 * 256 ? 256 : 128;  // short K keeps 4 K tiles
  std::vector<Shape> shapes;
  if (m <= 64) {
    const int64_t stream_tiles = problem.n % stream_bn == 0 ? problem.n / stream_bn : problem.n / 64;
    const int wk = stream_tiles * 8 < sms ? 2 : 1;  // very few tiles: two warps share each K tile
    const int wm = m <= 32 || !wide_weights ? 1 : 2;
    const int wn = wm == 2 ? 2 : 4;
    const int stages = wide_weights ? 3 : 4;  // 256-deep stages are twice the bytes: 3 keep three CTAs per SM
    shapes = {{row_tile, stream_bn, stream_bk, wm, wn, wk, stages, SplitRule::Streaming},
              {row_tile, 64, stream_bk, wm, wn, wk, stages, SplitRule::Streaming},
              {row_tile, 64, 128, 1, 2, 1, 4, SplitRule::Streaming},
              {row_tile, 32, 128, 1, 2, 1, 4, SplitRule::Streaming}};
  } else if (m <= 256 && wide_weights) {
    shapes = {{64, 64, 128, 2, 2, 1, 3, SplitRule::HalfWave}, {64, 32, 128, 2, 2, 1, 3, SplitRule::HalfWave}};
  } else if (m <= 128) {
    const int64_t row_tiles = ceil_div(m, 64);
    const int64_t wide_ctas = problem.n % 256 == 0 ? 2 * (problem.n / 256) * row_tiles : 0;
    if (4 * wide_ctas >= 3 * sms && wide_ctas <= sms) shapes.push_back({64, 256, 128, 2, 4, 1, 4, SplitRule::TwoPerSm, 2});
    shapes.push_back({64, 128, 128, 2, 2, 1, 3, SplitRule::TwoPerSm});
    shapes.push_back({128, 128, 128, 2, 4, 1, 3, SplitRule::FillWave});
    shapes.push_back({64, 64, 64, 2, 2, 1, 3, SplitRule::TwoPerSm});
    shapes.push_back({64, 32, 64, 2, 2, 1, 3, SplitRule::TwoPerSm});
  } else if (m <= 256) {
    const int64_t large_tiles = problem.n % 128 == 0 ? (problem.n / 128) * ceil_div(m, 128) : 0;
    if (10 * large_tiles >= 8 * sms && large_tiles <= sms) shapes.push_back({128, 128, 128, 2, 4, 1, 3, SplitRule::FillWave, 1});
    shapes.push_back({64, 128, 128, 2, 2, 1, 3, SplitRule::OneWave});
    shapes.push_back({64, 64, 64, 2, 2, 1, 3, SplitRule::OneWave});
    shapes.push_back({64, 32, 64, 2, 2, 1, 3, SplitRule::OneWave});
  } else {
    const Shape large{128, 128, 128, 2, 4, 1, 3, SplitRule::FillWave};
    const Shape medium{64, 128, 128, 2, 2, 1, 3, SplitRule::FillWave};
    const bool n_fits = problem.n % 128 == 0;
    const bool medium_fills_better =
        n_fits && wave_efficiency((problem.n / 128) * ceil_div(m, 64)) > wave_efficiency((problem.n / 128) * ceil_div(m, 128)) + 0.1;
    shapes = medium_fills_better ? std::vector<Shape>{medium, large} : std::vector<Shape>{large, medium};
    shapes.push_back({64, 64, 64, 2, 2, 1, 3, SplitRule::FillWave});
    shapes.push_back({64, 32, 64, 2, 2, 1, 3, SplitRule::FillWave});
  }
  auto choose_split = [&](const Shape& shape, int64_t tiles, int64_t k_tiles) {
    const auto fits = [&](int split) { return k_tiles / split >= 4; };
    if (shape.split > 0) return fits(shape.split) ? shape.split : 1;
    if (shape.rule == SplitRule::FillWave) {
      if (2 * tiles >= sms) return 1;  // half a wave of big tiles already: a K split only adds traffic
      int split = 1;
      for (int candidate : {2, 4}) {
        if (!fits(candidate)) break;
        split = candidate;
        if (tiles * candidate >= sms) break;
      }
      return split;
    }
    const int64_t min_ctas = shape.rule == SplitRule::Streaming  ? 3 * sms / 2
                             : shape.rule == SplitRule::HalfWave ? sms / 2
                             : shape.rule == SplitRule::TwoPerSm ? 2 * sms
                                                                 : sms;
    const bool long_k = problem.k >= 4096 && (shape.rule == SplitRule::Streaming || shape.rule == SplitRule::HalfWave);
    int split = 1;
    for (int candidate : {2, 4, 8}) {
      if (tiles * split >= min_ctas && (split >= 2 || !long_k)) break;
      if (!fits(candidate)) break;
      split = candidate;
    }
    return split;
  };
  std::string last_failure;
  for (const Shape& shape : shapes) {
    // 8-bit and 4-bit operands have deeper atoms; two warps per K tile need two atoms.
    const int bk = std::max(shape.bk, device.atom_k() * shape.wk);
    if (problem.n % shape.bn != 0 || problem.k % bk != 0 || bk % device.atom_k() != 0) continue;
    const int64_t tiles = (problem.n / shape.bn) * ceil_div(m, shape.bm);
    const int split = choose_split(shape, tiles, problem.k / bk);
    for (int stages = shape.stages; stages >= 2; --stages) {
      KernelConfig config = make(shape.bm, shape.bn, bk, shape.wm, shape.wn, shape.wk, stages, split);
      const RuleVerdict verdict = check(config, problem, limits);
      if (verdict.valid) {
        // K-group scales on the partial sums at decode (M <= 8, the swap-AB tiles), where the format allows it: the
        // default W4A16 g128 tile at N = K = 8192, M = 1 ran 14.75 us against 16.73 without on the H200 (docs/perf.md,
        // 2026-12-03, fifteenth session).
        if (m <= 8) {
          KernelConfig scaled = config;
          scaled.params["gscale"] = 1;
          if (check(scaled, problem, limits).valid) config = scaled;
        }
        return config;
      }
      last_failure = verdict.rule + ": " + verdict.detail;
    }
  }
  // Small odd shapes: the smallest tile that divides everything.
  for (int bk : {64, 128, 256, 512}) {
    const KernelConfig config = make(16, 16, bk, 1, 1, 1, 2, 1);
    const RuleVerdict verdict = check(config, problem, limits);
    if (verdict.valid) return config;
    last_failure = verdict.rule + ": " + verdict.detail;
  }
  QTUNE_THROW(UnsupportedError, "mma family: no configuration fits " + problem.to_string() + " (" + last_failure + ")");
}

const MmaFamily& mma_family() {
  static const MmaFamily family;
  return family;
}

}  // namespace qtune

#include "kernels/families/block_scaled_family.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/codec.hpp"
#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/families/mma_layout.hpp"

namespace qtune {

namespace dv = qtune::device;

namespace block_scaled {

namespace {

constexpr int kStepK = 64;  // K of one m16n8k64 MMA

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t padded_row_tiles(int64_t m) {
  return ceil_div(m, dv::kBlockScaledRowPadding) * (dv::kBlockScaledRowPadding / 16);
}


void put_f32(PackedBuffers& packed, const std::string& name, float value) {
  std::vector<uint8_t> bytes(4);
  std::memcpy(bytes.data(), &value, 4);
  packed[name] = std::move(bytes);
}

// Where element (row or column within its tile, k within its K step of 64) of a fragment block sits: the lane, the byte
// within the lane's bytes, and for 4-bit elements the nibble (0: low) of that byte.
struct Slot {
  int lane, byte, nibble;
};
Slot activation_slot(const Variant& variant, int row, int k) {
  const int g = row % 8, upper_rows = row / 8;
  if (variant.activation_bits == 4) {  // m16n8k64: register upper_rows + 2 (k / 32), nibble k % 8, lane t = k % 32 / 8
    const int reg = upper_rows + 2 * (k / 32), nibble = k % 8;
    return {4 * g + (k % 32) / 8, reg * 4 + nibble / 2, nibble % 2};
  }
  // Two m16n8k32 per step, 16 bytes each: register upper_rows + 2 (kk / 16), byte kk % 4, lane t = kk % 16 / 4.
  const int half = k / 32, kk = k % 32, reg = upper_rows + 2 * (kk / 16);
  return {4 * g + (kk % 16) / 4, half * 16 + reg * 4 + kk % 4, 0};
}
Slot weight_slot(const Variant& variant, int column, int k) {
  if (variant.kind == dv::kBlockScaledMxf4Nvf4) {  // m16n8k64: register k / 32, nibble k % 8, lane t = k % 32 / 8
    const int nibble = k % 8;
    return {4 * column + (k % 32) / 8, (k / 32) * 4 + nibble / 2, nibble % 2};
  }
  const int half = k / 32, kk = k % 32;
  if (variant.weight_bits == 4) {
    // Word `half` holds that k32's 8 codes of the lane: codes 0..3 for register 0 (k 4t..), 4..7 for register 1 (16 + 4t..).
    const int code = 4 * (kk / 16) + kk % 4;
    return {4 * column + (kk % 16) / 4, half * 4 + code / 2, code % 2};
  }
  const int reg = 2 * half + kk / 16;
  return {4 * column + (kk % 16) / 4, reg * 4 + kk % 4, 0};
}

void put_element(std::vector<uint8_t>& bytes, uint64_t lane_base, const Slot& slot, int bits, uint8_t code) {
  uint8_t& byte = bytes[lane_base + static_cast<uint64_t>(slot.byte)];
  if (bits == 4) {
    byte = static_cast<uint8_t>(byte | ((code & 0xF) << (4 * slot.nibble)));
  } else {
    byte = code;
  }
}
uint8_t get_element(const std::vector<uint8_t>& bytes, uint64_t lane_base, const Slot& slot, int bits) {
  const uint8_t byte = bytes[lane_base + static_cast<uint64_t>(slot.byte)];
  return bits == 4 ? static_cast<uint8_t>((byte >> (4 * slot.nibble)) & 0xF) : byte;
}

int element_code(ActivationType type) {
  switch (type) {
    case ActivationType::E2M1: return dv::kElementE2M1;
    case ActivationType::E4M3: return dv::kElementE4M3;
    case ActivationType::E5M2: return dv::kElementE5M2;
    default: return -1;
  }
}
int element_code(const ElementType& type) {
  if (type.kind != ElementKind::Float) return -1;
  if (type.bits == 4 && type.exponent_bits == 2 && type.mantissa_bits == 1) return dv::kElementE2M1;
  if (type.bits == 8 && type.exponent_bits == 4 && type.mantissa_bits == 3) return dv::kElementE4M3;
  if (type.bits == 8 && type.exponent_bits == 5 && type.mantissa_bits == 2) return dv::kElementE5M2;
  return -1;
}

}  // namespace

std::optional<Variant> variant_of(const FormatSpec& format, std::string* reason) {
  auto refuse = [&](const std::string& why) -> std::optional<Variant> {
    if (reason != nullptr) *reason = why;
    return std::nullopt;
  };
  Variant variant;
  variant.activation_element = element_code(format.activation);
  variant.weight_element = element_code(format.weight);
  if (variant.activation_element < 0 || variant.weight_element < 0) {
    return refuse("the bsmma family runs e2m1, e4m3 or e5m2 weights with e2m1, e4m3 or e5m2 activations");
  }
  if (format.zero_point != ZeroPoint::None) return refuse("the block-scaled MMA has no zero points");
  const WeightScaling& w = format.weight_scale;
  const ActivationScaling& a = format.activation_scale;
  if (w.granularity != WeightScaleGranularity::PerGroup || a.granularity != ActivationScaleGranularity::PerGroup) {
    return refuse("the block-scaled MMA takes scales per group along K of both operands");
  }
  const bool ue8m0_per_32 = w.type == ScaleType::UE8M0 && a.type == ScaleType::UE8M0 && w.group_k == 32 && a.group_k == 32;
  if (variant.activation_element == dv::kElementE2M1) {
    if (variant.weight_element != dv::kElementE2M1) return refuse("fp4 activations take fp4 weights (kind::mxf4nvf4)");
    variant.kind = dv::kBlockScaledMxf4Nvf4;
    if (w.type == ScaleType::E4M3 && a.type == ScaleType::E4M3 && w.group_k == 16 && a.group_k == 16) {
      variant.scale_vec = 4;  // NVFP4
    } else if (ue8m0_per_32) {
      variant.scale_vec = 2;  // MXFP4
    } else {
      return refuse("fp4 x fp4 takes e4m3 scales per 16 (NVFP4) or ue8m0 scales per 32 (MXFP4) on both operands");
    }
  } else {
    variant.kind = dv::kBlockScaledMxf8f6f4;
    if (!ue8m0_per_32) return refuse("fp8 activations take ue8m0 scales per 32 on both operands (kind::mxf8f6f4, MX)");
    variant.scale_vec = 2;
  }
  variant.activation_bits = variant.activation_element == dv::kElementE2M1 ? 4 : 8;
  variant.weight_bits = variant.weight_element == dv::kElementE2M1 ? 4 : 8;
  variant.weight_global_scale = w.global_scale;
  variant.activation_global_scale = a.global_scale;
  return variant;
}

uint64_t activation_bytes(const Variant& variant, int64_t m, int64_t k) {
  return static_cast<uint64_t>(padded_row_tiles(m)) * static_cast<uint64_t>(k / kStepK) * 32 *
         dv::block_scaled_activation_lane_bytes(variant.activation_bits);
}
uint64_t activation_scale_bytes(int64_t m, int64_t k) {
  return static_cast<uint64_t>(padded_row_tiles(m)) * static_cast<uint64_t>(k / kStepK) *
         dv::kBlockScaledActivationScaleBlockBytes;
}
uint64_t weight_bytes(const Variant& variant, int64_t n, int64_t k) {
  return static_cast<uint64_t>(n / 8) * static_cast<uint64_t>(k / kStepK) * 32 *
         dv::block_scaled_weight_lane_bytes(variant.weight_bits);
}
uint64_t weight_scale_bytes(int64_t n, int64_t k) {
  return static_cast<uint64_t>(n / 8) * static_cast<uint64_t>(k / kStepK) * dv::kBlockScaledWeightScaleBlockBytes;
}

PackedBuffers prepack_activations(const QuantizedActivations& activations) {
  std::string reason;
  const auto variant = variant_of(activations.format, &reason);
  if (!variant) QTUNE_THROW(UnsupportedError, activations.format.to_string() + ": " + reason);
  const int64_t m = activations.m, k = activations.k;
  if (k % kStepK != 0) QTUNE_INPUT_ERROR("k: the bsmma family needs K a multiple of 64, got " + std::to_string(k));
  const int64_t steps = k / kStepK;
  const int chunk = kStepK / variant->scale_vec;  // K elements per scale byte
  std::vector<uint8_t> fragments(activation_bytes(*variant, m, k), 0);
  std::vector<uint8_t> scale_words(activation_scale_bytes(m, k), 0);
  const uint64_t lane_bytes = static_cast<uint64_t>(dv::block_scaled_activation_lane_bytes(variant->activation_bits));
  for (int64_t row = 0; row < m; ++row) {
    const int64_t tile = row / 16;
    const int row_in_tile = static_cast<int>(row % 16);
    for (int64_t col = 0; col < k; ++col) {
      const int64_t step = col / kStepK;
      const Slot slot = activation_slot(*variant, row_in_tile, static_cast<int>(col % kStepK));
      const uint64_t block = static_cast<uint64_t>(tile * steps + step) * 32 * lane_bytes;
      put_element(fragments, block + static_cast<uint64_t>(slot.lane) * lane_bytes, slot, variant->activation_bits,
                  activations.codes[static_cast<size_t>(row * k + col)]);
      if (col % chunk == 0) {
        // Row g's scale word sits in lane 4g, row g + 8's in lane 4g + 1; byte j scales chunk j of the step.
        const int lane = 4 * (row_in_tile % 8) + row_in_tile / 8;
        const uint64_t word = static_cast<uint64_t>(tile * steps + step) * dv::kBlockScaledActivationScaleBlockBytes +
                              static_cast<uint64_t>(lane) * 4;
        const int64_t byte = (col % kStepK) / chunk;
        scale_words[word + static_cast<uint64_t>(byte)] =
            static_cast<uint8_t>(activations.scales.bits[static_cast<size_t>(activations.scales.index(row, col))] & 0xFF);
      }
    }
  }
  PackedBuffers packed;
  packed["a"] = std::move(fragments);
  packed["a_scales"] = std::move(scale_words);
  if (variant->activation_global_scale) put_f32(packed, "a_global_scale", activations.global_scale);
  return packed;
}

PackedBuffers prepack_weights(const QuantizedWeights& weights) {
  std::string reason;
  const auto variant = variant_of(weights.format, &reason);
  if (!variant) QTUNE_THROW(UnsupportedError, weights.format.to_string() + ": " + reason);
  const int64_t n = weights.n, k = weights.k;
  if (k % kStepK != 0) QTUNE_INPUT_ERROR("k: the bsmma family needs K a multiple of 64, got " + std::to_string(k));
  if (n % 8 != 0) QTUNE_INPUT_ERROR("n: the bsmma family needs N a multiple of 8, got " + std::to_string(n));
  const int64_t steps = k / kStepK;
  const int chunk = kStepK / variant->scale_vec;
  std::vector<uint8_t> fragments(weight_bytes(*variant, n, k), 0);
  std::vector<uint8_t> scale_words(weight_scale_bytes(n, k), 0);
  const uint64_t lane_bytes = static_cast<uint64_t>(dv::block_scaled_weight_lane_bytes(variant->weight_bits));
  for (int64_t column = 0; column < n; ++column) {
    const int64_t tile = column / 8;
    const int column_in_tile = static_cast<int>(column % 8);
    for (int64_t col = 0; col < k; ++col) {
      const int64_t step = col / kStepK;
      const Slot slot = weight_slot(*variant, column_in_tile, static_cast<int>(col % kStepK));
      const uint64_t block = static_cast<uint64_t>(tile * steps + step) * 32 * lane_bytes;
      put_element(fragments, block + static_cast<uint64_t>(slot.lane) * lane_bytes, slot, variant->weight_bits,
                  weights.codes[static_cast<size_t>(column * k + col)]);
      if (col % chunk == 0) {
        const uint64_t word = static_cast<uint64_t>(tile * steps + step) * dv::kBlockScaledWeightScaleBlockBytes +
                              static_cast<uint64_t>(column_in_tile) * 4;
        scale_words[word + static_cast<uint64_t>((col % kStepK) / chunk)] =
            static_cast<uint8_t>(weights.scales.bits[static_cast<size_t>(weights.scales.index(column, col))] & 0xFF);
      }
    }
  }
  PackedBuffers packed;
  packed["weights"] = std::move(fragments);
  packed["scales"] = std::move(scale_words);
  put_f32(packed, "global_scale", variant->weight_global_scale ? weights.global_scale : 1.0f);
  return packed;
}

QuantizedWeights unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n, int64_t k) {
  std::string reason;
  const auto variant = variant_of(format, &reason);
  if (!variant) QTUNE_THROW(UnsupportedError, format.to_string() + ": " + reason);
  auto buffer = [&](const std::string& name, uint64_t bytes) -> const std::vector<uint8_t>& {
    const auto found = packed.find(name);
    if (found == packed.end() || found->second.size() != bytes) {
      QTUNE_INPUT_ERROR("packed." + name + ": missing or not " + std::to_string(bytes) + " bytes");
    }
    return found->second;
  };
  const std::vector<uint8_t>& fragments = buffer("weights", weight_bytes(*variant, n, k));
  const std::vector<uint8_t>& scale_words = buffer("scales", weight_scale_bytes(n, k));
  const std::vector<uint8_t>& global = buffer("global_scale", 4);
  const int64_t steps = k / kStepK;
  const int chunk = kStepK / variant->scale_vec;
  const ScaleGrid layout = weight_scale_layout(format, n, k);
  std::vector<uint8_t> codes(static_cast<size_t>(n * k));
  std::vector<uint32_t> scale_bits(static_cast<size_t>(layout.rows * layout.cols));
  for (int64_t column = 0; column < n; ++column) {
    for (int64_t col = 0; col < k; ++col) {
      const int64_t tile = column / 8, step = col / kStepK;
      const Slot slot = weight_slot(*variant, static_cast<int>(column % 8), static_cast<int>(col % kStepK));
      const uint64_t lane_bytes = static_cast<uint64_t>(dv::block_scaled_weight_lane_bytes(variant->weight_bits));
      const uint64_t lane_base = static_cast<uint64_t>(tile * steps + step) * 32 * lane_bytes + static_cast<uint64_t>(slot.lane) * lane_bytes;
      codes[static_cast<size_t>(column * k + col)] = get_element(fragments, lane_base, slot, variant->weight_bits);
      if (col % chunk == 0) {
        const uint64_t scale_word = static_cast<uint64_t>(tile * steps + step) * dv::kBlockScaledWeightScaleBlockBytes +
                                    static_cast<uint64_t>(column % 8) * 4;
        scale_bits[static_cast<size_t>(layout.index(column, col))] = scale_words[scale_word + static_cast<uint64_t>((col % kStepK) / chunk)];
      }
    }
  }
  float global_scale = 1.0f;
  std::memcpy(&global_scale, global.data(), 4);
  return weights_from_codes(format, n, k, std::move(codes), std::move(scale_bits), {}, global_scale);
}

}  // namespace block_scaled

namespace {

constexpr const char* kKernelName = "qtune_block_scaled_gemm";

struct Tiles {
  int bm, bn, wm, wn;
  static Tiles from(const KernelConfig& config) {
    return {config.get("bm"), config.get("bn"), config.get("wm"), config.get("wn")};
  }
  int threads() const { return wm * wn * 32; }
  int fragments_m() const { return bm / (16 * wm); }
  int fragments_n() const { return bn / (8 * wn); }
};

}  // namespace

std::string BlockScaledFamily::description() const {
  return "block-scaled GEMMs on sm_120a's mma.sync: W4A4 NVFP4/MXFP4 (m16n8k64 kind::mxf4nvf4), MX W8A8 and W4A8 fp4 x "
         "fp8 (m16n8k32 kind::mxf8f6f4), operands prepacked in fragment order and read straight into registers";
}

std::vector<ParameterDomain> BlockScaledFamily::parameter_space() const {
  return {
      {"bm", {16, 32, 64, 128}, "rows of the CTA tile"},
      {"bn", {32, 64, 128, 256}, "columns of the CTA tile"},
      {"wm", {1, 2, 4}, "warps along M"},
      {"wn", {1, 2, 4, 8}, "warps along N"},
  };
}

ArchSupport BlockScaledFamily::supports(const FormatSpec& format, int sm) const {
  ArchSupport support{sm, false, ""};
  const std::string prefix = format.to_string() + " is unsupported on sm_" + std::to_string(sm) + " by the bsmma family: ";
  if (sm != 120 && sm != 121) {
    support.reason = prefix + "its block-scaled mma.sync exists on sm_120a and sm_121a only (sm_100's is tcgen05)";
    return support;
  }
  std::string reason;
  if (!block_scaled::variant_of(format, &reason)) {
    support.reason = prefix + reason;
    return support;
  }
  support.supported = true;
  return support;
}

int BlockScaledFamily::estimated_registers(const KernelConfig& config, const FormatSpec& format) {
  const Tiles t = Tiles::from(config);
  const int fm = t.fragments_m(), fn = t.fragments_n();
  const auto variant = block_scaled::variant_of(format);
  const int a_vectors = variant && variant->activation_bits == 8 ? 2 : 1;
  const int b_words = variant && variant->weight_bits == 8 ? 4 : 2;
  return fm * fn * 4 + 2 * (fm * (4 * a_vectors + 1) + fn * (b_words + 1)) + 40;
}

RuleVerdict BlockScaledFamily::check(const KernelConfig& config, const Problem& problem, const ArchLimits& limits) const {
  if (const ArchSupport support = supports(problem.format, limits.sm); !support.supported) {
    return RuleVerdict::fail("format-unsupported-on-arch", support.reason);
  }
  for (const ParameterDomain& domain : parameter_space()) {
    const auto found = config.params.find(domain.name);
    if (found == config.params.end()) return RuleVerdict::fail("missing-parameter", "config has no " + domain.name);
    if (std::find(domain.values.begin(), domain.values.end(), found->second) == domain.values.end()) {
      return RuleVerdict::fail("value-outside-domain", domain.name + "=" + std::to_string(found->second) + " is not in its domain");
    }
  }
  const Tiles t = Tiles::from(config);
  if (t.bm % (16 * t.wm) != 0) {
    return RuleVerdict::fail("bm-per-warp", "bm=" + std::to_string(t.bm) + " is not a multiple of 16 x wm=" + std::to_string(t.wm));
  }
  if (t.bn % (8 * t.wn) != 0) {
    return RuleVerdict::fail("bn-per-warp", "bn=" + std::to_string(t.bn) + " is not a multiple of 8 x wn=" + std::to_string(t.wn));
  }
  if (t.fragments_n() > 16) return RuleVerdict::fail("n-fragments", "more than 16 n8 tiles per warp");
  if (problem.k % 64 != 0) return RuleVerdict::fail("k-multiple-of-64", "K=" + std::to_string(problem.k) + " is not a multiple of 64");
  if (problem.n % t.bn != 0) {
    return RuleVerdict::fail("bn-divides-n", "bn=" + std::to_string(t.bn) + " does not divide N=" + std::to_string(problem.n));
  }
  if (t.bm > 16 && t.bm / 2 >= problem.m) {
    return RuleVerdict::fail("bm-over-m", "bm=" + std::to_string(t.bm) + " is at least twice M=" + std::to_string(problem.m));
  }
  if (t.threads() > limits.max_threads_per_block) {
    return RuleVerdict::fail("threads-per-block", std::to_string(t.threads()) + " threads exceed the block limit");
  }
  const int registers = estimated_registers(config, problem.format);
  const int register_cap = std::min(limits.max_registers_per_thread, limits.registers_per_sm / t.threads());
  if (registers > register_cap) {
    return RuleVerdict::fail("registers-per-thread", "about " + std::to_string(registers) + " registers per thread needed, " +
                                                         std::to_string(register_cap) + " available: it would spill");
  }
  return RuleVerdict::ok();
}

std::string BlockScaledFamily::kernel_name(const KernelConfig&, const FormatSpec&) const { return kKernelName; }

std::string BlockScaledFamily::instantiation_source(const KernelConfig& config, const FormatSpec& format,
                                                    const std::string& arch) const {
  const int sm = sm_of_arch(arch);
  if (const ArchSupport support = supports(format, sm); !support.supported) QTUNE_THROW(UnsupportedError, support.reason);
  if (arch.empty() || arch.back() != 'a') {
    QTUNE_INPUT_ERROR("arch: the block-scaled MMA needs the architecture-specific target (" + arch + "a), got " + arch);
  }
  const auto variant = block_scaled::variant_of(format);
  const Tiles t = Tiles::from(config);
  const std::string output = format.output == OutputType::F16 ? "qd::kElementF16" : "qd::kElementBF16";
  std::string source = "// qtune bsmma family: " + format.to_string() + " " + config.to_string() + " for " + arch + "\n";
  source += "#include \"gemm/block_scaled_mma.cuh\"\nnamespace qd = qtune::device;\n";
  auto element = [](int code) {
    return std::string(code == dv::kElementE2M1 ? "qd::kElementE2M1" : code == dv::kElementE4M3 ? "qd::kElementE4M3" : "qd::kElementE5M2");
  };
  source += "using QtuneTiles = qd::BlockScaledTiles<" +
            std::string(variant->kind == dv::kBlockScaledMxf4Nvf4 ? "qd::kBlockScaledMxf4Nvf4" : "qd::kBlockScaledMxf8f6f4") +
            ", " + element(variant->activation_element) + ", " + element(variant->weight_element) + ", " +
            std::to_string(variant->scale_vec) + ", " + output + ", " + std::to_string(t.bm) + ", " + std::to_string(t.bn) +
            ", " + std::to_string(t.wm) + ", " + std::to_string(t.wn) + ">;\n";
  source += "extern \"C\" __global__ void __launch_bounds__(QtuneTiles::THREADS, 1) " + std::string(kKernelName) +
            "(const qd::BlockScaledParams params) {\n  qd::block_scaled_mma_gemm<QtuneTiles>(params);\n}\n";
  return source;
}

LaunchGeometry BlockScaledFamily::launch_geometry(const KernelConfig& config, const Problem& problem) const {
  const Tiles t = Tiles::from(config);
  LaunchGeometry geometry;
  geometry.grid = {static_cast<uint32_t>((problem.n / t.bn) * ((problem.m + t.bm - 1) / t.bm)), 1, 1};
  geometry.block = {static_cast<uint32_t>(t.threads()), 1, 1};
  return geometry;
}

std::vector<BufferSpec> BlockScaledFamily::buffers(const KernelConfig&, const Problem& problem) const {
  const auto variant = block_scaled::variant_of(problem.format);
  if (!variant) QTUNE_THROW(UnsupportedError, problem.format.to_string() + " has no bsmma layout");
  const uint64_t m = static_cast<uint64_t>(problem.m), n = static_cast<uint64_t>(problem.n);
  std::vector<BufferSpec> list;
  list.push_back({"a", block_scaled::activation_bytes(*variant, problem.m, problem.k), BufferRole::Activations,
                  to_string(problem.format.activation) + " activations in the MMA's A-fragment order, rows padded to 128 with zeros"});
  list.push_back({"a_scales", block_scaled::activation_scale_bytes(problem.m, problem.k), BufferRole::Activations,
                  "activation scale words, one per lane and K step (lanes 4g, 4g + 1 carry rows g, g + 8)"});
  if (variant->activation_global_scale) {
    list.push_back({"a_global_scale", 4, BufferRole::Activations, "the activations' f32 tensor scale"});
  }
  list.push_back({"weights", block_scaled::weight_bytes(*variant, problem.n, problem.k), BufferRole::Weights,
                  "weight codes in the MMA's B-fragment order (fp4 two per byte)"});
  list.push_back({"scales", block_scaled::weight_scale_bytes(problem.n, problem.k), BufferRole::Weights,
                  "weight scale words, one per column and K step"});
  list.push_back({"global_scale", 4, BufferRole::Weights, "the weights' f32 tensor scale (1 for MXFP4)"});
  if (problem.has_bias) list.push_back({"bias", n * 2, BufferRole::Bias, "bias [n] in the output type"});
  list.push_back({"c", m * n * 2, BufferRole::Output, "output [m][n], row-major, " + to_string(problem.format.output)});
  return list;
}

KernelArguments BlockScaledFamily::pack_arguments(const KernelConfig&, const Problem& problem,
                                                  const std::map<std::string, uint64_t>& device_addresses) const {
  auto address = [&](const std::string& name, bool required) -> unsigned long long {
    return mma::buffer_address(device_addresses, name, required);
  };
  const auto variant = block_scaled::variant_of(problem.format);
  if (!variant) QTUNE_THROW(UnsupportedError, problem.format.to_string() + " has no bsmma layout");
  dv::BlockScaledParams params{};
  params.a = address("a", true);
  params.a_scales = address("a_scales", true);
  params.a_global_scale = address("a_global_scale", variant->activation_global_scale);
  params.weights = address("weights", true);
  params.scales = address("scales", true);
  params.global_scale = address("global_scale", true);
  params.bias = address("bias", problem.has_bias);
  params.c = address("c", true);
  params.m = static_cast<int>(problem.m);
  params.n = static_cast<int>(problem.n);
  params.k = static_cast<int>(problem.k);
  return KernelArguments::single(params);
}

PackedBuffers BlockScaledFamily::prepack_weights(const QuantizedWeights& weights, const KernelConfig&) const {
  return block_scaled::prepack_weights(weights);
}

QuantizedWeights BlockScaledFamily::unpack_weights(const PackedBuffers& packed, const FormatSpec& format, int64_t n,
                                                   int64_t k, const KernelConfig&) const {
  return block_scaled::unpack_weights(packed, format, n, k);
}

PackedBuffers BlockScaledFamily::prepack_activations(const QuantizedActivations& activations, const KernelConfig&) const {
  return block_scaled::prepack_activations(activations);
}

std::vector<uint8_t> BlockScaledFamily::pack_bias(std::span<const float> bias, const FormatSpec& format) const {
  return output_type_bytes(bias, format.output);
}

ParameterRanges BlockScaledFamily::curated_ranges(int64_t m) const {
  ParameterRanges ranges = KernelFamily::curated_ranges(m);
  if (m <= 16) {
    ranges["bm"] = {16};
    ranges["wm"] = {1};
  } else if (m <= 64) {
    ranges["bm"] = {16, 32, 64};
    ranges["wm"] = {1, 2};
  } else {
    ranges["bm"] = {64, 128};
    ranges["wm"] = {2, 4};
  }
  ranges["bn"] = {64, 128, 256};
  ranges["wn"] = {2, 4};
  return ranges;
}

KernelConfig BlockScaledFamily::default_config(const Problem& problem, const ArchLimits&) const {
  // No sm_120 GPU has measured this family yet: the CTA shape follows the mma family's habits (small M: one warp row
  // and wide N; large M: 128 x 128 with 2 x 4 warps).
  KernelConfig config;
  config.family = name();
  const int bm = problem.m <= 16 ? 16 : problem.m <= 32 ? 32 : problem.m <= 64 ? 64 : 128;
  int bn = 128;
  while (bn > 32 && problem.n % bn != 0) bn /= 2;
  const int wm = bm >= 64 ? 2 : 1;
  const int wn = bn >= 128 ? 4 : bn / 32;
  config.params = {{"bm", bm}, {"bn", bn}, {"wm", wm}, {"wn", wn}};
  return config;
}

const BlockScaledFamily& block_scaled_family() {
  static const BlockScaledFamily family;
  return family;
}

}  // namespace qtune

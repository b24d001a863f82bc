// The mma family with quantized activations (W8A8 int8/fp8, W4A8, W4A4) on the CPU: which formats it runs and
// refuses, prepack round trips, the activation layout, and the kernel's arithmetic emulated from the packed buffers:
// B registers read where each lane loads them and converted with the device's own bit formulas (operand_bits.cuh),
// placed by the PTX fragment definition (not by the packer's code), multiplied with the packed activations, partial
// sums scaled per K group as mma_gemm.cuh flushes them. It must equal the CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/codec.hpp"
#include "kernels/device/gemm/abi.cuh"
#include "kernels/device/gemm/operand_bits.cuh"
#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/family.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"

namespace qtune {
namespace {

namespace dv = qtune::device;

// Quantized-activation formats beyond the presets: scale placements, e5m2 mixes, narrow weights.
const char* kExtraSpecs[] = {
    "w8a8-int8-ch:act-scale=g128",   "w8a8-int8-g128",          "w8a8-int8-ch:act-scale=none",
    "w8a8-fp8-ch:act-scale=g64",     "w8a8-fp8-g128",           "w8a8-fp8-e5m2",
    "w8a8-e5m2-ch",                  "w8a8-e5m2-block128x128-e5m2", "w8a8-fp8-block64x128",
    "w4a8-int4-g64-int8",            "w4a8-int4-tensor-int8",   "w4a8-int4-g128-fp8",
    "w4a8-int4-e5m2",                "w4a8-fp4-g64-fp8:act-scale=g64",
    "w6a8-e3m2-g32-fp8",             "w6a8-e2m3-fp8",           "w2a8-int2-g64-int8",
    "w5a8-int5-fp8",                 "w8a8-int8-ch:act-scale-type=f16",
    "w4a4-int4-g64",                 "w4a4-int4-tensor",        "w2a4-int2-ch-int4",
    "w4a4-int4-g128:act-scale=g128",
};

std::vector<std::string> quantized_specs() {
  std::vector<std::string> specs;
  for (const FormatPreset& preset : format_presets()) {
    const FormatSpec format = FormatSpec::parse(preset.name);
    if (format.activation_is_quantized() && !mma::unsupported_format_reason(format)) specs.push_back(preset.name);
  }
  for (const char* spec : kExtraSpecs) specs.push_back(spec);
  return specs;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name;
  for (char c : info.param) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

uint32_t load_u32(const std::vector<uint8_t>& bytes, size_t offset) {
  uint32_t value;
  std::memcpy(&value, bytes.data() + offset, 4);
  return value;
}
float load_f32(const std::vector<uint8_t>& bytes, size_t index) {
  float value;
  std::memcpy(&value, bytes.data() + index * 4, 4);
  return value;
}

// The codes of register slot `rho` of one lane, one per operand lane in its low bits: the bit planes (widest first)
// as format_traits.cuh lays them out.
uint32_t slot_codes(const uint32_t* words, int rho, const mma::DeviceFormat& format) {
  const int lane_bits = format.compute_bits();
  const int values_per_register = 32 / lane_bits;
  uint32_t codes = 0;
  int word_base = 0, offset = 0;
  for (int width = 8; width >= 1; width >>= 1) {
    if (!(format.weight_bits & width)) continue;
    const int fields = lane_bits / width;
    const uint32_t word = words[word_base + rho / fields];
    const uint32_t mask = ((1u << width) - 1u) * dv::operand_bits::lane_ones(lane_bits);
    codes |= ((word >> ((rho % fields) * width)) & mask) << offset;
    word_base += values_per_register * width / 2;
    offset += width;
  }
  return codes;
}

// One B register as the device builds it (dequant.cuh operand_slot).
uint32_t operand_register(const uint32_t* words, int rho, const mma::DeviceFormat& format, const FormatSpec& spec) {
  if (format.raw_operand()) return words[rho];
  const uint32_t codes = slot_codes(words, rho, format);
  if (format.integer_mma()) return dv::operand_bits::integer_operand(codes, format.compute_bits(), format.weight_bits);
  if (format.is_float()) {
    const int operand_mantissa = format.compute == dv::kElementE4M3 ? 3 : 2;
    return dv::operand_bits::float_operand(codes, format.weight_bits, format.mantissa_bits, operand_mantissa);
  }
  // Integers on fp8: exact f16 values converted to fp8, lane by lane.
  const ElementType operand = format.compute == dv::kElementE4M3 ? ElementType::floating(4, 3) : ElementType::floating(5, 2);
  uint32_t result = 0;
  for (int v = 0; v < 4; ++v) {
    const int value = static_cast<int>((codes >> (8 * v)) & 0xFFu) - (1 << (spec.weight.bits - 1));
    result |= encode(operand, value) << (8 * v);
  }
  return result;
}

// The value of lane `v` of an operand register of element type `code`.
double lane_value(uint32_t register_bits, int v, int code) {
  if (code == dv::kElementS8) return static_cast<int8_t>((register_bits >> (8 * v)) & 0xFFu);
  if (code == dv::kElementS4) {
    const int nibble = static_cast<int>((register_bits >> (4 * v)) & 0xFu);
    return nibble >= 8 ? nibble - 16 : nibble;
  }
  const ElementType type = code == dv::kElementE4M3 ? ElementType::floating(4, 3) : ElementType::floating(5, 2);
  return decode(type, (register_bits >> (8 * v)) & 0xFFu);
}

// B[n][k] as the tensor cores see it, from the packed atoms: lane (g, t) loads its words slice-major (the atom's
// SLICE_BYTES of all lanes, then the next), or core-matrix atoms by ldmatrix; B register r of slot
// (kstep * 2 + nsub) * 2 + r holds, per the PTX fragments of m16n8k32 / m16n8k64,
// k = kstep * KSTEP + r * KSTEP / 2 + t * values + v of column n = nsub * 8 + g.
std::vector<double> tensor_core_weights(const PackedBuffers& packed, const FormatSpec& spec, const mma::DeviceFormat& format,
                                        int64_t n, int64_t k) {
  const std::vector<uint8_t>& bytes = packed.at("weights");
  const int values = 32 / format.compute_bits();
  const int slice = format.slice_bytes();
  std::vector<double> b(static_cast<size_t>(n * k), std::nan(""));
  for (int64_t strip = 0; strip < n / 16; ++strip) {
    for (int64_t atom = 0; atom < k / format.atom_k(); ++atom) {
      const size_t atom_offset = static_cast<size_t>((strip * (k / format.atom_k()) + atom) * format.atom_bytes());
      for (int lane = 0; lane < 32; ++lane) {
        std::vector<uint32_t> words(static_cast<size_t>(format.thread_words()));
        for (int w = 0; w < format.thread_words(); ++w) {
          if (format.core_matrix_atoms()) {
            // ldmatrix.x4 of k-step w / 4: matrix j = w % 4 = (nsub, r) has its rows at 16-byte steps from
            // nsub * 1024 + ks * 256 + r * 128, and lane T receives bytes 4 (T % 4) of row T / 4.
            const int ks = w / 4, nsub = (w % 4) / 2, r = w % 2;
            const size_t matrix = static_cast<size_t>(nsub * 1024 + ks * 256 + r * 128);
            words[w] = load_u32(bytes, atom_offset + matrix + static_cast<size_t>((lane / 4) * 16 + (lane % 4) * 4));
          } else {
            words[w] = load_u32(bytes, atom_offset + static_cast<size_t>((w * 4 / slice) * 32 * slice + lane * slice + w * 4 % slice));
          }
        }
        for (int rho = 0; rho < 16; ++rho) {
          const int kstep = rho / 4, nsub = (rho / 2) % 2, r = rho % 2;
          const uint32_t operand = operand_register(words.data(), rho, format, spec);
          for (int v = 0; v < values; ++v) {
            const int64_t row = strip * 16 + nsub * 8 + lane / 4;
            const int64_t column = atom * format.atom_k() + kstep * format.kstep() + r * format.kstep() / 2 + (lane % 4) * values + v;
            b[static_cast<size_t>(row * k + column)] = lane_value(operand, v, format.compute);
          }
        }
      }
    }
  }
  return b;
}

// The kernel's result in f64 from packed buffers (see the file comment).
std::vector<double> emulate_kernel(const FormatSpec& spec, const PackedBuffers& weights, const PackedBuffers& activations,
                                   int64_t m, int64_t n, int64_t k) {
  const mma::DeviceFormat format = mma::device_format(spec);
  const std::vector<double> b = tensor_core_weights(weights, spec, format, n, k);
  const std::vector<uint8_t>& a_bytes = activations.at("a");
  std::vector<double> a(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i) {
    const uint32_t bits = format.act_bits() == 8 ? a_bytes[static_cast<size_t>(i)] : (a_bytes[static_cast<size_t>(i / 2)] >> (4 * (i % 2)));
    a[static_cast<size_t>(i)] = lane_value(bits, 0, format.activation);
  }
  const std::vector<uint8_t>& w_scales = weights.at("scales");
  const float global = load_f32(weights.at("global_scale"), 0);
  const std::vector<uint8_t>* a_scales = activations.count("a_scales") ? &activations.at("a_scales") : nullptr;
  const int64_t flush = format.flush_k() > 0 ? format.flush_k() : k;
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t column = 0; column < n; ++column) {
      double acc = 0;
      for (int64_t start = 0; start < k; start += flush) {
        double part = 0;
        for (int64_t p = start; p < start + flush; ++p) part += a[static_cast<size_t>(row * k + p)] * b[static_cast<size_t>(column * k + p)];
        if (format.scale_mode == dv::kScaleAccumulator) part *= load_f32(w_scales, static_cast<size_t>((start / format.group_k) * n + column));
        if (format.activation_scales == dv::kActivationScaleGroup) {
          part *= load_f32(*a_scales, static_cast<size_t>((start / format.activation_group_k) * m + row));
        }
        acc += part;
      }
      if (format.scale_mode == dv::kScaleEpilogue) acc *= load_f32(w_scales, static_cast<size_t>(column));
      if (format.activation_scales == dv::kActivationScaleToken) acc *= load_f32(*a_scales, static_cast<size_t>(row));
      c[static_cast<size_t>(row * n + column)] = acc * global;
    }
  }
  return c;
}

const KernelConfig& any_config() {
  static const KernelConfig config = KernelConfig::parse("bm=16,bn=64,bk=256,wm=1,wn=4,wk=1,stages=2,split=1,raster=0");
  return config;
}

class MmaQuantized : public ::testing::TestWithParam<std::string> {};

TEST_P(MmaQuantized, EmulatedKernelEqualsTheReference) {
  const FormatSpec format = FormatSpec::parse(GetParam());
  ASSERT_FALSE(mma::unsupported_format_reason(format)) << *mma::unsupported_format_reason(format);
  const int64_t m = 5, n = 128, k = 512;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 31, 0.0f, 0.05f), n, k);
  const QuantizedActivations activations = quantize_activations(format, random_normal(static_cast<size_t>(m * k), 32), m, k);
  const PackedBuffers packed_weights = mma_family().prepack_weights(weights, any_config());
  const PackedBuffers packed_activations = mma_family().prepack_activations(activations, any_config());
  for (const BufferSpec& buffer : mma_family().buffers(any_config(), Problem{format, m, n, k, false})) {
    if (buffer.role == BufferRole::Output || buffer.role == BufferRole::Workspace) continue;
    const PackedBuffers& source = buffer.role == BufferRole::Weights ? packed_weights : packed_activations;
    ASSERT_TRUE(source.count(buffer.name)) << buffer.name;
    EXPECT_EQ(source.at(buffer.name).size(), buffer.bytes) << buffer.name;
  }
  const std::vector<double> emulated = emulate_kernel(format, packed_weights, packed_activations, m, n, k);
  ReferenceOptions options;
  options.accumulation = Accumulation::F64;
  const ReferenceResult reference = reference_gemm(activations, weights, options);
  double difference = 0, norm = 0;
  for (size_t i = 0; i < emulated.size(); ++i) {
    ASSERT_TRUE(std::isfinite(emulated[i])) << i;
    difference += (emulated[i] - reference.unrounded[i]) * (emulated[i] - reference.unrounded[i]);
    norm += double(reference.unrounded[i]) * reference.unrounded[i];
  }
  ASSERT_GT(norm, 0.0);
  // Exact products and f32 scales against the f64 reference (rounded once to f32): only scale-product rounding differs.
  EXPECT_LT(std::sqrt(difference / norm), 1e-6);
}

TEST_P(MmaQuantized, UnpackGivesTheWeightsBack) {
  const FormatSpec format = FormatSpec::parse(GetParam());
  const int64_t n = 128, k = 512;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 41, 0.0f, 0.05f), n, k);
  const PackedBuffers packed = mma_family().prepack_weights(weights, any_config());
  const QuantizedWeights unpacked = mma_family().unpack_weights(packed, format, n, k, any_config());
  const uint32_t mask = (1u << format.weight.bits) - 1u;
  for (size_t i = 0; i < weights.codes.size(); ++i) {
    ASSERT_EQ(weights.codes[i] & mask, unpacked.codes[i] & mask) << "code " << i;
  }
  // f32 scales travel exactly (times a power of two); the dequantized weights agree to f32 rounding.
  const std::vector<float> original = dequantize(weights);
  const std::vector<float> recovered = dequantize(unpacked);
  const std::vector<float> kernel = mma::kernel_weights(packed, format, mma::device_format(format), n, k);
  for (size_t i = 0; i < original.size(); ++i) {
    ASSERT_NEAR(recovered[i], original[i], 1e-6 * std::fabs(original[i])) << i;
    ASSERT_NEAR(kernel[i], original[i], 1e-6 * std::fabs(original[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(QuantizedActivations, MmaQuantized, ::testing::ValuesIn(quantized_specs()), test_name);

// ---- which formats the family runs where ----

TEST(MmaQuantizedSupport, ArchitecturesAndReasons) {
  auto supported = [](const char* spec, int sm) { return mma_family().supports(FormatSpec::parse(spec), sm); };
  for (int sm : {80, 86, 89, 90, 100, 120}) {
    EXPECT_TRUE(supported("w8a8-int8-ch", sm).supported) << sm;
    EXPECT_TRUE(supported("w8a8-int8-block128x128", sm).supported) << sm;
    EXPECT_TRUE(supported("w4a8-int4-g128-int8", sm).supported) << sm;
  }
  for (int sm : {89, 90, 100, 120}) {
    for (const char* spec : {"w8a8-fp8-ch", "w8a8-fp8-tensor", "w8a8-fp8-block128x128", "w8a8-e5m2-e5m2", "w4a8-fp4-g32-fp8",
                             "w4a8-int4-fp8"}) {
      EXPECT_TRUE(supported(spec, sm).supported) << spec << " sm_" << sm << ": " << supported(spec, sm).reason;
    }
  }
  for (int sm : {80, 86}) {
    const ArchSupport fp8 = supported("w8a8-fp8-ch", sm);
    EXPECT_FALSE(fp8.supported);
    EXPECT_NE(fp8.reason.find("unsupported on sm_" + std::to_string(sm)), std::string::npos) << fp8.reason;
    EXPECT_NE(fp8.reason.find("fp8 activations need sm_89 or later"), std::string::npos) << fp8.reason;
  }
  for (int sm : {80, 86, 89}) EXPECT_TRUE(supported("w4a4-int4-ch", sm).supported) << sm;
  for (int sm : {90, 100, 120}) {
    const ArchSupport int4 = supported("w4a4-int4-ch", sm);
    EXPECT_FALSE(int4.supported);
    EXPECT_NE(int4.reason.find("w4a4-int4-ch is unsupported on sm_" + std::to_string(sm)), std::string::npos) << int4.reason;
    EXPECT_NE(int4.reason.find("int4"), std::string::npos) << int4.reason;
  }
}

TEST(MmaQuantizedSupport, RefusalsNameTheReason) {
  auto reason = [](const char* spec) {
    const std::optional<std::string> text = mma::unsupported_format_reason(FormatSpec::parse(spec));
    return text ? *text : std::string();
  };
  EXPECT_NE(reason("w4a8-int4-g128-zp-int8").find("zero points"), std::string::npos);
  EXPECT_NE(reason("w4a4-nvfp4").find("fp4 activations"), std::string::npos);
  EXPECT_NE(reason("w8a8-int8-ch:act-scale=g64+t,act-scale-type=f16").find("global activation scale"), std::string::npos);
  EXPECT_NE(reason("w8a8-int8-g16").find("k-step (32)"), std::string::npos);
  EXPECT_NE(reason("w4a4-int4-g32").find("k-step (64)"), std::string::npos);
  EXPECT_NE(reason("w8a8-int8-g128:act-scale=g64").find("must be equal"), std::string::npos);
  // Never supported on any architecture: the family refuses, the instantiation throws.
  const KernelConfig config = KernelConfig::parse("bm=16,bn=64,bk=256,wm=1,wn=4,wk=1,stages=2,split=1,raster=0");
  EXPECT_THROW(mma_family().instantiation_source(config, FormatSpec::parse("w4a8-int4-g128-zp-int8"), "sm_90a"), UnsupportedError);
  EXPECT_FALSE(mma_family().supports(FormatSpec::parse("w4a8-int4-g128-zp-int8"), 90).supported);
}

TEST(MmaQuantizedSupport, RulesCoverTheNewOperands) {
  const ArchLimits hopper = ArchLimits::for_sm(90);
  auto verdict = [&](const char* spec, int64_t k, const char* config) {
    return mma_family().check(KernelConfig::parse(config), Problem{FormatSpec::parse(spec), 16, 4096, k, false}, hopper);
  };
  // 8-bit operands have 128-deep atoms, 4-bit ones 256.
  EXPECT_EQ(verdict("w8a8-int8-ch", 4096, "bm=16,bn=64,bk=64,wm=1,wn=4,wk=1,stages=2,split=1,raster=0").rule, "bk-atom");
  EXPECT_TRUE(verdict("w8a8-int8-ch", 4096, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=2,split=1,raster=0").valid);
  EXPECT_EQ(verdict("w4a4-int4-ch", 4096, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=2,split=1,raster=0").rule,
            "format-unsupported-on-arch");
  const RuleVerdict on_ampere = mma_family().check(KernelConfig::parse("bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=2,split=1,raster=0"),
                                                   Problem{FormatSpec::parse("w4a4-int4-ch"), 16, 4096, 4096, false},
                                                   ArchLimits::for_sm(80));
  EXPECT_EQ(on_ampere.rule, "bk-atom");
  // Group scales: bk must divide the group or be a multiple of it.
  EXPECT_EQ(verdict("w8a8-fp8-block128x128", 4096, "bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=2,split=1,raster=0").rule, "");
  EXPECT_EQ(verdict("w8a8-int8-g384", 3072, "bm=16,bn=64,bk=256,wm=1,wn=4,wk=1,stages=2,split=1,raster=0").rule,
            "bk-divides-group");
  EXPECT_EQ(verdict("w8a8-int8-ch", 262144, "bm=16,bn=64,bk=512,wm=1,wn=4,wk=1,stages=2,split=1,raster=0").rule,
            "int32-accumulator-range");
  // Partial sums double the accumulators of flushing formats.
  const char* wide = "bm=128,bn=256,bk=128,wm=2,wn=4,wk=1,stages=2,split=1,raster=0";
  EXPECT_NE(verdict("w8a8-int8-ch", 4096, wide).rule, "accumulators-per-thread");
  EXPECT_EQ(mma_family().check(KernelConfig::parse(wide), Problem{FormatSpec::parse("w8a8-int8-block128x128"), 256, 4096, 4096, false},
                               hopper).rule,
            "accumulators-per-thread");
}

TEST(MmaQuantizedSupport, DefaultConfigsPassCheck) {
  for (const std::string& spec : quantized_specs()) {
    const FormatSpec format = FormatSpec::parse(spec);
    for (int sm : {80, 89, 90, 120}) {
      if (!mma_family().supports(format, sm).supported) continue;
      for (int64_t m : {1, 33, 300}) {
        const Problem problem{format, m, 5120, 13824, false};
        const ArchLimits limits = ArchLimits::for_sm(sm);
        KernelConfig config;
        ASSERT_NO_THROW(config = mma_family().default_config(problem, limits)) << spec << " sm_" << sm << " m=" << m;
        const RuleVerdict verdict = mma_family().check(config, problem, limits);
        EXPECT_TRUE(verdict.valid) << spec << " sm_" << sm << " m=" << m << ": " << verdict.detail;
        EXPECT_GE(config.get("bk"), mma::device_format(format).atom_k());
      }
    }
  }
}

// ---- layouts ----

// Raw 8-bit weights (int8 on s8, e4m3 and e5m2 on fp8) are stored as core matrices, the layout both ldmatrix and a
// wgmma shared-memory descriptor read: the 8 columns nsub * 8 + row of a strip, 16 K-bytes r * 16 + j of k-step ks,
// at ((nsub * 4 + ks) * 2 + r) * 128 + row * 16 + j of the atom, codes as they are; atoms strip-major.
TEST(MmaQuantizedLayout, RawEightBitWeightsAreCoreMatrices) {
  for (const char* spec : {"w8a8-int8-ch", "w8a8-fp8-ch", "w8a8-e5m2-e5m2", "w8a8-fp8-block128x128"}) {
    const FormatSpec format = FormatSpec::parse(spec);
    ASSERT_TRUE(mma::device_format(format).core_matrix_atoms()) << spec;
    const int64_t n = 128, k = 256;  // one 128 x 128 block column, two atoms per strip
    QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 3), n, k);
    for (size_t i = 0; i < weights.codes.size(); ++i) weights.codes[i] = static_cast<uint8_t>(i * 37 + 11);
    const std::vector<uint8_t> bytes = mma_family().prepack_weights(weights, any_config()).at("weights");
    ASSERT_EQ(bytes.size(), size_t(n * k)) << spec;
    for (int64_t column = 0; column < n; ++column) {
      for (int64_t depth = 0; depth < k; ++depth) {
        const int64_t strip = column / 16, nsub = column % 16 / 8, row = column % 8;
        const int64_t atom = depth / 128, ks = depth % 128 / 32, r = depth % 32 / 16, j = depth % 16;
        const size_t offset = static_cast<size_t>((strip * (k / 128) + atom) * 2048 + ((nsub * 4 + ks) * 2 + r) * 128 + row * 16 + j);
        ASSERT_EQ(bytes[offset], weights.codes[static_cast<size_t>(column * k + depth)]) << spec << " n " << column << " k " << depth;
      }
    }
  }
  EXPECT_FALSE(mma::device_format(FormatSpec::parse("w4a8-int4-int8")).core_matrix_atoms());
  EXPECT_FALSE(mma::device_format(FormatSpec::parse("w8a16-int8-ch")).core_matrix_atoms());
}

// What the tma family's ss=1 wgmma reads: the slot holds a tile's atoms atom-major ([atom][strip], 2048 bytes each),
// and the A operand of consumer warpgroup g at k-step s is a no-swizzle K-major descriptor starting at
// (s / 4 * strips + 4 g) * 2048 + (s % 4) * 256 with LBO 128 and SBO 1024, whose canonical layout (PTX ISA, matrix
// descriptor) puts row m, K-byte b at start + (m / 8) SBO + (b / 16) LBO + (m % 8) 16 + b % 16. That must be
// W[64 g + m][s * 32 + b] for every row and byte of every k-step.
TEST(MmaQuantizedLayout, SharedMemoryDescriptorsReadTheWeightsOfEachKStep) {
  const FormatSpec format = FormatSpec::parse("w8a8-fp8-ch");
  const int64_t n = 128, k = 256;  // one tile of bn = 128 (two consumer warpgroups), bk = 256 (two atoms per strip)
  QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 5), n, k);
  for (size_t i = 0; i < weights.codes.size(); ++i) weights.codes[i] = static_cast<uint8_t>(i * 131 + 7);
  const std::vector<uint8_t> packed = mma_family().prepack_weights(weights, any_config()).at("weights");
  const int strips = 8, atoms = 2, atom_bytes = 2048;
  std::vector<uint8_t> slot(static_cast<size_t>(strips * atoms * atom_bytes));
  for (int atom = 0; atom < atoms; ++atom) {
    for (int strip = 0; strip < strips; ++strip) {  // the producer's copy `atom * strips + strip`
      std::memcpy(slot.data() + (atom * strips + strip) * atom_bytes, packed.data() + (strip * atoms + atom) * atom_bytes, atom_bytes);
    }
  }
  for (int g = 0; g < 2; ++g) {
    for (int step = 0; step < k / 32; ++step) {
      const int start = (step / 4 * strips + 4 * g) * atom_bytes + (step % 4) * 256;
      for (int m = 0; m < 64; ++m) {
        for (int b = 0; b < 32; ++b) {
          const int address = start + (m / 8) * 1024 + (b / 16) * 128 + (m % 8) * 16 + b % 16;
          ASSERT_EQ(slot[static_cast<size_t>(address)], weights.codes[static_cast<size_t>((64 * g + m) * k + step * 32 + b)])
              << "warpgroup " << g << " k-step " << step << " row " << m << " byte " << b;
        }
      }
    }
  }
}

// int4 on s8: the two registers of an n8 tile share a word, lane byte v = code(r = 0) | code(r = 1) << 4, offset
// binary; the device turns them into 16 * code.
TEST(MmaQuantizedLayout, Int4OnInt8IsSixteenTimesTheCode) {
  const FormatSpec format = FormatSpec::parse("w4a8-int4-int8");
  const mma::DeviceFormat device = mma::device_format(format);
  EXPECT_EQ(device.compute, dv::kElementS8);
  EXPECT_EQ(device.value_factor(), 1.0 / 16);
  EXPECT_TRUE(device.offset_codes());
  for (uint32_t code = 0; code < 16; ++code) {
    const int value = code >= 8 ? int(code) - 16 : int(code);
    const uint32_t stored = code ^ 8u;
    const uint32_t operand = dv::operand_bits::integer_operand(stored * 0x01010101u, 8, 4);
    EXPECT_EQ(static_cast<int8_t>(operand & 0xFF), 16 * value) << code;
    EXPECT_EQ(operand, (operand & 0xFF) * 0x01010101u);
  }
  // int2 on s4 (w2a4): 4 * code in each nibble.
  for (uint32_t code = 0; code < 4; ++code) {
    const int value = code >= 2 ? int(code) - 4 : int(code);
    const uint32_t operand = dv::operand_bits::integer_operand((code ^ 2u) * 0x11111111u, 4, 2);
    const int nibble = static_cast<int>(operand & 0xF);
    EXPECT_EQ(nibble >= 8 ? nibble - 16 : nibble, 4 * value) << code;
  }
}

// e2m1 into e4m3: every code moves bit for bit and means its value times 2^(1 - 7).
TEST(MmaQuantizedLayout, Fp4IntoE4m3IsExact) {
  const ElementType e2m1 = ElementType::floating(2, 1), e4m3 = ElementType::floating(4, 3), e5m2 = ElementType::floating(5, 2);
  for (uint32_t code = 0; code < 16; ++code) {
    const uint32_t operand = dv::operand_bits::float_operand(code * 0x01010101u, 4, 1, 3);
    ASSERT_EQ(operand, (operand & 0xFF) * 0x01010101u);
    EXPECT_EQ(decode(e4m3, operand & 0xFF), std::ldexp(decode(e2m1, code), -6)) << code;
    const uint32_t into_e5m2 = dv::operand_bits::float_operand(code, 4, 1, 2);
    EXPECT_EQ(decode(e5m2, into_e5m2), std::ldexp(decode(e2m1, code), -14)) << code;
  }
  const ElementType e3m2 = ElementType::floating(3, 2);
  for (uint32_t code = 0; code < 64; ++code) {
    EXPECT_EQ(decode(e4m3, dv::operand_bits::float_operand(code, 6, 2, 3)), std::ldexp(decode(e3m2, code), -4)) << code;
  }
  EXPECT_EQ(mma::device_format(FormatSpec::parse("w4a8-fp4-fp8")).value_factor(), 64.0);
}

// int4 on fp8 by byte permutation (the tma family's conversion, int4_fp8_pair with prmt emulated): every pair of codes
// in every byte of a word becomes the exact fp8 value q = code - 8 in the lane of its register, e4m3 and e5m2.
TEST(MmaQuantizedLayout, Int4OnFp8ByLookupIsExact) {
  const ElementType e4m3 = ElementType::floating(4, 3), e5m2 = ElementType::floating(5, 2);
  auto permute = [](uint32_t a, uint32_t b, uint32_t selector) { return dv::operand_bits::byte_permute(a, b, selector); };
  EXPECT_EQ(dv::operand_bits::byte_permute(0x33221100u, 0x77665544u, 0x7140u), 0x77114400u);
  EXPECT_EQ(dv::operand_bits::byte_permute(0x00800000u, 0u, 0x0a29u), 0x00FF8000u);  // top selector bit: sign of the byte
  for (int value = -8; value <= 8; ++value) {
    EXPECT_EQ(decode(e4m3, dv::operand_bits::fp8_byte_of_integer(value, false)), value) << value;
    EXPECT_EQ(decode(e5m2, dv::operand_bits::fp8_byte_of_integer(value, true)), value) << value;
  }
  for (const bool to_e5m2 : {false, true}) {
    for (uint32_t low = 0; low < 16; ++low) {
      for (uint32_t high = 0; high < 16; ++high) {
        // Byte i of the word: codes (low + i) % 16 and (high + 3 i) % 16, so every lane sees every pair.
        uint32_t word = 0;
        for (int i = 0; i < 4; ++i) word |= (((low + i) % 16) | ((high + 3 * i) % 16) << 4) << (8 * i);
        uint32_t r0 = 0, r1 = 0;
        dv::operand_bits::int4_fp8_pair(word, to_e5m2, permute, r0, r1);
        for (int i = 0; i < 4; ++i) {
          const ElementType& type = to_e5m2 ? e5m2 : e4m3;
          EXPECT_EQ(decode(type, (r0 >> (8 * i)) & 0xFF), static_cast<double>((low + i) % 16) - 8) << word << " lane " << i;
          EXPECT_EQ(decode(type, (r1 >> (8 * i)) & 0xFF), static_cast<double>((high + 3 * i) % 16) - 8) << word << " lane " << i;
        }
      }
    }
  }
}

// Activations: int8/fp8 codes as bytes, int4 two per byte (lower k low), scales f32 per row or [group][row].
TEST(MmaQuantizedLayout, Activations) {
  const int64_t m = 3, k = 256;
  const std::vector<float> values = random_normal(static_cast<size_t>(m * k), 5);
  {
    const FormatSpec format = FormatSpec::parse("w4a4-int4-ch");
    const QuantizedActivations a = quantize_activations(format, values, m, k);
    const PackedBuffers packed = mma_family().prepack_activations(a, any_config());
    ASSERT_EQ(packed.at("a").size(), size_t(m * k / 2));
    for (int64_t i = 0; i < m * k; ++i) {
      ASSERT_EQ((packed.at("a")[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0xFu, a.codes[static_cast<size_t>(i)] & 0xFu) << i;
    }
    ASSERT_EQ(packed.at("a_scales").size(), size_t(m * 4));
    for (int64_t row = 0; row < m; ++row) EXPECT_EQ(load_f32(packed.at("a_scales"), static_cast<size_t>(row)), a.scales.at(row, 0));
  }
  {
    const FormatSpec format = FormatSpec::parse("w8a8-fp8-block128x128");
    const QuantizedActivations a = quantize_activations(format, values, m, k);
    const PackedBuffers packed = mma_family().prepack_activations(a, any_config());
    ASSERT_EQ(packed.at("a").size(), size_t(m * k));
    for (int64_t i = 0; i < m * k; ++i) ASSERT_EQ(packed.at("a")[static_cast<size_t>(i)], a.codes[static_cast<size_t>(i)]);
    ASSERT_EQ(packed.at("a_scales").size(), size_t(2 * m * 4));
    for (int64_t group = 0; group < 2; ++group) {
      for (int64_t row = 0; row < m; ++row) {
        EXPECT_EQ(load_f32(packed.at("a_scales"), static_cast<size_t>(group * m + row)), a.scales.at(row, group * 128));
      }
    }
  }
  {
    const FormatSpec format = FormatSpec::parse("w8a8-int8-tensor");
    const QuantizedActivations a = quantize_activations(format, values, m, k);
    const PackedBuffers packed = mma_family().prepack_activations(a, any_config());
    for (int64_t row = 0; row < m; ++row) EXPECT_EQ(load_f32(packed.at("a_scales"), static_cast<size_t>(row)), a.scales.values[0]);
  }
  {
    const QuantizedActivations a = quantize_activations(FormatSpec::parse("w8a8-int8-ch:act-scale=none"), values, m, k);
    EXPECT_EQ(mma_family().prepack_activations(a, any_config()).count("a_scales"), 0u);
  }
}

// Block scales (Gn x Gk) become one f32 per (K group, column); group scales keep their order; both are divided by the
// operand factor (int4 on s8: 16).
TEST(MmaQuantizedLayout, AccumulatorScales) {
  const FormatSpec format = FormatSpec::parse("w4a8-int4-g128-int8");
  const int64_t n = 32, k = 256;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 8, 0.0f, 0.05f), n, k);
  const PackedBuffers packed = mma_family().prepack_weights(weights, any_config());
  ASSERT_EQ(packed.at("scales").size(), size_t(2 * n * 4));
  for (int64_t group = 0; group < 2; ++group) {
    for (int64_t column = 0; column < n; ++column) {
      EXPECT_EQ(load_f32(packed.at("scales"), static_cast<size_t>(group * n + column)) * 16.0f, weights.scales.at(column, group * 128));
    }
  }
  EXPECT_EQ(load_f32(packed.at("global_scale"), 0), 1.0f);
  const FormatSpec block = FormatSpec::parse("w8a8-int8-block128x128");
  const QuantizedWeights block_weights = quantize_weights(block, random_normal(256 * 256, 9, 0.0f, 0.05f), 256, 256);
  const PackedBuffers block_packed = mma_family().prepack_weights(block_weights, any_config());
  ASSERT_EQ(block_packed.at("scales").size(), size_t(2 * 256 * 4));
  for (int64_t column : {0, 127, 128, 255}) {
    EXPECT_EQ(load_f32(block_packed.at("scales"), static_cast<size_t>(256 + column)), block_weights.scales.at(column, 128));
  }
}

}  // namespace
}  // namespace qtune

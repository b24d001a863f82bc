// The bsmma family's host side: the operands and scale words it prepacks sit where sm_120a's block-scaled mma.sync
// (m16n8k64, kind::mxf4nvf4) reads them. A model of the instruction written from the PTX ISA's fragment tables — lane
// by lane, register by register, independent of the packer's element-to-slot mapping — multiplies the packed buffers,
// and its product must equal the CPU reference of the quantized values. Also: unpack(prepack(w)) == w, and the rules.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <random>

#include "kernels/codec.hpp"
#include "kernels/device/gemm/abi.cuh"
#include "kernels/error.hpp"
#include "kernels/families/block_scaled_family.hpp"
#include "kernels/family.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"

namespace qtune {
namespace {

namespace dv = qtune::device;

// e2m1 per the PTX ISA / OCP MX: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0.
float e2m1_value(uint32_t nibble) {
  static const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (nibble & 8u ? -1.0f : 1.0f) * magnitudes[nibble & 7u];
}
// ue8m0: 2^(bits - 127); ue4m3: e4m3 with no sign (bias 7, subnormals below exponent 1).
float ue8m0_value(uint32_t bits) { return std::ldexp(1.0f, static_cast<int>(bits) - 127); }
float ue4m3_value(uint32_t bits) {
  const int exponent = static_cast<int>((bits >> 3) & 0xF), mantissa = static_cast<int>(bits & 7);
  return exponent == 0 ? std::ldexp(static_cast<float>(mantissa) / 8.0f, -6)
                       : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

uint32_t word_at(const std::vector<uint8_t>& bytes, uint64_t offset) {
  uint32_t word = 0;
  std::memcpy(&word, bytes.data() + offset, 4);
  return word;
}
float f32_at(const PackedBuffers& packed, const std::string& name) {
  float value = 1.0f;
  if (const auto found = packed.find(name); found != packed.end()) std::memcpy(&value, found->second.data(), 4);
  return value;
}

// mma.sync.m16n8k64.row.col.kind::mxf4nvf4.block_scale (scale_vec::4X or 2X), byte id 0, thread id 0, as the PTX ISA
// lays out its fragments: register r of lane 4g + t holds A rows g + 8 (r % 2), K 32 (r / 2) + 8t .. + 7 (nibble i is
// K + i); B registers 0 and 1 hold column g at K 8t.. and 32 + 8t..; the scale words of rows g and g + 8 come from
// lanes 4g and 4g + 1, of column g from lane 4g; byte j of a word scales K chunk j. Returns D[16][8] (f32).
std::vector<float> model_mma(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], const uint32_t (&scale_a)[32],
                             const uint32_t (&scale_b)[32], int scale_vec) {
  float a_values[16][64] = {}, b_values[8][64] = {}, a_scale[16][4] = {}, b_scale[8][4] = {};
  auto scale_value = [&](uint32_t word, int byte) {
    const uint32_t bits = (word >> (8 * byte)) & 0xFF;
    return scale_vec == 4 ? ue4m3_value(bits) : ue8m0_value(bits);
  };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 8; ++i) a_values[g + 8 * (r % 2)][32 * (r / 2) + 8 * t + i] = e2m1_value((a[lane][r] >> (4 * i)) & 0xF);
    }
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 8; ++i) b_values[g][32 * r + 8 * t + i] = e2m1_value((b[lane][r] >> (4 * i)) & 0xF);
    }
    for (int j = 0; j < scale_vec; ++j) {
      if (t == 0) a_scale[g][j] = scale_value(scale_a[lane], j);
      if (t == 1) a_scale[g + 8][j] = scale_value(scale_a[lane], j);
      if (t == 0) b_scale[g][j] = scale_value(scale_b[lane], j);
    }
  }
  const int chunk = 64 / scale_vec;
  std::vector<float> d(16 * 8, 0.0f);
  for (int row = 0; row < 16; ++row) {
    for (int column = 0; column < 8; ++column) {
      double sum = 0;
      for (int kk = 0; kk < 64; ++kk) {
        sum += static_cast<double>(a_values[row][kk]) * a_scale[row][kk / chunk] * b_values[column][kk] * b_scale[column][kk / chunk];
      }
      d[static_cast<size_t>(row * 8 + column)] = static_cast<float>(sum);
    }
  }
  return d;
}

// mma.sync.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X with byte id `byte_id`, as the PTX ISA lays out
// its fragments: register r of lane 4g + t holds A rows g + 8 (r % 2), K 16 (r / 2) + 4t .. + 3 (byte i is K + i), B
// registers 0 and 1 hold column g at K 4t.. and 16 + 4t..; fp4 operands sit in 8-bit containers, value in bits 5..2;
// the ue8m0 scale of row g is byte `byte_id` of lane 4g's word, of row g + 8 of lane 4g + 1's, of column g of lane 4g's.
std::vector<float> model_mma_k32(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], const uint32_t (&scale_a)[32],
                                 const uint32_t (&scale_b)[32], int byte_id, const ElementType& a_type,
                                 const ElementType& b_type) {
  auto value = [](const ElementType& type, uint32_t byte) {
    if (type.bits == 4) {
      EXPECT_EQ(byte & 0xC3u, 0u) << "an fp4 container's bits outside 5..2 are set";
      return e2m1_value((byte >> 2) & 0xF);
    }
    return decode(type, byte);
  };
  float a_values[16][32] = {}, b_values[8][32] = {}, a_scale[16] = {}, b_scale[8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r) {
      for (int i = 0; i < 4; ++i) a_values[g + 8 * (r % 2)][16 * (r / 2) + 4 * t + i] = value(a_type, (a[lane][r] >> (8 * i)) & 0xFF);
    }
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 4; ++i) b_values[g][16 * r + 4 * t + i] = value(b_type, (b[lane][r] >> (8 * i)) & 0xFF);
    }
    const uint32_t byte = static_cast<uint32_t>(8 * byte_id);
    if (t == 0) a_scale[g] = ue8m0_value((scale_a[lane] >> byte) & 0xFF);
    if (t == 1) a_scale[g + 8] = ue8m0_value((scale_a[lane] >> byte) & 0xFF);
    if (t == 0) b_scale[g] = ue8m0_value((scale_b[lane] >> byte) & 0xFF);
  }
  std::vector<float> d(16 * 8, 0.0f);
  for (int row = 0; row < 16; ++row) {
    for (int column = 0; column < 8; ++column) {
      double sum = 0;
      for (int kk = 0; kk < 32; ++kk) sum += static_cast<double>(a_values[row][kk]) * a_scale[row] * b_values[column][kk] * b_scale[column];
      d[static_cast<size_t>(row * 8 + column)] = static_cast<float>(sum);
    }
  }
  return d;
}

// What the kernel does to a word of eight packed fp4 weight codes before kind::mxf8f6f4: the low four codes into the
// first register's four 8-bit containers, the high four into the second's (code in bits 5..2).
std::pair<uint32_t, uint32_t> fp4_containers(uint32_t word) {
  uint32_t low = 0, high = 0;
  for (int i = 0; i < 4; ++i) {
    low |= ((word >> (4 * i)) & 0xFu) << (8 * i + 2);
    high |= ((word >> (16 + 4 * i)) & 0xFu) << (8 * i + 2);
  }
  return {low, high};
}

// What the kernel computes from the packed buffers (its loads, per block and lane, as block_scaled_mma.cuh reads
// them), through the instruction model; the epilogue's tensor scales applied; rows past M dropped.
std::vector<float> kernel_model(const PackedBuffers& activations, const PackedBuffers& weights, const FormatSpec& format,
                                int64_t m, int64_t n, int64_t k) {
  const block_scaled::Variant variant = *block_scaled::variant_of(format);
  const int64_t steps = k / 64, m_tiles = (m + 15) / 16;
  const uint64_t a_lane = static_cast<uint64_t>(variant.activation_bits) * 4, b_lane = static_cast<uint64_t>(variant.weight_bits) * 2;
  const ElementType a_type = format.activation == ActivationType::E5M2 ? ElementType::parse("e5m2") : ElementType::parse("e4m3");
  std::vector<float> out(static_cast<size_t>(m * n), 0.0f);
  const float global = f32_at(weights, "global_scale") * f32_at(activations, "a_global_scale");
  for (int64_t mt = 0; mt < m_tiles; ++mt) {
    for (int64_t nt = 0; nt < n / 8; ++nt) {
      std::vector<float> acc(16 * 8, 0.0f);
      for (int64_t step = 0; step < steps; ++step) {
        const uint64_t a_block = static_cast<uint64_t>(mt * steps + step), b_block = static_cast<uint64_t>(nt * steps + step);
        uint32_t sa[32], sb[32];
        for (int lane = 0; lane < 32; ++lane) {
          sa[lane] = word_at(activations.at("a_scales"), a_block * 128 + lane * 4);
          sb[lane] = word_at(weights.at("scales"), b_block * 32 + (lane / 4) * 4);
        }
        // The instructions of one K step of 64: one m16n8k64, or two m16n8k32 (halves h = 0, 1).
        const int halves = variant.kind == dv::kBlockScaledMxf4Nvf4 ? 1 : 2;
        for (int h = 0; h < halves; ++h) {
          uint32_t a[32][4], b[32][2];
          for (int lane = 0; lane < 32; ++lane) {
            const uint64_t a_base = a_block * 32 * a_lane + lane * a_lane + static_cast<uint64_t>(h) * 16;
            const uint64_t b_base = b_block * 32 * b_lane + lane * b_lane;
            for (int r = 0; r < 4; ++r) a[lane][r] = word_at(activations.at("a"), a_base + r * 4);
            if (variant.kind == dv::kBlockScaledMxf4Nvf4 || variant.weight_bits == 8) {
              for (int r = 0; r < 2; ++r) b[lane][r] = word_at(weights.at("weights"), b_base + static_cast<uint64_t>(h) * 8 + r * 4);
            } else {
              const auto [low, high] = fp4_containers(word_at(weights.at("weights"), b_base + static_cast<uint64_t>(h) * 4));
              b[lane][0] = low;
              b[lane][1] = high;
            }
          }
          const std::vector<float> d = variant.kind == dv::kBlockScaledMxf4Nvf4
                                           ? model_mma(a, b, sa, sb, variant.scale_vec)
                                           : model_mma_k32(a, b, sa, sb, h, a_type, format.weight);
          for (size_t e = 0; e < d.size(); ++e) acc[e] += d[e];
        }
      }
      for (int row = 0; row < 16; ++row) {
        if (mt * 16 + row >= m) continue;
        for (int column = 0; column < 8; ++column) {
          out[static_cast<size_t>((mt * 16 + row) * n + nt * 8 + column)] = acc[static_cast<size_t>(row * 8 + column)] * global;
        }
      }
    }
  }
  return out;
}

std::vector<float> random_values(size_t count, float sigma, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator);
  return values;
}

class BlockScaledPacking : public ::testing::TestWithParam<const char*> {};

TEST_P(BlockScaledPacking, TheInstructionModelOfThePackedBuffersIsTheReference) {
  const FormatSpec format = FormatSpec::parse(GetParam());
  const auto variant = block_scaled::variant_of(format);
  ASSERT_TRUE(variant.has_value());
  // M not a multiple of 16, several m16/n8 tiles and K steps.
  const int64_t m = 37, n = 48, k = 256;
  const QuantizedWeights weights = quantize_weights(format, random_values(static_cast<size_t>(n * k), 0.02f, 1), n, k);
  const QuantizedActivations activations =
      quantize_activations(format, random_values(static_cast<size_t>(m * k), 1.0f, 2), m, k);
  const PackedBuffers packed_weights = block_scaled::prepack_weights(weights);
  const PackedBuffers packed_activations = block_scaled::prepack_activations(activations);
  EXPECT_EQ(packed_weights.at("weights").size(), block_scaled::weight_bytes(*variant, n, k));
  EXPECT_EQ(packed_activations.at("a").size(), block_scaled::activation_bytes(*variant, m, k));
  EXPECT_EQ(packed_activations.count("a_global_scale"), variant->activation_global_scale ? 1u : 0u);

  const std::vector<float> model = kernel_model(packed_activations, packed_weights, format, m, n, k);
  const ReferenceResult reference = reference_gemm(activations, weights);
  const double error = relative_error(model, reference.unrounded);
  EXPECT_LT(error, 1e-5) << format.to_string();

  // A wrong scale byte order is caught: swapping two bytes of every weight scale word changes the product.
  PackedBuffers swapped = packed_weights;
  int changed_words = 0;
  for (size_t word = 0; word + 4 <= swapped.at("scales").size(); word += 4) {
    changed_words += swapped["scales"][word] != swapped["scales"][word + 1];
    std::swap(swapped["scales"][word], swapped["scales"][word + 1]);
  }
  ASSERT_GT(changed_words, 0);
  EXPECT_GT(relative_error(kernel_model(packed_activations, swapped, format, m, n, k), reference.unrounded), 1e-3);
}

TEST_P(BlockScaledPacking, UnpackGivesTheWeightsBack) {
  const FormatSpec format = FormatSpec::parse(GetParam());
  const int64_t n = 24, k = 192;
  const QuantizedWeights weights = quantize_weights(format, random_values(static_cast<size_t>(n * k), 0.02f, 3), n, k);
  const QuantizedWeights back = block_scaled::unpack_weights(block_scaled::prepack_weights(weights), format, n, k);
  EXPECT_EQ(back.codes, weights.codes);
  EXPECT_EQ(back.scales.bits, weights.scales.bits);
  EXPECT_EQ(back.global_scale, weights.global_scale);
}

// W4A4 NVFP4 and MXFP4 (kind::mxf4nvf4), MX W8A8 e4m3 and W4A8 fp4 x fp8 (kind::mxf8f6f4).
INSTANTIATE_TEST_SUITE_P(Formats, BlockScaledPacking,
                         ::testing::Values("w4a4-nvfp4", "w4a4-mxfp4", "w8a8-fp8-g32:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0",
                                           "w4a8-fp4-g32-fp8:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0"),
                         [](const ::testing::TestParamInfo<const char*>& format) {
                           std::string name;
                           for (const char c : std::string(format.param).substr(0, std::string(format.param).find(':'))) {
                             name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           }
                           return name;
                         });

TEST(BlockScaledFamily, RunsBlockScaledFormatsOnlyOnSm120AndSm121) {
  const KernelFamily& family = find_family("bsmma");
  for (const char* spec : {"w4a4-nvfp4", "w4a4-mxfp4", "w8a8-fp8-g32:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0",
                           "w4a8-fp4-g32-fp8:scale=ue8m0,act-scale=g32,act-scale-type=ue8m0"}) {
    const FormatSpec format = FormatSpec::parse(spec);
    EXPECT_TRUE(family.supports(format, 120).supported) << spec;
    EXPECT_TRUE(family.supports(format, 121).supported) << spec;
    const ArchSupport hopper = family.supports(format, 90);
    EXPECT_FALSE(hopper.supported);
    EXPECT_NE(hopper.reason.find("sm_120a"), std::string::npos) << hopper.reason;
  }
  // fp4 activations: this family is the one that runs them on sm_120.
  for (const char* spec : {"w4a4-nvfp4", "w4a4-mxfp4"}) EXPECT_EQ(packing_family(FormatSpec::parse(spec), 120).name(), "bsmma");
  const ArchSupport weight_only = family.supports(FormatSpec::parse("w4a16-int4-ch"), 120);
  EXPECT_FALSE(weight_only.supported);
  EXPECT_NE(weight_only.reason.find("e2m1, e4m3 or e5m2 weights"), std::string::npos) << weight_only.reason;
  // Per-token fp8 scales are not block scales.
  EXPECT_FALSE(family.supports(FormatSpec::parse("w8a8-fp8-ch"), 120).supported);
}

TEST(BlockScaledFamily, DefaultConfigsPassTheRulesAndTheRulesHaveNames) {
  const KernelFamily& family = find_family("bsmma");
  const ArchLimits limits = ArchLimits::for_sm(120);
  for (const char* spec : {"w4a4-nvfp4", "w4a4-mxfp4"}) {
    for (const int64_t m : {1, 16, 37, 64, 256, 4096}) {
      for (const auto& [n, k] : {std::pair<int64_t, int64_t>{8192, 8192}, {5120, 13824}, {96, 64}}) {
        const Problem problem{FormatSpec::parse(spec), m, n, k};
        const KernelConfig config = family.default_config(problem, limits);
        const RuleVerdict verdict = family.check(config, problem, limits);
        EXPECT_TRUE(verdict.valid) << problem.to_string() << " " << config.to_string() << ": " << verdict.detail;
      }
    }
  }
  const Problem problem{FormatSpec::parse("w4a4-nvfp4"), 16, 8192, 8200};
  EXPECT_EQ(family.check(family.default_config({problem.format, 16, 8192, 8192}, limits), problem, limits).rule,
            "k-multiple-of-64");
  const Problem hopper{FormatSpec::parse("w4a4-nvfp4"), 16, 8192, 8192};
  EXPECT_EQ(family.check(family.default_config(hopper, limits), hopper, ArchLimits::for_sm(90)).rule,
            "format-unsupported-on-arch");
  // A warp tile too large for the registers is refused on the host, as the device's static_assert would.
  EXPECT_EQ(family.check(KernelConfig::parse("bm=64,bn=128,wm=1,wn=2", "bsmma"), {hopper.format, 64, 8192, 8192}, limits).rule,
            "registers-per-thread");
  EXPECT_THROW(family.instantiation_source(KernelConfig::parse("bm=16,bn=128,wm=1,wn=4", "bsmma"), hopper.format, "sm_120"),
               InputError);
}

}  // namespace
}  // namespace qtune

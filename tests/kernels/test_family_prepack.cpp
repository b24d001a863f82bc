// Prepacked layouts of the mma family: unpack(prepack(x)) gives x back, the int4 layout puts each code exactly
// where the device dequantizer (kernels/device/gemm/dequant.cuh) reads it, and the weights the kernel computes from
// the packed buffers (with its f16/bf16 rounding) are the quantized weights, finite. Quantized activations:
// test_family_quantized.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/families/mma_family.hpp"
#include "kernels/families/mma_layout.hpp"
#include "kernels/family.hpp"
#include "kernels/quantize.hpp"

namespace qtune {
namespace {

// Weight-only specs beyond the presets: every bit width, both zero-point kinds, float types, bf16, scale types.
const char* kExtraSpecs[] = {
    "w1a16-int1-ch",         "w2a16-int2-g64",          "w3a16-int3-g32",          "w5a16-int5-ch",
    "w6a16-int6-g128",       "w7a16-int7-g64",          "w8a16-int8-g128-bf16",    "w2a16-uint2-g64-zp",
    "w5a16-uint5-g32-fzp",   "w8a16-uint8-ch-zp-bf16",  "w8a16-uint8-g64-zp-bf16", "w7a16-uint7-g32-zp-bf16",
    "w4a16-uint4-ch-fzp",    "w4a16-e2m1-g32",          "w6a16-e3m2-ch",           "w6a16-e2m3-g64",
    "w8a16-e4m3-ch",         "w8a16-e5m2-g128",         "w8a16-e4m3-ch-bf16",      "w4a16-e2m1-g32-bf16",
    "w5a16-e2m2-g64",        "w8a16-e3m4-ch-bf16",      "w4a16-int4-tensor",       "w4a16-int4-block64x128",
    "w4a16-int4-g128:scale=bf16", "w4a16-int4-ch:out=bf16", "w4a16-int4-g64:scale=f32",
};

std::vector<std::string> weight_only_specs() {
  std::vector<std::string> specs;
  for (const FormatPreset& preset : format_presets()) {
    const FormatSpec format = FormatSpec::parse(preset.name);
    if (!format.activation_is_quantized() && !mma::unsupported_format_reason(format)) specs.push_back(preset.name);
  }
  for (const char* spec : kExtraSpecs) specs.push_back(spec);
  return specs;
}

class MmaPrepack : public ::testing::TestWithParam<std::string> {};

TEST_P(MmaPrepack, UnpackGivesTheWeightsBack) {
  const FormatSpec format = FormatSpec::parse(GetParam());
  ASSERT_FALSE(mma::unsupported_format_reason(format)) << *mma::unsupported_format_reason(format);
  const int64_t n = 128, k = 512;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 7, 0.0f, 0.05f), n, k);
  const KernelConfig config = KernelConfig::parse("bm=16,bn=128,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0");
  const PackedBuffers packed = mma_family().prepack_weights(weights, config);
  for (const BufferSpec& buffer : mma_family().buffers(config, Problem{format, 16, n, k, false})) {
    if (buffer.role != BufferRole::Weights) continue;
    ASSERT_TRUE(packed.count(buffer.name)) << buffer.name;
    EXPECT_EQ(packed.at(buffer.name).size(), buffer.bytes) << buffer.name;
  }
  const QuantizedWeights unpacked = mma_family().unpack_weights(packed, format, n, k, config);

  // Codes come back bit for bit (within the format's width).
  const uint32_t mask = (1u << format.weight.bits) - 1u;
  int code_mismatches = 0;
  for (size_t i = 0; i < weights.codes.size(); ++i) {
    if ((weights.codes[i] & mask) != (unpacked.codes[i] & mask) && code_mismatches++ < 5) {
      ADD_FAILURE() << "code " << i << " (n=" << i / k << ", k=" << i % k << "): " << int(weights.codes[i] & mask)
                    << " became " << int(unpacked.codes[i] & mask);
    }
  }
  EXPECT_EQ(code_mismatches, 0);

  // Dequantized values agree up to the rounding of scales to the compute type (exact for f16 scales on f16); a float
  // zero point travels as -(zero * scale) in the compute type, so its rounding scales with the group's range.
  const double unit = format.activation == ActivationType::F16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  const std::vector<float> original = dequantize(weights);
  const std::vector<float> recovered = dequantize(unpacked);
  double largest = 0;
  for (float value : original) largest = std::max(largest, std::fabs(double(value)));
  ASSERT_GT(largest, 0.0);
  int value_mismatches = 0;
  for (size_t i = 0; i < original.size(); ++i) {
    const double slack = format.zero_point == ZeroPoint::Float ? largest : 0.01 * largest;
    const double allowed = unit * (std::fabs(double(original[i])) + slack);
    if (std::fabs(double(original[i]) - double(recovered[i])) > allowed && value_mismatches++ < 5) {
      ADD_FAILURE() << "value " << i << ": " << original[i] << " became " << recovered[i];
    }
  }
  EXPECT_EQ(value_mismatches, 0);
}

// What the kernel multiplies the activations by, emulated from the packed buffers with the device's compute-type
// rounding: finite (an f16 overflow shows as inf) and equal to the quantized weights up to that rounding.
TEST_P(MmaPrepack, KernelWeightsAreTheQuantizedWeights) {
  const FormatSpec format = FormatSpec::parse(GetParam());
  const int64_t n = 64, k = 512;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 11, 0.0f, 0.05f), n, k);
  const KernelConfig config = KernelConfig::parse("bm=16,bn=64,bk=128,wm=1,wn=4,wk=1,stages=4,split=1,raster=0");
  const std::vector<float> kernel = mma::kernel_weights(mma_family().prepack_weights(weights, config), format,
                                                        mma::device_format(format), n, k);
  const std::vector<float> expected = dequantize(weights);
  ASSERT_EQ(kernel.size(), expected.size());
  const double unit = format.activation == ActivationType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  double largest = 0;
  for (float value : expected) largest = std::max(largest, std::fabs(double(value)));
  int mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    // One rounding of value * scale (+ zero * scale for float zero points, whose rounding scales with the range).
    const double slack = format.zero_point == ZeroPoint::Float ? 2 * largest : 1e-3 * largest;
    const double allowed = 2 * unit * (std::fabs(double(expected[i])) + slack);
    if (!(std::fabs(double(kernel[i]) - double(expected[i])) <= allowed) && mismatches++ < 5) {
      ADD_FAILURE() << "weight (" << i / k << ", " << i % k << "): the kernel computes " << kernel[i] << ", quantized "
                    << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(WeightOnly, MmaPrepack, ::testing::ValuesIn(weight_only_specs()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name;
                           for (char c : param_info.param) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// An independent statement of the int4 / f16 layout the device reads (dequant.cuh fast path):
// word j of a lane = k-step j; bits [0,4) and [16,20) hold (n = g, k = 16j + 2t) and (g, 16j + 2t + 1);
// bits [4,8)/[20,24): k + 8; bits [8,12)/[24,28): column n = 8 + g; bits [12,16)/[28,32): n = 8 + g, k + 8.
// Codes are offset binary (two's complement code XOR 8).
TEST(MmaPrepackLayout, Int4OnF16MatchesTheDequantizerFieldOrder) {
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch");
  const int64_t n = 32, k = 128;
  QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 3), n, k);
  for (size_t i = 0; i < weights.codes.size(); ++i) weights.codes[i] = static_cast<uint8_t>((i * 7 + i / k) & 15);
  const PackedBuffers packed = mma_family().prepack_weights(weights, KernelConfig::parse("bm=16,bn=16,bk=64,wm=1,wn=1,wk=1,stages=2,split=1,raster=0"));
  const std::vector<uint8_t>& bytes = packed.at("weights");
  ASSERT_EQ(bytes.size(), size_t(n * k / 2));
  const int64_t atoms_k = k / 64;
  for (int64_t strip = 0; strip < n / 16; ++strip) {
    for (int64_t atom = 0; atom < atoms_k; ++atom) {
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int j = 0; j < 4; ++j) {
          uint32_t word;
          std::memcpy(&word, bytes.data() + (strip * atoms_k + atom) * 512 + lane * 16 + j * 4, 4);
          for (int field = 0; field < 4; ++field) {
            for (int half = 0; half < 2; ++half) {
              const int64_t row = strip * 16 + (field / 2) * 8 + g;
              const int64_t column = atom * 64 + j * 16 + (field % 2) * 8 + 2 * t + half;
              const uint32_t expected = (weights.codes[static_cast<size_t>(row * k + column)] & 15u) ^ 8u;
              const uint32_t stored = (word >> (half * 16 + field * 4)) & 15u;
              ASSERT_EQ(stored, expected) << "strip " << strip << " atom " << atom << " lane " << lane << " word " << j
                                          << " field " << field << " half " << half;
            }
          }
        }
      }
    }
  }
}

// Group scales are stored in the compute type, strip-permuted (columns g and g + 8 adjacent), normalised by a power
// of two that moves into the global scale.
TEST(MmaPrepackLayout, GroupScalesArePermutedAndNormalised) {
  const FormatSpec format = FormatSpec::parse("w4a16-int4-g128");
  const int64_t n = 32, k = 256;
  const QuantizedWeights weights = quantize_weights(format, random_normal(static_cast<size_t>(n * k), 5, 0.0f, 0.02f), n, k);
  const PackedBuffers packed = mma_family().prepack_weights(weights, KernelConfig::parse("bm=16,bn=32,bk=128,wm=1,wn=2,wk=1,stages=2,split=1,raster=0"));
  float global;
  std::memcpy(&global, packed.at("global_scale").data(), 4);
  EXPECT_EQ(std::exp2(std::round(std::log2(global))), global) << "the normaliser is a power of two";
  const std::vector<uint8_t>& scales = packed.at("scales");
  ASSERT_EQ(scales.size(), size_t(2 * n * 2));
  for (int64_t group = 0; group < 2; ++group) {
    for (int64_t column = 0; column < n; ++column) {
      uint16_t bits;
      std::memcpy(&bits, scales.data() + (group * n + mma::permuted_column(column)) * 2, 2);
      EXPECT_EQ(f16_bits_to_float(bits) * global, weights.scales.at(column, group * 128)) << column;
    }
  }
  EXPECT_EQ(mma::permuted_column(0), 0);
  EXPECT_EQ(mma::permuted_column(8), 1);
  EXPECT_EQ(mma::permuted_column(1), 2);
  EXPECT_EQ(mma::permuted_column(15), 15);
  EXPECT_EQ(mma::permuted_column(16 + 9), 16 + 3);
}

// e5m2 codes reach 57344, nearly f16's largest value: times a group scale normalised into [1, 2), as integer codes
// have it, the product overflows f16 in the dequantizer (inf on the GPU). Here the largest scale would be 1.9.
TEST(MmaPrepackLayout, E5m2GroupScalesKeepTheF16ProductFinite) {
  const FormatSpec format = FormatSpec::parse("w8a16-e5m2-g128");
  const int64_t n = 16, k = 256;
  std::vector<float> values = random_normal(static_cast<size_t>(n * k), 21, 0.0f, 30.0f);
  for (float& value : values) value = std::clamp(value, -100.0f, 100.0f);
  values[0] = static_cast<float>(1.9 * 112.0);  // scale 1.9 * 112 / 57344 = 1.9 * 2^-9, the largest
  const QuantizedWeights weights = quantize_weights(format, values, n, k);
  ASSERT_EQ(weights.scales.values[0], round_to_f16(static_cast<float>(1.9 * 112.0 / 57344.0)));
  const PackedBuffers packed =
      mma_family().prepack_weights(weights, KernelConfig::parse("bm=16,bn=16,bk=128,wm=1,wn=1,wk=1,stages=2,split=1,raster=0"));
  const std::vector<float> kernel = mma::kernel_weights(packed, format, mma::device_format(format), n, k);
  const std::vector<float> expected = dequantize(weights);
  for (size_t i = 0; i < kernel.size(); ++i) {
    ASSERT_TRUE(std::isfinite(kernel[i])) << "weight " << i << " overflows f16 in the kernel";
    ASSERT_NEAR(kernel[i], expected[i], std::fabs(expected[i]) * 1e-3 + 1e-9) << i;
  }
}

TEST(MmaPrepackLayout, ShapesTheLayoutCannotHoldAreInputErrors) {
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch");
  const KernelConfig config = KernelConfig::parse("bm=16,bn=16,bk=64,wm=1,wn=1,wk=1,stages=2,split=1,raster=0");
  EXPECT_THROW(mma_family().prepack_weights(quantize_weights(format, random_normal(24 * 64, 1), 24, 64), config), InputError);
  EXPECT_THROW(mma_family().prepack_weights(quantize_weights(format, random_normal(16 * 96, 1), 16, 96), config), InputError);
}

TEST(MmaPrepackLayout, ActivationsAndBias) {
  const FormatSpec format = FormatSpec::parse("w4a16-int4-ch:out=bf16");
  const QuantizedActivations activations = quantize_activations(format, random_normal(3 * 64, 9), 3, 64);
  const KernelConfig config = KernelConfig::parse("bm=16,bn=16,bk=64,wm=1,wn=1,wk=1,stages=2,split=1,raster=0");
  const PackedBuffers packed = mma_family().prepack_activations(activations, config);
  ASSERT_EQ(packed.at("a").size(), size_t(3 * 64 * 2));
  uint16_t first;
  std::memcpy(&first, packed.at("a").data(), 2);
  EXPECT_EQ(first, activations.bits16[0]);
  const std::vector<float> bias = {1.5f, -2.25f};
  const std::vector<uint8_t> bias_bytes = mma_family().pack_bias(bias, format);
  ASSERT_EQ(bias_bytes.size(), 4u);
  uint16_t second;
  std::memcpy(&second, bias_bytes.data() + 2, 2);
  EXPECT_EQ(bf16_bits_to_float(second), -2.25f);
}

}  // namespace
}  // namespace qtune

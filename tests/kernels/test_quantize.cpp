// RTN quantization: layout, scale rules and quantize -> dequantize error bounds for every granularity.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/quantize.hpp"

namespace qtune {
namespace {

// Normal data with a few outliers, so the scale cells see different ranges.
// The largest |value| of `count` values from column `first` of row `row` in a row-major matrix of `k` columns.
double row_amax(const std::vector<float>& matrix, int64_t k, int64_t row, int64_t first, int64_t count) {
  double result = 0;
  for (int64_t c = first; c < first + count; ++c) result = std::max(result, std::fabs(static_cast<double>(matrix[row * k + c])));
  return result;
}

std::vector<float> test_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> values = random_normal(static_cast<size_t>(rows * cols), seed);
  RandomGenerator random(seed + 1000);
  for (int i = 0; i < rows; ++i) values[random.next() % values.size()] *= 8.0f;
  return values;
}

// The scale index for (row, col) written out per granularity, independently of ScaleGrid::index.
int64_t expected_scale_index(const FormatSpec& format, int64_t n, int64_t k, int64_t row, int64_t col) {
  const WeightScaling& scaling = format.weight_scale;
  switch (scaling.granularity) {
    case WeightScaleGranularity::PerTensor: return 0;
    case WeightScaleGranularity::PerChannel: return row;
    case WeightScaleGranularity::PerGroup: return row * (k / scaling.group_k) + col / scaling.group_k;
    case WeightScaleGranularity::PerBlock:
      return (row / scaling.group_n) * (k / scaling.group_k) + col / scaling.group_k;
  }
  (void)n;
  return -1;
}

// Unit roundoff of a scale type (how far rounding a scale can move it, relative).
double unit_roundoff(ScaleType type) {
  switch (type) {
    case ScaleType::F32: return std::ldexp(1.0, -24);
    case ScaleType::F16: return std::ldexp(1.0, -11);
    case ScaleType::BF16: return std::ldexp(1.0, -8);
    case ScaleType::E4M3: return std::ldexp(1.0, -4);
    case ScaleType::UE8M0: return 0.5;
  }
  return 1.0;
}

// Half the spacing of an eXmY type around |x| (x within range), by the closed form 2^(max(e, emin) - M - 1).
double half_spacing(const ElementType& type, double x) {
  const int min_exponent = 1 - type.exponent_bias();
  int exponent = x == 0.0 ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, exponent - type.mantissa_bits - 1);
}

// Checks every element of a quantized matrix against the bound its format promises.
void check_weight_bounds(const std::string& spec_text, int64_t n, int64_t k) {
  SCOPED_TRACE(spec_text);
  FormatSpec format = FormatSpec::parse(spec_text);
  std::vector<float> weights = test_matrix(n, k, 11);
  QuantizedWeights quantized = quantize_weights(format, weights, n, k);
  ASSERT_EQ(quantized.codes.size(), static_cast<size_t>(n * k));
  ASSERT_EQ(quantized.scales.type, format.weight_scale.type);
  std::vector<float> dequantized = dequantize(quantized);
  const ElementType& type = format.weight;
  const bool zero_point = format.zero_point != ZeroPoint::None;
  const double largest = zero_point ? std::ldexp(1.0, type.bits) - 1
                         : type.is_float() ? max_finite(type)
                                           : std::ldexp(1.0, type.bits - 1) - 1;
  int64_t saturated = 0;
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t col = 0; col < k; ++col) {
      const size_t i = static_cast<size_t>(row * k + col);
      const int64_t cell = expected_scale_index(format, n, k, row, col);
      ASSERT_EQ(quantized.scales.index(row, col), cell);
      ASSERT_LT(quantized.codes[i], code_count(type));
      const double scale = static_cast<double>(quantized.scales.values[cell]) * quantized.global_scale;
      ASSERT_GT(scale, 0.0);
      ASSERT_EQ(quantized.scales.values[cell], decode_scale(format.weight_scale.type, quantized.scales.bits[cell]));
      const double w = weights[i];
      const double dq = dequantized[i];
      ASSERT_FLOAT_EQ(static_cast<float>(dq), quantized.dequantize(row, col));
      const double error = std::fabs(w - dq);
      const double slack = 1e-6 * (std::fabs(w) + std::fabs(dq)) + 1e-30;
      double bound = 0.0;
      if (zero_point) {
        const double z = quantized.zero_points[cell];
        ASSERT_GE(z, 0.0);
        ASSERT_LE(z, largest);
        if (format.zero_point == ZeroPoint::Integer) {
          ASSERT_EQ(z, std::round(z));
        }
        // Half a step, plus what rounding the scale (and a float zero point) to the scale type can shift.
        bound = scale * (0.5 + 2 * largest * unit_roundoff(format.weight_scale.type));
      } else if (type.is_integer()) {
        // Half a step, or the clamp at the largest code (only ue8m0's power-of-two scales clamp).
        bound = std::max(scale / 2, std::fabs(w) - largest * scale);
      } else {
        const double x = std::fabs(w) / scale;
        bound = std::max(scale * half_spacing(type, std::min(x, largest)), std::fabs(w) - largest * scale);
      }
      if (!zero_point && std::fabs(w) > largest * scale * (1 + 0x1.0p-10)) ++saturated;
      ASSERT_LE(error, bound + slack) << "w=" << w << " dq=" << dq << " at (" << row << "," << col << ") scale " << scale;
    }
  }
  // f32 and f16 scales are fine enough that the largest value of a cell fits (ue8m0 and e4m3 may clip it).
  if (format.weight_scale.type == ScaleType::F32 || format.weight_scale.type == ScaleType::F16) {
    EXPECT_LE(saturated, n * k / 1000) << "too many values clipped";
  }
}

TEST(Quantize, ErrorBoundsForEveryGranularity) {
  for (const char* spec : {"w4a16-int4-tensor", "w4a16-int4-ch", "w4a16-int4-g32", "w4a16-int4-block16x64",
                           "w8a16-int8-ch", "w2a16-int2-g32", "w8a16-int8-g64-bf16"}) {
    check_weight_bounds(spec, 64, 256);
  }
}

TEST(Quantize, ErrorBoundsWithZeroPoints) {
  for (const char* spec : {"w4a16-int4-g128-zp", "w3a16-int3-g128-zp", "w4a16-int4-g64-fzp", "w4a16-int4-ch-zp",
                           "w8a16-int8-tensor-zp", "w4a16-int4-block32x32-zp", "w2a16-int2-g32-fzp-bf16",
                           "w4a16-int4-g32-zp:scale=ue8m0", "w1a16-int1-g32-zp"}) {
    check_weight_bounds(spec, 64, 256);
  }
}

TEST(Quantize, ErrorBoundsForFloatElements) {
  for (const char* spec : {"w4a16-fp4-g32", "w8a16-fp8-ch", "w8a16-e5m2-tensor", "w6a16-fp6-g32", "w6a16-e2m3-g32",
                           "w8a8-fp8-block128x128", "w8a8-fp8-tensor", "w7a16-e3m3-g64:scale=bf16",
                           "w4a16-fp4-g16+t", "w4a16-fp4-g16:scale=e4m3"}) {
    check_weight_bounds(spec, 128, 256);
  }
}

TEST(Quantize, ErrorBoundsForBlockScaledPresets) {
  for (const char* spec : {"mxfp4", "nvfp4", "mxint4", "w6a16-e3m2-g32:scale=ue8m0", "w8a16-fp8-g32:scale=ue8m0"}) {
    check_weight_bounds(spec, 64, 256);
  }
}

TEST(Quantize, ScalesFollowTheDocumentedRules) {
  const int64_t n = 32;
  const int64_t k = 128;
  std::vector<float> weights = test_matrix(n, k, 5);
  // Per channel int8 with f16 scales: s = round_f16(amax / 127).
  QuantizedWeights int8 = quantize_weights(FormatSpec::parse("w8a16-int8-ch"), weights, n, k);
  ASSERT_EQ(int8.scales.rows, n);
  ASSERT_EQ(int8.scales.cols, 1);
  for (int64_t row = 0; row < n; ++row) {
    EXPECT_EQ(int8.scales.values[row], round_to_scale(ScaleType::F16, row_amax(weights, k, row, 0, k) / 127.0));
  }
  // MX: the shared exponent is floor(log2(amax)) - 2 for e2m1 (max 6 = 1.5 * 2^2).
  QuantizedWeights mx = quantize_weights(FormatSpec::parse("mxfp4"), weights, n, k);
  ASSERT_EQ(mx.scales.cols, k / 32);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t group = 0; group < k / 32; ++group) {
      uint32_t expected = static_cast<uint32_t>(std::ilogb(row_amax(weights, k, row, group * 32, 32)) - 2 + 127);
      EXPECT_EQ(mx.scales.bits[row * (k / 32) + group], expected);
    }
  }
  // NVFP4: global = amax / (6 * 448); block scales are e4m3 of amax_block / 6 / global, the largest is 448.
  QuantizedWeights nv = quantize_weights(FormatSpec::parse("nvfp4"), weights, n, k);
  double tensor_amax = 0;
  for (float w : weights) tensor_amax = std::max(tensor_amax, std::fabs(static_cast<double>(w)));
  EXPECT_EQ(nv.global_scale, static_cast<float>(tensor_amax / (6.0 * 448.0)));
  float largest_block_scale = 0;
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t group = 0; group < k / 16; ++group) {
      double target = row_amax(weights, k, row, group * 16, 16) / 6.0 / nv.global_scale;
      float scale = nv.scales.values[row * (k / 16) + group];
      EXPECT_EQ(scale, static_cast<float>(round_to_scale(ScaleType::E4M3, target)));
      largest_block_scale = std::max(largest_block_scale, scale);
    }
  }
  EXPECT_EQ(largest_block_scale, 448.0f);
  // GPTQ-style zero point: s = (max - min) / 15 with 0 inside the range, z = round(-min / s).
  QuantizedWeights gptq = quantize_weights(FormatSpec::parse("w4a16-int4-g128-zp"), weights, n, k);
  for (int64_t row = 0; row < n; ++row) {
    double low = 0;
    double high = 0;
    for (int64_t c = 0; c < k; ++c) {
      low = std::min(low, static_cast<double>(weights[row * k + c]));
      high = std::max(high, static_cast<double>(weights[row * k + c]));
    }
    float scale = static_cast<float>(round_to_scale(ScaleType::F16, (high - low) / 15.0));
    EXPECT_EQ(gptq.scales.values[row], scale);
    EXPECT_EQ(gptq.zero_points[row], std::nearbyint(-low / scale));
    EXPECT_EQ(gptq.zero_point_bits[row], static_cast<uint32_t>(gptq.zero_points[row]));
  }
}

TEST(Quantize, CodesAreRawBitPatternsOnePerByte) {
  std::vector<float> weights = {-8, -1, 0, 1, 7, 3.5f, -3.5f, 2.5f};  // one channel with amax 8
  QuantizedWeights int4 = quantize_weights(FormatSpec::parse("w4a16-int4-ch:scale=f32"), weights, 1, 8);
  EXPECT_EQ(int4.scales.values[0], 8.0f / 7.0f);
  // -8/(8/7) = -7 -> 0x9; -1 -> -0.875 -> -1 = 0xF; 0; 0.875 -> 1; 7 -> 6.125 -> 6; 3.0625 -> 3; -3 = 0xD; 2.1875 -> 2
  EXPECT_EQ(int4.codes, (std::vector<uint8_t>{0x9, 0xF, 0x0, 0x1, 0x6, 0x3, 0xD, 0x2}));
  std::vector<float> fp_weights = {6, -6, 0.5f, -0.25f, 3, 2.5f, 1, 5};
  QuantizedWeights fp4 = quantize_weights(FormatSpec::parse("w4a16-fp4-ch:scale=f32"), fp_weights, 1, 8);
  EXPECT_EQ(fp4.scales.values[0], 1.0f);
  // 6 = 0x7, -6 = 0xF, 0.5 = 0x1, -0.25 ties to -0 = 0x8, 3 = 0x5, 2.5 ties to 2 = 0x4, 1 = 0x2, 5 ties to 4 = 0x6
  EXPECT_EQ(fp4.codes, (std::vector<uint8_t>{0x7, 0xF, 0x1, 0x8, 0x5, 0x4, 0x2, 0x6}));
}

TEST(Quantize, ActivationsPerTokenPerTensorPerGroup) {
  const int64_t m = 8;
  const int64_t k = 256;
  std::vector<float> activations = test_matrix(m, k, 21);

  QuantizedActivations int8 = quantize_activations(FormatSpec::parse("w8a8-int8-ch"), activations, m, k);
  ASSERT_EQ(int8.scales.rows, m);
  ASSERT_EQ(int8.scales.cols, 1);
  ASSERT_TRUE(int8.values.empty());
  std::vector<float> int8_dq = dequantize(int8);
  for (int64_t row = 0; row < m; ++row) {
    float scale = static_cast<float>(row_amax(activations, k, row, 0, k) / 127.0);
    EXPECT_EQ(int8.scales.values[row], scale);
    for (int64_t c = 0; c < k; ++c) {
      ASSERT_LE(std::fabs(activations[row * k + c] - int8_dq[row * k + c]), scale / 2 * (1 + 1e-6));
    }
  }

  QuantizedActivations fp8 = quantize_activations(FormatSpec::parse("w8a8-fp8-tensor"), activations, m, k);
  ASSERT_EQ(fp8.scales.values.size(), 1u);
  double amax = 0;
  for (int64_t row = 0; row < m; ++row) amax = std::max(amax, row_amax(activations, k, row, 0, k));
  EXPECT_EQ(fp8.scales.values[0], static_cast<float>(amax / 448.0));
  std::vector<float> fp8_dq = dequantize(fp8);
  for (size_t i = 0; i < activations.size(); ++i) {
    ASSERT_LE(std::fabs(activations[i] - fp8_dq[i]), std::fabs(activations[i]) / 16 + fp8.scales.values[0] * 0x1.0p-10);
  }

  QuantizedActivations groups = quantize_activations(FormatSpec::parse("w8a8-fp8-block128x128"), activations, m, k);
  ASSERT_EQ(groups.scales.rows, m);
  ASSERT_EQ(groups.scales.cols, k / 128);
  EXPECT_EQ(groups.scales.values[3 * 2 + 1], static_cast<float>(row_amax(activations, k, 3, 128, 128) / 448.0));

  QuantizedActivations nv = quantize_activations(FormatSpec::parse("w4a4-nvfp4"), activations, m, k);
  EXPECT_EQ(nv.global_scale, static_cast<float>(amax / (6.0 * 448.0)));
  ASSERT_EQ(nv.scales.cols, k / 16);
  std::vector<float> nv_dq = dequantize(nv);
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t c = 0; c < k; ++c) {
      double scale = static_cast<double>(nv.scales.at(row, c)) * nv.global_scale;
      double w = activations[row * k + c];
      double x = std::fabs(w) / scale;
      double bound = std::max(scale * half_spacing(ElementType::floating(2, 1), std::min(x, 6.0)), std::fabs(w) - 6 * scale);
      ASSERT_LE(std::fabs(w - nv_dq[row * k + c]), bound * (1 + 1e-6) + 1e-30);
    }
  }

  QuantizedActivations unscaled =
      quantize_activations(FormatSpec::parse("w8a8-fp8-ch:act-scale=none"), activations, m, k);
  EXPECT_TRUE(unscaled.scales.empty());
  for (size_t i = 0; i < activations.size(); ++i) {
    ASSERT_EQ(unscaled.codes[i], encode(ElementType::floating(4, 3), activations[i]));
  }
}

TEST(Quantize, SixteenBitActivationsAreRounded) {
  std::vector<float> activations = random_normal(64, 3);
  activations[0] = 1.0f + 0x1.0p-11f;  // an f16 tie
  QuantizedActivations f16 = quantize_activations(FormatSpec::parse("w4a16-int4-g32"), activations, 2, 32);
  QuantizedActivations bf16 = quantize_activations(FormatSpec::parse("w4a16-int4-g32-bf16"), activations, 2, 32);
  EXPECT_TRUE(f16.codes.empty());
  EXPECT_EQ(f16.values[0], 1.0f);
  for (size_t i = 0; i < activations.size(); ++i) {
    EXPECT_EQ(f16.values[i], round_to_f16(activations[i]));
    EXPECT_EQ(f16.bits16[i], float_to_f16_bits(activations[i]));
    EXPECT_EQ(bf16.values[i], round_to_bf16(activations[i]));
    EXPECT_EQ(bf16.bits16[i], float_to_bf16_bits(activations[i]));
  }
  EXPECT_EQ(dequantize(f16), f16.values);
}

TEST(Quantize, AllZeroCellsStayZero) {
  std::vector<float> weights(2 * 64, 0.0f);
  for (int c = 32; c < 64; ++c) weights[c] = 1.0f;  // row 0: one zero group and one non-zero group
  for (const char* spec : {"w4a16-int4-g32", "w4a16-int4-g32-zp", "w4a16-int4-g32-fzp", "mxfp4", "nvfp4", "mxint4",
                           "w8a8-fp8-tensor"}) {
    std::vector<float> dq = dequantize(quantize_weights(FormatSpec::parse(spec), weights, 2, 64));
    for (size_t i = 0; i < dq.size(); ++i) ASSERT_NEAR(dq[i], weights[i], 0.2) << spec << " at " << i;
    EXPECT_EQ(dq[0], 0.0f) << spec;
  }
}

TEST(Quantize, BadShapesNameTheField) {
  std::vector<float> weights = random_normal(64 * 100, 1);
  try {
    quantize_weights(FormatSpec::parse("w4a16-int4-g128"), weights, 64, 100);
    ADD_FAILURE();
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("group size: ", 0), 0u) << error.what();
  }
  try {
    quantize_weights(FormatSpec::parse("w4a16-int4-ch"), weights, 64, 99);
    ADD_FAILURE();
  } catch (const InputError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("weights: ", 0), 0u) << error.what();
  }
  EXPECT_THROW(quantize_activations(FormatSpec::parse("w8a8-fp8-block128x128"), weights, 64, 100), InputError);
}

TEST(RandomData, DeterministicAndNormal) {
  RandomGenerator first(0);
  EXPECT_EQ(first.next(), 0xE220A8397B1DCDAFull);  // the published first splitmix64 output for seed 0
  EXPECT_EQ(random_normal(100, 42), random_normal(100, 42));
  EXPECT_NE(random_normal(100, 42), random_normal(100, 43));
  std::vector<float> values = random_normal(200000, 9);
  double sum = 0;
  double squares = 0;
  for (float v : values) {
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  double mean = sum / values.size();
  double stddev = std::sqrt(squares / values.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stddev, 1.0, 0.01);
  std::vector<float> uniform(10000);
  fill_random_uniform(uniform, 3, -2.0f, 3.0f);
  for (float v : uniform) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
  }
}

}  // namespace
}  // namespace qtune

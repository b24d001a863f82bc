// The CPU reference GEMM against a naive triple loop in f64 over independently dequantized elements.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/quantize.hpp"
#include "kernels/reference.hpp"

namespace qtune {
namespace {

double naive_weight(const QuantizedWeights& w, int64_t row, int64_t col) {
  double value = decode(w.format.weight, w.codes[static_cast<size_t>(row * w.k + col)]);
  double zero = w.zero_points.empty() ? 0.0 : w.zero_points[static_cast<size_t>(w.scales.index(row, col))];
  return (value - zero) * static_cast<double>(w.scales.at(row, col)) * static_cast<double>(w.global_scale);
}

double naive_activation(const QuantizedActivations& a, int64_t row, int64_t col) {
  size_t i = static_cast<size_t>(row * a.k + col);
  if (!a.format.activation_is_quantized()) return a.values[i];
  return static_cast<double>(decode(element_type_of(a.format.activation), a.codes[i])) *
         static_cast<double>(a.scales.at(row, col)) * static_cast<double>(a.global_scale);
}

std::vector<double> naive_gemm(const QuantizedActivations& a, const QuantizedWeights& w, const std::vector<float>& bias) {
  std::vector<double> c(static_cast<size_t>(a.m * w.n));
  for (int64_t i = 0; i < a.m; ++i) {
    for (int64_t j = 0; j < w.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < a.k; ++p) sum += naive_activation(a, i, p) * naive_weight(w, j, p);
      c[static_cast<size_t>(i * w.n + j)] = sum + (bias.empty() ? 0.0 : bias[static_cast<size_t>(j)]);
    }
  }
  return c;
}

double relative_difference(const std::vector<float>& out, const std::vector<double>& ref) {
  double difference = 0;
  double norm = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    difference += (out[i] - ref[i]) * (out[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(difference / norm);
}

struct Problem {
  QuantizedActivations a;
  QuantizedWeights w;
  std::vector<float> bias;
};

Problem make_problem(const std::string& spec, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  FormatSpec format = FormatSpec::parse(spec);
  std::vector<float> weights = random_normal(static_cast<size_t>(n * k), seed, 0.0f, 0.05f);
  std::vector<float> activations = random_normal(static_cast<size_t>(m * k), seed + 1);
  return {quantize_activations(format, activations, m, k), quantize_weights(format, weights, n, k),
          random_normal(static_cast<size_t>(n), seed + 2)};
}

TEST(Reference, MatchesNaiveTripleLoopForEveryPreset) {
  std::vector<std::string> specs;
  for (const FormatPreset& preset : format_presets()) specs.push_back(preset.name);
  for (const char* extra : {"w4a16-int4-g64-fzp-bf16", "w8a8-int8-ch:act-scale=g64", "w8a8-fp8-ch:act-scale=none",
                            "w4a4-int4-g32:act-scale=tensor", "w8a16-int8-ch:out=bf16"}) {
    specs.push_back(extra);
  }
  for (const std::string& spec : specs) {
    SCOPED_TRACE(spec);
    Problem problem = make_problem(spec, 5, 128, 256, 100);
    std::vector<double> expected = naive_gemm(problem.a, problem.w, problem.bias);
    ReferenceOptions options;
    options.bias = problem.bias;
    options.accumulation = Accumulation::F64;
    ReferenceResult f64 = reference_gemm(problem.a, problem.w, options);
    ASSERT_EQ(f64.m, 5);
    ASSERT_EQ(f64.n, 128);
    EXPECT_LT(relative_difference(f64.unrounded, expected), 1e-7);
    options.accumulation = Accumulation::F32;
    ReferenceResult f32 = reference_gemm(problem.a, problem.w, options);
    EXPECT_LT(relative_difference(f32.unrounded, expected), 1e-5);
    EXPECT_GT(relative_difference(f32.unrounded, expected), 0.0);  // f32 really accumulates in f32
    const bool bf16 = FormatSpec::parse(spec).output == OutputType::BF16;
    for (size_t i = 0; i < f32.unrounded.size(); ++i) {
      float rounded = bf16 ? round_to_bf16(f32.unrounded[i]) : round_to_f16(f32.unrounded[i]);
      ASSERT_EQ(f32.output[i], rounded);
      ASSERT_EQ(f32.output_bits[i], bf16 ? float_to_bf16_bits(f32.unrounded[i]) : float_to_f16_bits(f32.unrounded[i]));
    }
    EXPECT_LT(relative_error(f32.output, f64.unrounded), default_tolerance(FormatSpec::parse(spec)) / 4);
  }
}

TEST(Reference, WithoutBiasAndWithOneThread) {
  Problem problem = make_problem("w4a16-int4-g128-zp", 3, 300, 128, 7);  // N not a multiple of the row chunk
  ReferenceOptions options;
  options.threads = 1;
  options.accumulation = Accumulation::F64;
  ReferenceResult result = reference_gemm(problem.a, problem.w, options);
  EXPECT_LT(relative_difference(result.unrounded, naive_gemm(problem.a, problem.w, {})), 1e-7);
}

// The tolerance passes what a correct kernel does differently and fails what a wrong one does.
TEST(Reference, DefaultToleranceSeparatesCorrectFromWrong) {
  for (const char* spec : {"w4a16-int4-g128-zp", "w4a16-int4-g128-bf16", "nvfp4", "w8a8-fp8-block128x128"}) {
    SCOPED_TRACE(spec);
    Problem problem = make_problem(spec, 16, 256, 512, 3);
    ReferenceResult reference = reference_gemm(problem.a, problem.w);
    const double tolerance = default_tolerance(problem.w.format);
    const bool bf16 = problem.w.format.output == OutputType::BF16 || problem.w.format.activation == ActivationType::BF16;
    auto round16 = [&](double v) { return bf16 ? round_to_bf16(static_cast<float>(v)) : round_to_f16(static_cast<float>(v)); };
    // Like a kernel: weights dequantized into the 16-bit type, products summed in f32 in another order.
    std::vector<float> kernel_like(reference.output.size());
    std::vector<float> wrong_zero(reference.output.size());
    std::vector<float> wrong_scale(reference.output.size());
    for (int64_t i = 0; i < problem.a.m; ++i) {
      for (int64_t j = 0; j < problem.w.n; ++j) {
        float sum = 0;
        double zero_shifted = 0;
        double scale_swapped = 0;
        for (int64_t p = problem.a.k - 1; p >= 0; --p) {
          double a = naive_activation(problem.a, i, p);
          sum += static_cast<float>(a) * round16(naive_weight(problem.w, j, p));
          double scale = static_cast<double>(problem.w.scales.at(j, p)) * problem.w.global_scale;
          zero_shifted += a * (naive_weight(problem.w, j, p) - scale);  // zero point (or code) off by one
          scale_swapped += a * naive_weight(problem.w, (j + 1) % problem.w.n, p) / problem.w.scales.at((j + 1) % problem.w.n, p) * problem.w.scales.at(j, p);
        }
        size_t index = static_cast<size_t>(i * problem.w.n + j);
        kernel_like[index] = round16(sum);
        wrong_zero[index] = round16(zero_shifted);
        wrong_scale[index] = round16(scale_swapped);
      }
    }
    EXPECT_LT(relative_error(kernel_like, reference.output), tolerance / 2);
    // One code step is large next to the weights' values only for integer and 4-bit float weights.
    if (problem.w.format.weight.is_integer() || problem.w.format.weight.bits <= 4) {
      EXPECT_GT(relative_error(wrong_zero, reference.output), 4 * tolerance);
    }
    EXPECT_GT(relative_error(wrong_scale, reference.output), 4 * tolerance);
  }
  EXPECT_LE(default_tolerance(FormatSpec::parse("w4a16-int4-g128")), default_tolerance(FormatSpec::parse("w4a16-int4-g128-bf16")));
}

TEST(Reference, RelativeError) {
  std::vector<float> reference = {3, 4, 0};
  EXPECT_EQ(relative_error(reference, reference), 0.0);
  EXPECT_NEAR(relative_error({3.03f, 4.04f, 0}, reference), 0.01, 1e-6);
  EXPECT_EQ(relative_error({3, std::numeric_limits<float>::quiet_NaN(), 0}, reference), HUGE_VAL);
  EXPECT_EQ(relative_error({3, 4, -HUGE_VALF}, reference), HUGE_VAL);
  EXPECT_EQ(relative_error({0, 0}, {0, 0}), 0.0);
  EXPECT_EQ(relative_error({3, 4}, {0, 0}), 5.0);
  EXPECT_THROW(relative_error({1}, {1, 2}), Error);
}

TEST(Reference, MismatchedInputsNameTheField) {
  Problem problem = make_problem("w8a8-int8-ch", 2, 16, 64, 1);
  Problem other_k = make_problem("w8a8-int8-ch", 2, 16, 32, 1);
  Problem other_format = make_problem("w8a8-fp8-ch", 2, 16, 64, 1);
  auto expect_field = [](auto&& call, const std::string& field) {
    try {
      call();
      ADD_FAILURE() << "accepted";
    } catch (const InputError& error) {
      EXPECT_EQ(std::string(error.what()).rfind(field + ": ", 0), 0u) << error.what();
    }
  };
  expect_field([&] { reference_gemm(other_k.a, problem.w); }, "K");
  expect_field([&] { reference_gemm(other_format.a, problem.w); }, "format");
  std::vector<float> short_bias(3, 1.0f);
  ReferenceOptions options;
  options.bias = short_bias;
  expect_field([&] { reference_gemm(problem.a, problem.w, options); }, "bias");
}

// A mid-size problem runs quickly and agrees with naive sums at sampled outputs.
TEST(Reference, LargeProblemIsFastAndRight) {
  const int64_t m = 64;
  const int64_t n = 2048;
  const int64_t k = 2048;
  Problem problem = make_problem("w4a16-int4-g128", m, n, k, 17);
  auto start = std::chrono::steady_clock::now();
  ReferenceResult result = reference_gemm(problem.a, problem.w);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
  for (int64_t sample = 0; sample < 50; ++sample) {
    int64_t i = (sample * 7) % m;
    int64_t j = (sample * 613) % n;
    double sum = 0;
    double magnitude = 0;
    for (int64_t p = 0; p < k; ++p) {
      double product = naive_activation(problem.a, i, p) * naive_weight(problem.w, j, p);
      sum += product;
      magnitude += std::fabs(product);
    }
    ASSERT_NEAR(result.unrounded[static_cast<size_t>(i * n + j)], sum, 1e-5 * magnitude);
  }
}

}  // namespace
}  // namespace qtune

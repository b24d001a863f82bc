// Host operands of the baselines, checked by doing what cuBLASLt is documented to do with them: decode the bytes,
// apply each scale where the documented layout says it lives, multiply in f64, and compare with the reference the
// operands carry. A scale placed at the wrong index fails here, on a machine without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "kernels/codec.hpp"
#include "kernels/error.hpp"
#include "kernels/reference.hpp"
#include "tuner/baselines/lt_layout.hpp"
#include "tuner/baselines/operands.hpp"
#include "tuner/baselines/verify.hpp"

namespace qtune::baselines {
namespace {

float f16_at(const std::vector<uint8_t>& bytes, size_t index, bool bf16) {
  uint16_t bits = 0;
  std::memcpy(&bits, bytes.data() + index * 2, 2);
  return bf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
}

// C[row] as cuBLASLt computes it from the uploaded bytes and scales, per the documented scale modes.
std::vector<float> simulate_rows(const HostOperands& operands) {
  const int64_t n = operands.problem.n;
  const int64_t k = operands.problem.k;
  const ElementType e4m3 = ElementType::floating(4, 3);
  const Block128ScaleLayout blocks = block128_scale_layout(operands.executed);
  std::vector<float> c;
  for (const int64_t row : operands.reference_rows) {
    for (int64_t col = 0; col < n; ++col) {
      double sum = 0;
      for (int64_t i = 0; i < k; ++i) {
        const size_t a_index = static_cast<size_t>(row * k + i);
        const size_t w_index = static_cast<size_t>(col * k + i);
        double a = 0;
        double w = 0;
        switch (operands.kind) {
          case BaselineKind::F16:
          case BaselineKind::BF16: {
            const bool bf16 = operands.kind == BaselineKind::BF16;
            a = f16_at(operands.activation, a_index, bf16);
            w = f16_at(operands.weight, w_index, bf16);
            break;
          }
          case BaselineKind::Fp8Tensor:
            a = decode(e4m3, operands.activation[a_index]) * operands.activation_scales.at(0);
            w = decode(e4m3, operands.weight[w_index]) * operands.weight_scales.at(0);
            break;
          case BaselineKind::Fp8Outer:
            a = decode(e4m3, operands.activation[a_index]) * operands.activation_scales.at(static_cast<size_t>(row));
            w = decode(e4m3, operands.weight[w_index]) * operands.weight_scales.at(static_cast<size_t>(col));
            break;
          case BaselineKind::Fp8Block128:
            a = decode(e4m3, operands.activation[a_index]) *
                operands.activation_scales.at(blocks.activation_index(row, i / 128));
            w = decode(e4m3, operands.weight[w_index]) *
                operands.weight_scales.at(blocks.weight_index(col / 128, i / 128));
            break;
          case BaselineKind::Int8:
            a = static_cast<int8_t>(operands.activation[a_index]);
            w = static_cast<int8_t>(operands.weight[w_index]);
            break;
        }
        sum += a * w;
      }
      c.push_back(static_cast<float>(sum));
    }
  }
  return c;
}

struct Case {
  BaselineKind kind;
  GemmProblem problem;
};

class OperandsMatchTheirReference : public testing::TestWithParam<Case> {};

TEST_P(OperandsMatchTheirReference, WhenReadAsCublasLtDocumentsIt) {
  const Case c = GetParam();
  const int64_t executed = executed_m(c.kind, c.problem.m);
  const HostOperands operands = make_host_operands(c.kind, c.problem, executed, 7);
  const size_t element_bytes = c.kind == BaselineKind::F16 || c.kind == BaselineKind::BF16 ? 2 : 1;
  ASSERT_EQ(operands.activation.size(), static_cast<size_t>(executed * c.problem.k) * element_bytes);
  ASSERT_EQ(operands.weight.size(), static_cast<size_t>(c.problem.n * c.problem.k) * element_bytes);
  ASSERT_EQ(operands.reference.size(), operands.reference_rows.size() * static_cast<size_t>(c.problem.n));
  for (const int64_t row : operands.reference_rows) EXPECT_LT(row, c.problem.m);

  std::vector<float> simulated = simulate_rows(operands);
  if (c.kind == BaselineKind::Int8) {
    // The int32 GEMM is exact; the w8a8-int8 reference is that times per-token and per-channel scales.
    for (size_t r = 0; r < operands.reference_rows.size(); ++r) {
      for (int64_t col = 0; col < c.problem.n; ++col) {
        const size_t index = r * static_cast<size_t>(c.problem.n) + static_cast<size_t>(col);
        ASSERT_EQ(static_cast<int32_t>(simulated[index]), operands.exact_reference[index])
            << "row " << r << " col " << col;
        simulated[index] *= operands.int8_activation_scales.at(static_cast<size_t>(operands.reference_rows[r])) *
                            operands.int8_weight_scales.at(static_cast<size_t>(col));
      }
    }
  }
  EXPECT_LT(relative_error(simulated, operands.reference), 1e-5)
      << baseline_id(c.kind) << ": the scales are not where cuBLASLt reads them, or the reference is off";
  EXPECT_GT(operands.tolerance, 0.0);
  EXPECT_LT(operands.tolerance, 0.05);
}

INSTANTIATE_TEST_SUITE_P(
    Baselines, OperandsMatchTheirReference,
    testing::Values(Case{BaselineKind::F16, {3, 24, 40}}, Case{BaselineKind::BF16, {5, 16, 48}},
                    Case{BaselineKind::Fp8Tensor, {4, 32, 64}}, Case{BaselineKind::Fp8Outer, {7, 40, 64}},
                    Case{BaselineKind::Fp8Block128, {5, 256, 384}}, Case{BaselineKind::Fp8Block128, {1, 128, 128}},
                    Case{BaselineKind::Int8, {6, 24, 64}}),
    [](const testing::TestParamInfo<Case>& param_info) {
      std::string name = baseline_id(param_info.param.kind) + "_M" + std::to_string(param_info.param.problem.m);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

TEST(Operands, AreDeterministicInTheSeed) {
  const HostOperands a = make_host_operands(BaselineKind::Fp8Outer, {4, 16, 32}, 4, 11);
  const HostOperands b = make_host_operands(BaselineKind::Fp8Outer, {4, 16, 32}, 4, 11);
  const HostOperands c = make_host_operands(BaselineKind::Fp8Outer, {4, 16, 32}, 4, 12);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.weight, b.weight);
  EXPECT_EQ(a.weight_scales, b.weight_scales);
  EXPECT_NE(a.weight, c.weight);
}

// The weight is kept between calls (a bench draws it once for all its M): what comes back for a key is what drawing
// it afresh gives, whichever weights were drawn in between, and the kept one never leaks into another key.
TEST(Operands, TheKeptWeightIsTheOneTheKeyDraws) {
  for (const BaselineKind kind : {BaselineKind::F16, BaselineKind::BF16, BaselineKind::Fp8Block128}) {
    const HostOperands first = make_host_operands(kind, {4, 128, 256}, 4, 21);
    const HostOperands other_m = make_host_operands(kind, {16, 128, 256}, 16, 21);
    const HostOperands other_seed = make_host_operands(kind, {4, 128, 256}, 4, 22);
    const HostOperands other_shape = make_host_operands(kind, {4, 256, 256}, 4, 21);
    const HostOperands again = make_host_operands(kind, {4, 128, 256}, 4, 21);
    EXPECT_EQ(first.weight, other_m.weight) << baseline_id(kind);
    EXPECT_NE(first.weight, other_seed.weight) << baseline_id(kind);
    EXPECT_NE(first.weight.size(), other_shape.weight.size()) << baseline_id(kind);
    EXPECT_EQ(first.weight, again.weight) << baseline_id(kind);
    EXPECT_EQ(first.reference, again.reference) << baseline_id(kind);
    EXPECT_EQ(first.weight_scales, again.weight_scales) << baseline_id(kind);
  }
  // BF16 after F16 of the same shape and seed: other bits, not the kept F16 weight.
  EXPECT_NE(make_host_operands(BaselineKind::F16, {4, 128, 256}, 4, 21).weight,
            make_host_operands(BaselineKind::BF16, {4, 128, 256}, 4, 21).weight);
}

TEST(Operands, AreNeverAllZero) {
  const HostOperands operands = make_host_operands(BaselineKind::F16, {2, 8, 16}, 2, 3);
  EXPECT_TRUE(std::any_of(operands.activation.begin(), operands.activation.end(), [](uint8_t b) { return b != 0; }));
  EXPECT_TRUE(std::any_of(operands.weight.begin(), operands.weight.end(), [](uint8_t b) { return b != 0; }));
  const auto zero = std::count(operands.reference.begin(), operands.reference.end(), 0.0F);
  EXPECT_EQ(zero, 0);
}

TEST(Operands, ScalesDifferAcrossBlocksSoMisplacedScalesShow) {
  const HostOperands operands = make_host_operands(BaselineKind::Fp8Block128, {8, 512, 1024}, 8, 5);
  const Block128ScaleLayout layout = block128_scale_layout(operands.executed);
  std::vector<float> used;
  for (int64_t nb = 0; nb < layout.n_blocks; ++nb) {
    for (int64_t kb = 0; kb < layout.k_blocks; ++kb)
      used.push_back(operands.weight_scales[layout.weight_index(nb, kb)]);
  }
  const auto [low, high] = std::minmax_element(used.begin(), used.end());
  EXPECT_GT(*high / *low, 8.0F) << "weight block scales too alike to catch a layout error";
  const auto [a_low, a_high] =
      std::minmax_element(operands.activation_scales.begin(), operands.activation_scales.end());
  EXPECT_GT(*a_high / *a_low, 8.0F) << "activation group scales too alike to catch a layout error";
  // Per-channel and per-token scales too.
  const HostOperands outer = make_host_operands(BaselineKind::Fp8Outer, {16, 256, 512}, 16, 5);
  const auto [w_low, w_high] = std::minmax_element(outer.weight_scales.begin(), outer.weight_scales.end());
  EXPECT_GT(*w_high / *w_low, 8.0F) << "per-channel scales too alike to catch a layout error";
  const auto [t_low, t_high] = std::minmax_element(outer.activation_scales.begin(), outer.activation_scales.end());
  EXPECT_GT(*t_high / *t_low, 8.0F) << "per-token scales too alike to catch a layout error";
}

TEST(Operands, PaddedRowsAreRandomButNeverChecked) {
  const HostOperands operands = make_host_operands(BaselineKind::Fp8Block128, {17, 128, 256}, 20, 9);
  EXPECT_EQ(operands.executed.m, 20);
  EXPECT_EQ(operands.problem.m, 17);
  EXPECT_EQ(operands.activation.size(), 20u * 256u);
  EXPECT_EQ(operands.activation_scales.size(), 20u * 2u);
  EXPECT_EQ(operands.reference_rows.back(), 16);
  EXPECT_THROW(make_host_operands(BaselineKind::F16, {17, 8, 8}, 16, 1), Error);
}

// ---------------------------------------------------------------- compare_with_reference

// A D buffer a correct GPU would produce: the reference rounded to the output type, every row written.
std::vector<uint8_t> correct_output(const HostOperands& operands) {
  const int64_t n = operands.problem.n;
  std::vector<uint8_t> d(static_cast<size_t>(operands.executed.m * n) * operands.output_element_bytes());
  for (int64_t row = 0; row < operands.executed.m; ++row) {
    const auto it = std::find(operands.reference_rows.begin(), operands.reference_rows.end(), row);
    for (int64_t col = 0; col < n; ++col) {
      const size_t index = static_cast<size_t>(row * n + col);
      const size_t r = static_cast<size_t>(it - operands.reference_rows.begin());
      if (operands.kind == BaselineKind::Int8) {
        const int32_t value = it != operands.reference_rows.end()
                                  ? operands.exact_reference[r * static_cast<size_t>(n) + static_cast<size_t>(col)]
                                  : 1;
        std::memcpy(d.data() + index * 4, &value, 4);
      } else {
        const float value = it != operands.reference_rows.end()
                                ? operands.reference[r * static_cast<size_t>(n) + static_cast<size_t>(col)]
                                : 0.5F;
        const uint16_t bits = operands.kind == BaselineKind::F16 ? float_to_f16_bits(value) : float_to_bf16_bits(value);
        std::memcpy(d.data() + index * 2, &bits, 2);
      }
    }
  }
  return d;
}

TEST(CompareWithReference, PassesACorrectOutput) {
  for (const BaselineKind kind : {BaselineKind::F16, BaselineKind::Fp8Outer, BaselineKind::Int8}) {
    OperandOptions options;
    options.max_verify_rows = 4;  // some rows stay unchecked
    const HostOperands operands = make_host_operands(kind, {9, 16, 64}, 9, 2, options);
    const VerifyResult result = compare_with_reference(operands, correct_output(operands));
    EXPECT_TRUE(result.passed) << baseline_id(kind) << ": " << result.message;
    EXPECT_EQ(result.rows_checked, 4);
    EXPECT_EQ(result.unwritten, 0);
    EXPECT_LT(result.rel_error, result.tolerance);
  }
}

TEST(CompareWithReference, CatchesPoisonLeftInAnUncheckedRow) {
  OperandOptions options;
  options.max_verify_rows = 2;  // rows 0 and 8 are checked
  const HostOperands operands = make_host_operands(BaselineKind::BF16, {9, 16, 32}, 9, 2, options);
  std::vector<uint8_t> output = correct_output(operands);
  const size_t element = 4 * 16 + 3;  // row 4: not a checked row
  output[element * 2] = output_poison_byte(BaselineKind::BF16);
  output[element * 2 + 1] = output_poison_byte(BaselineKind::BF16);
  const VerifyResult result = compare_with_reference(operands, output);
  EXPECT_FALSE(result.passed);
  EXPECT_EQ(result.unwritten, 1);
  EXPECT_NE(result.message.find("unwritten"), std::string::npos) << result.message;
}

TEST(CompareWithReference, CatchesAWrongValue) {
  const HostOperands operands = make_host_operands(BaselineKind::F16, {2, 8, 32}, 2, 4);
  std::vector<uint8_t> output = correct_output(operands);
  // Every output of row 1 is scaled by 1.5: what a misplaced scale looks like.
  for (int64_t col = 0; col < 8; ++col) {
    const size_t index = static_cast<size_t>(8 + col);
    uint16_t bits = 0;
    std::memcpy(&bits, output.data() + index * 2, 2);
    bits = float_to_f16_bits(f16_bits_to_float(bits) * 1.5F);
    std::memcpy(output.data() + index * 2, &bits, 2);
  }
  const VerifyResult result = compare_with_reference(operands, output);
  EXPECT_FALSE(result.passed) << result.message;
  EXPECT_GT(result.rel_error, result.tolerance);
}

TEST(CompareWithReference, Int8MustBeExact) {
  const HostOperands operands = make_host_operands(BaselineKind::Int8, {3, 8, 64}, 3, 4);
  std::vector<uint8_t> output = correct_output(operands);
  int32_t value = 0;
  std::memcpy(&value, output.data() + 4 * 5, 4);
  value += 1;  // off by one: within any float tolerance, still wrong
  std::memcpy(output.data() + 4 * 5, &value, 4);
  const VerifyResult result = compare_with_reference(operands, output);
  EXPECT_FALSE(result.passed) << result.message;
  EXPECT_EQ(result.exact_mismatches, 1);
}

TEST(CompareWithReference, RejectsAWrongSizedBuffer) {
  const HostOperands operands = make_host_operands(BaselineKind::F16, {2, 8, 16}, 2, 4);
  EXPECT_THROW(compare_with_reference(operands, std::vector<uint8_t>(7)), Error);
}

TEST(PoisonPattern, IsNanForSixteenBitOutputsAndImplausibleForInt32) {
  const uint8_t byte = output_poison_byte(BaselineKind::F16);
  const uint8_t pair[2] = {byte, byte};
  EXPECT_TRUE(std::isnan(decode_output(BaselineKind::F16, OutputType::F16, pair, 0)));
  EXPECT_TRUE(std::isnan(decode_output(BaselineKind::BF16, OutputType::BF16, pair, 0)));
  EXPECT_TRUE(std::isnan(decode_output(BaselineKind::Fp8Outer, OutputType::BF16, pair, 0)));
  const uint8_t int8_byte = output_poison_byte(BaselineKind::Int8);
  const uint8_t word[4] = {int8_byte, int8_byte, int8_byte, int8_byte};
  EXPECT_GT(std::abs(decode_output(BaselineKind::Int8, OutputType::BF16, word, 0)), 127.0F * 127.0F * 131072.0F * 0.9F);
}

}  // namespace
}  // namespace qtune::baselines
